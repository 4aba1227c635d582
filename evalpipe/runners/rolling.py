"""Rolling windows for lm-eval `loglikelihood_rolling` (perplexity) requests, shared by the runners that compute
them (local, and OpenAI-compatible endpoints with prompt logprobs): a text's tokens cut into windows of at most
`max_seq_len` predicted tokens by lm-eval's own `get_rolling_token_windows` and `make_disjoint_window` (the first
window conditioned on the prefix token, each later one on the tokens before it), so the windows are lm-eval's.
The text's log-likelihood is the sum over its windows of the predicted tokens' log-probabilities."""
from __future__ import annotations

from typing import Any

from evalpipe.core.errors import ConfigError


def prefix_token_id(tok: Any) -> int:
    """The token the first window is conditioned on, as lm-eval's HF and API models choose it: BOS, else EOS."""
    return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id


def windows(tokens: list[int], prefix: int, max_seq_len: int) -> list[tuple[list[int], list[int]]]:
    """[(context tokens, predicted tokens), ...] of one text, disjoint, as lm-eval cuts them (context_len 1)."""
    try:
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
    except ImportError:
        raise ConfigError("loglikelihood_rolling requests need lm-eval: pip install 'evalpipe[interop]' "
                          "(lm-eval==0.4.13)") from None
    return [make_disjoint_window(w) for w in get_rolling_token_windows(
        token_list=list(tokens), prefix_token=prefix, max_seq_len=int(max_seq_len), context_len=1)]
