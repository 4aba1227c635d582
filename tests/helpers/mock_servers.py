"""The loopback model server (benchmarks/mock_server.py) in a process of its own, for tests whose clients are other
processes (`evalpipe run` children). In-process tests use benchmarks.mock_server.serve_in_thread instead."""
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def mock_server_process(latency: float = 0.0) -> Iterator[int]:
    """Starts `python -m benchmarks.mock_server` and yields its port (it prints `port <n>` first)."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.mock_server", "--latency", str(latency)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield int(proc.stdout.readline().split()[1])
    finally:
        proc.terminate()
        proc.wait(10)


def litellm_models(port: int, n: int) -> str:
    """YAML lines for `models:` m0..m{n-1}, each a litellm model openai/mock-<i> on the mock at port."""
    return "".join(f"  m{i}:\n    runner: litellm\n    model: openai/mock-{i}\n"
                   f"    api_base: http://127.0.0.1:{port}/v1\n    params: {{max_tokens: 8}}\n" for i in range(n))


class LogprobsMock:
    """A loopback OpenAI-compatible server that scores prompts (to be served with benchmarks.mock_server's
    serve_in_thread): legacy `/v1/completions` with `echo` + `logprobs` as vLLM returns them (tokens, token_logprobs,
    top_logprobs, text_offset; the first token has no logprob), and vLLM's tokenizer endpoints (`/tokenizer_info`,
    `/tokenize`, `/detokenize`) that lm-eval's `local-completions` model uses. Tokens are pieces of up to four word
    characters (a piece that starts a word carries its leading spaces), or single punctuation marks; each token's
    logprob is a fixed function of the text before it and the token, and it is the greedy choice when that logprob is
    above -1. `logprobs=False` answers without logprobs
    (as an endpoint that doesn't return prompt logprobs); `requests` keeps the completions request bodies."""

    TOKEN = r"\s*\w{1,4}|\s*[^\w\s]|\s+"  # long words make several tokens: sums over more than one

    def __init__(self, logprobs: bool = True):
        self.logprobs = logprobs
        self.vocab: dict[str, int] = {"<eos>": 0}
        self.requests: list[dict] = []
        self.latency = 0.0
        self.keep_bodies = False

    def tokens(self, text: str) -> list[str]:
        import re

        return re.findall(self.TOKEN, text)

    def ids(self, text: str) -> list[int]:
        return [self.vocab.setdefault(t, len(self.vocab)) for t in self.tokens(text)]

    def text_of(self, ids: list[int]) -> str:
        words = {i: t for t, i in self.vocab.items()}
        return "".join(words[i] for i in ids)

    @staticmethod
    def logprob(before: str, token: str) -> float:
        import hashlib

        h = int.from_bytes(hashlib.sha256(f"{before}\x00{token}".encode()).digest()[:4], "big")
        return -(h % 4000) / 1000  # in (-4, 0]

    def score(self, prompt: str) -> dict:
        toks = self.tokens(prompt) + [" the"]  # max_tokens 1: one generated token after the prompt
        offsets, lps, tops, pos = [], [], [], 0
        for k, tok in enumerate(toks):
            offsets.append(pos)
            lp = None if k == 0 else self.logprob(prompt[:pos], tok)
            lps.append(lp)
            tops.append(None if lp is None else {tok: lp} if lp > -1 else {tok: lp, " other": -0.5})
            pos += len(tok)
        return {"tokens": toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}

    def handle(self, method: str, path: str, body: bytes):
        import json

        data = json.loads(body) if body else {}
        js = {"Content-Type": "application/json"}
        if path.endswith("/tokenizer_info"):
            return 200, js, json.dumps({"eos_token": "<eos>", "bos_token": None, "pad_token": None})
        if path.endswith("/tokenize"):
            return 200, js, json.dumps({"tokens": self.ids(data["prompt"])})
        if path.endswith("/detokenize"):
            return 200, js, json.dumps({"prompt": self.text_of(data["tokens"])})
        if not path.endswith("/completions") or path.endswith("/chat/completions"):
            return 404, {}, "not found"
        self.requests.append(data)
        prompts = data["prompt"]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        prompts = [self.text_of(p) if isinstance(p, list) else p for p in prompts]
        choices = [{"index": i, "text": p + " the", "finish_reason": "length",
                    "logprobs": self.score(p) if self.logprobs else None} for i, p in enumerate(prompts)]
        n_in = sum(len(self.tokens(p)) for p in prompts)
        return 200, js, json.dumps({"id": "cmpl-1", "object": "text_completion", "model": data.get("model"),
                                    "choices": choices, "usage": {"prompt_tokens": n_in, "completion_tokens":
                                                                  len(prompts), "total_tokens": n_in + len(prompts)}})


class ModelLogprobsMock:
    """A loopback OpenAI-compatible `/v1/completions` (served with benchmarks.mock_server's serve_in_thread) whose
    echoed prompt logprobs come from a real causal LM (the repo's small local model): prompts as token ids (what
    lm-eval's API models and evalpipe send for rolling windows) or text; `echo` + `logprobs` + `max_tokens 1` as vLLM
    answers them: each prompt token's logprob given the tokens before it (the first has none), the top-1 token, and
    one greedy generated token. `logprobs=False` answers without logprobs; `requests` keeps the request bodies."""

    def __init__(self, model, tokenizer, logprobs: bool = True):
        self.model, self.tok, self.logprobs = model, tokenizer, logprobs
        self.requests: list[dict] = []
        self.latency = 0.0  # (what benchmarks.mock_server's protocol reads of a mock)
        self.keep_bodies = False

    def score(self, ids: list[int]) -> dict:
        import torch

        with torch.inference_mode():
            logits = self.model(torch.tensor([ids], device=self.model.device)).logits[0]
            lps = torch.log_softmax(logits.float(), dim=-1)
        best = lps.argmax(dim=-1).tolist()
        toks = [*ids, best[-1]]  # the prompt, then one generated token
        token_lps = [None] + [float(lps[i - 1, toks[i]]) for i in range(1, len(toks))]
        tops = [None] + [{self.tok.decode([best[i - 1]]): float(lps[i - 1, best[i - 1]])} for i in range(1, len(toks))]
        pieces = [self.tok.decode([t]) for t in toks]
        offsets = [sum(len(p) for p in pieces[:i]) for i in range(len(pieces))]
        return {"tokens": pieces, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}

    def handle(self, method: str, path: str, body: bytes):
        import json

        if not path.endswith("/completions") or path.endswith("/chat/completions"):
            return 404, {}, "not found"
        data = json.loads(body) if body else {}
        self.requests.append(data)
        prompts = data["prompt"]
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        ids = [p if isinstance(p, list) else self.tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        choices = [{"index": i, "text": "", "finish_reason": "length",
                    "logprobs": self.score(p) if self.logprobs else None} for i, p in enumerate(ids)]
        n_in = sum(len(p) for p in ids)
        return 200, {"Content-Type": "application/json"}, json.dumps(
            {"id": "cmpl-1", "object": "text_completion", "model": data.get("model"), "choices": choices,
             "usage": {"prompt_tokens": n_in, "completion_tokens": len(ids), "total_tokens": n_in + len(ids)}})
