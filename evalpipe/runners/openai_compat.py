"""The fast path of the `litellm` runner: OpenAI-compatible `/chat/completions` over one pooled aiohttp session.

Why not litellm or the openai SDK for these: measured here (100 ms server latency, 1000 requests, 100 in flight)
litellm spends ~6 ms of CPU per request and the SDK ~13 ms; on a 2-core machine that CPU, not the server, sets
the pace. This client does what the request needs and nothing else: one shared session with keep-alive
connections, a body encoded once per request, the reply read as bytes and parsed once; the response body is kept
as the text received (no re-encoding). Retries, timeouts and limits are the driver's.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from evalpipe.core.config import ModelConfig
from evalpipe.runners.api import ApiRunner, merge_request_params
from evalpipe.runners.base import ModelError, RetryableError, http_error, parse_retry_after
from evalpipe.tools.base import ChatTurn, ToolCall
from evalpipe.core.types import Generation, RolloutRequest

# Compact JSON text, as `json.dumps(obj, ensure_ascii=False, separators=(",", ":"))` writes it, from a C encoder made
# once: `json.dumps` with options builds a JSONEncoder and its C encoder on every call (~3/4 of encoding a short
# message list). No cycle check: messages are decoded JSON and the loop's dicts, never cyclic.
_c_compact = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, json.JSONEncoder().default, json.encoder.encode_basestring, None, ":", ",", False, False, True) \
    if json.encoder.c_make_encoder else None  # type: ignore[attr-defined]
# (value, end) of the JSON value at the start of a text: `json.loads` without its Python layers around the C scanner
_raw_decode = json.JSONDecoder().raw_decode


def compact_json(obj: Any) -> bytes:
    """`json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()`, byte for byte."""
    if _c_compact is None:  # (an interpreter without json's C speedups)
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return "".join(_c_compact(obj, 0)).encode()


def loads_reply(text: str) -> Any:
    """`json.loads(text)`: the same value, or the same ValueError for text that is not one JSON value."""
    try:
        value, end = _raw_decode(text)
    except ValueError:  # (leading whitespace, or not JSON: json.loads says which)
        return json.loads(text)
    return value if end == len(text) else json.loads(text)  # trailing whitespace is fine, anything else raises


def chat_completions_url(api_base: str) -> str:
    """`https://h/v1` -> `https://h/v1/chat/completions`; a query string stays at the end
    (`https://h/v1?api-version=X` -> `https://h/v1/chat/completions?api-version=X`)."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(api_base.strip())
    path = u.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit(u._replace(path=path))


class OpenAICompatRunner(ApiRunner):
    path = "fast"

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        if not self.api_base:
            from evalpipe.core.errors import ConfigError

            raise ConfigError(f"model {model.key!r}: the OpenAI-compatible path needs `api_base:` "
                              "(e.g. http://127.0.0.1:8000/v1)")
        self.url = chat_completions_url(self.api_base)
        # Local servers need no key; OpenAI itself does (checked here, before any request).
        key = self.resolve_api_key(required=model.api_base is None)
        self.headers = {"Content-Type": "application/json", **{str(k): str(v) for k, v in self.extra_headers.items()}}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        # Everything but the messages is the same for every request: encode it once.
        fixed = {"model": self.bare_model if self.provider else model.model, **self.params, **self.extra_body}
        fixed.pop("messages", None)
        self._fixed = fixed
        self._body_head = _head(fixed)
        self._heads: dict[str, bytes] = {}  # heads with a request's own generation settings, by their JSON
        self.max_connections = int(model.options.get("max_connections", 256))
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tools_json: dict[int, tuple[list, bytes]] = {}  # [tools] encoded schema lists, by list object
        # [spend] batch mode (`options.batch`): a partition's one-shot requests go through the provider's files +
        # batches API (the driver submits, polls and journals the batch id), priced at the batch rate
        self.batch_mode = bool(model.options.get("batch"))
        self.batch_poll_s = float(model.options.get("batch_poll_s", 30.0))
        if self.batch_mode:
            from evalpipe.core.errors import ConfigError
            from evalpipe.runners.pricing import token_prices

            try:
                self._prices = token_prices(model.model, self.provider, model.options.get("pricing"), batch=True)
            except ValueError as exc:
                raise ConfigError(f"model {model.key!r}: options.batch: {exc}") from None

    def identity(self) -> dict[str, Any]:
        """The API runners' identity; with `options.tokenizer` or `max_length` (they cut perplexity texts into
        windows) those too (only then: other fingerprints stay what they were)."""
        ident = super().identity()
        windows = {k: self.model.options[k] for k in ("tokenizer", "max_length") if self.model.options.get(k)}
        if windows:
            ident["rolling_windows"] = windows
        return ident

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # Plain-http endpoints (local servers) skip building an SSL context (~80 ms of CPU).
            ssl: Any = False if self.url.startswith("http://") else True
            connector = aiohttp.TCPConnector(limit=self.max_connections, ttl_dns_cache=300, keepalive_timeout=60,
                                             ssl=ssl)
            # No aiohttp-level total timeout: the driver bounds each attempt (and retries it).
            self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=30), headers=self.headers, skip_auto_headers=("User-Agent",))
            self._loop = loop
        return self._session

    def request_params_problem(self, params: dict[str, Any] | None) -> str | None:
        """A request's own generation settings (RolloutRequest.params) are sent merged over the model's: none."""
        return None

    def _head_for(self, params: dict[str, Any] | None) -> bytes:
        """The body's fixed part with a request's generation settings merged over the model's."""
        if not params:
            return self._body_head
        key = json.dumps(params, sort_keys=True, default=str)
        head = self._heads.get(key)
        if head is None:
            if len(self._heads) > 1024:
                self._heads.clear()
            head = self._heads[key] = _head({**self._fixed, **merge_request_params(self._fixed, params)})
        return head

    async def generate(self, request: RolloutRequest) -> Generation:
        session = self._session if self._session is not None and self._loop is asyncio.get_running_loop() \
            else self._open()
        body = self._head_for(request.params) + compact_json(request.messages) + b"}"
        try:
            async with session.post(self.url, data=body) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise http_error(resp.status, payload.decode("utf-8", "replace"),
                                     parse_retry_after(resp.headers))
        except aiohttp.ClientError as exc:  # refused, reset, dropped mid-reply: the server may be back soon
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        text = payload.decode("utf-8", "replace")
        return parse_chat_completion(text, self)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   request: RolloutRequest | None = None) -> ChatTurn:
        """One turn of a tool-using conversation (evalpipe/runners/tool_loop.py): messages plus tool schemas in, the
        assistant's content and tool calls out. The schemas' JSON is encoded once per distinct list."""
        session = self._session if self._session is not None and self._loop is asyncio.get_running_loop() \
            else self._open()
        tools_json = self._tools_json.get(id(tools))
        if tools_json is None or tools_json[0] is not tools:
            if len(self._tools_json) > 1024:
                self._tools_json.clear()
            tools_json = self._tools_json[id(tools)] = (tools, b',"tools":' + json.dumps(
                tools, ensure_ascii=False, separators=(",", ":")).encode())
        head = self._head_for(request.params if request is not None else None)
        cached = getattr(messages, "encoded", False)  # the loop's WireMessages: encode only the new messages
        if cached is False:
            body = b"".join((head, compact_json(messages), tools_json[1] if tools else b"", b"}"))
        else:
            n, prefix = cached or (0, b"")
            if len(messages) > n:
                new = compact_json(messages[n:])[1:-1]
                prefix = b"".join((prefix, b",", new)) if n else new
                messages.encoded = (len(messages), prefix)  # type: ignore[attr-defined]
            # (one join: no intermediate copies of the growing conversation)
            body = b"".join((head, b"[", prefix, b"]", tools_json[1] if tools else b"", b"}"))
        try:
            async with session.post(self.url, data=body) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise http_error(resp.status, payload.decode("utf-8", "replace"),
                                     parse_retry_after(resp.headers))
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        return parse_chat_turn(payload.decode("utf-8", "replace"), self)

    async def loglikelihood(self, pairs: list[list[str]]) -> list[tuple[float, bool]]:
        """(log P(continuation | context), is_greedy) per (context, continuation) pair, from the endpoint's
        legacy `/completions` with echoed prompt logprobs, as lm-eval's `local-completions` model computes them
        (docs/interop.md). Raises ModelError when the endpoint returns no prompt logprobs."""
        return (await self._loglikelihood_reply(pairs))[0]

    async def loglikelihood_generation(self, request: RolloutRequest) -> Generation:
        """An lm_eval log-likelihood sample (its `loglikelihood_requests`) as one rollout: the text is the JSON list
        of [loglikelihood, is_greedy] pairs the metric `lm_eval` reads (as the local runner writes it); for a
        perplexity sample (`loglikelihood_rolling`), the JSON list of its texts' log-likelihoods."""
        requests = request.metadata["loglikelihood_requests"]
        if request.metadata.get("loglikelihood_rolling"):
            totals, data, text = await self._rolling_reply([r[0] for r in requests])
            out = json.dumps(totals)
        else:
            results, data, text = await self._loglikelihood_reply(requests)
            out = json.dumps([[ll, greedy] for ll, greedy in results])
        usage = data.get("usage") or {}
        tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return Generation(text=out, finish_reason="loglikelihood", input_tokens=tin, output_tokens=tout,
                          cost=self.cost(tin, tout), raw=text)

    async def _loglikelihood_reply(self, pairs: list[list[str]]) -> tuple[list[tuple[float, bool]], dict, str]:
        """One `/completions` request for all the pairs of a sample (a list of prompts): (results, reply, body)."""
        prompts, spans = logprob_prompts(pairs, self.model.key)
        data, text, url = await self._echo_logprobs(prompts)
        return echoed_loglikelihoods(data, spans, url), data, text

    async def _echo_logprobs(self, prompts: list[Any]) -> tuple[dict, str, str]:
        """The legacy `/completions` reply with echoed prompt logprobs for `prompts` (texts or token-id lists), in
        lm-eval's payload: greedy, one generated token (never read), echo, logprobs 1: (reply, body, url)."""
        url = completions_url(self.api_base)
        body = {"model": self.bare_model if self.provider else self.model.model, **self.extra_body,
                "prompt": prompts, "echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
        session = self._session if self._session is not None and self._loop is asyncio.get_running_loop() \
            else self._open()
        try:
            async with session.post(url, data=json.dumps(body, ensure_ascii=False).encode()) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    error = http_error(resp.status, payload.decode("utf-8", "replace"), parse_retry_after(resp.headers))
                    if isinstance(error, RetryableError):
                        raise error
                    raise ModelError(f"{url}: {error}; log-likelihood tasks need a completions endpoint that echoes "
                                     "prompt logprobs (vLLM's OpenAI server does), or runner: local", error.status)
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        text = payload.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except ValueError:
            raise ModelError(f"{url}: reply is not JSON: {text[:200]!r}") from None
        return data, text, url

    # ---- lm_eval loglikelihood_rolling (perplexity): windows by the endpoint's tokenizer, held here --------------
    def rolling_tokenizer(self) -> Any:
        """The served model's tokenizer, loaded here (`options.tokenizer`: a Hugging Face id or a tokenizer folder;
        without it, the model's name from the local Hugging Face cache, as lm-eval's API models default to it).
        ConfigError in one line when there is none."""
        name = self.model.options.get("tokenizer")
        fix = ("set options.tokenizer: <the served model's Hugging Face id or a local tokenizer folder> (rolling "
               "windows are cut by the endpoint's tokenizer)")
        key = (str(name or (self.bare_model if self.provider else self.model.model)), bool(name))
        if key not in _TOKENIZERS:
            from transformers import AutoTokenizer

            try:
                _TOKENIZERS[key] = AutoTokenizer.from_pretrained(key[0], local_files_only=not name)
            except Exception as exc:  # OSError, ValueError, ...: transformers says why in many ways
                from evalpipe.core.errors import ConfigError

                why = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
                what = f"options.tokenizer {name!r} can't be loaded ({why})" if name else \
                    f"no tokenizer {key[0]!r} in the local Hugging Face cache ({why})"
                raise ConfigError(f"model {self.model.key!r}: {what}; {fix}") from None
        return _TOKENIZERS[key]

    def rolling_max_length(self) -> int:
        """`options.max_length` (default 2048), as lm-eval's API models take it: they keep one token of it for the
        generated one, so a request holds at most max_length - 1 tokens and a window predicts max_length - 2."""
        return int(self.model.options.get("max_length") or 2048)

    def loglikelihood_rolling_problem(self) -> str | None:
        """Why rolling log-likelihoods can't be computed here (checked before any model call), or None."""
        from evalpipe.core.errors import ConfigError

        try:
            self.rolling_tokenizer()
        except ConfigError as exc:
            return str(exc)
        if self.rolling_max_length() < 3:
            return f"model {self.model.key!r}: options.max_length must be at least 3 (lm-eval's API models keep one " \
                "token for the generated one and one for the context)"
        return None

    async def loglikelihood_rolling(self, texts: list[str]) -> list[float]:
        """log P(text) per text, as lm-eval's API models (`local-completions`) compute it: the text's tokens (no
        special tokens) in rolling windows of max_length - 2 predicted tokens (evalpipe/runners/rolling.py), the
        first conditioned on BOS (else EOS); each window sent as token ids (at most max_length - 1) to `/completions`
        with echoed logprobs, its predicted tokens' logprobs summed; the windows' sums added in order."""
        return (await self._rolling_reply(texts))[0]

    async def _rolling_reply(self, texts: list[str]) -> tuple[list[float], dict, str]:
        """One `/completions` request for all the windows of a sample's texts: (log-likelihoods, reply, body)."""
        from evalpipe.runners import rolling

        tok = self.rolling_tokenizer()
        max_length = self.rolling_max_length() - 1  # lm-eval's TemplateAPI.max_length: one token for generation
        prefix = rolling.prefix_token_id(tok)
        inputs, ctxlens, owners = [], [], []
        for i, t in enumerate(texts):
            for context, predicted in rolling.windows(tok(t, add_special_tokens=False)["input_ids"], prefix,
                                                      max_length - 1):
                whole = context + predicted
                inputs.append(whole[-max_length:])
                ctxlens.append(len(context) - max(0, len(whole) - max_length))
                owners.append(i)
        totals = [0.0] * len(texts)
        if not inputs:  # only empty texts: no token to predict
            return totals, {}, ""
        data, text, url = await self._echo_logprobs(inputs)
        for i, value in zip(owners, echoed_window_loglikelihoods(data, inputs, ctxlens, url)):
            totals[i] += value
        return totals, data, text

    # ---- [spend] the batch API (OpenAI's files + batches; docs/spend.md#batch-mode) ---------------------------------
    def _api(self, path: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        u = urlsplit(self.api_base.strip())
        return urlunsplit(u._replace(path=u.path.rstrip("/") + path))

    async def _json(self, method: str, url: str, **kw: Any) -> Any:
        session = self._open()
        try:
            async with session.request(method, url, **kw) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise http_error(resp.status, payload.decode("utf-8", "replace"), parse_retry_after(resp.headers))
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        return json.loads(payload)

    async def submit_batch(self, requests: list[RolloutRequest]) -> str:
        """Upload the requests as one JSONL file (custom_id: each request's fingerprint) and create a batch on
        it; the batch's id."""
        from urllib.parse import urlsplit

        endpoint = urlsplit(self.url).path
        lines = b"\n".join(b'{"custom_id":' + json.dumps(r.fingerprint).encode() + b',"method":"POST","url":'
                            + json.dumps(endpoint).encode() + b',"body":' + self._head_for(r.params)
                            + compact_json(r.messages) + b"}}" for r in requests) + b"\n"
        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", lines, filename="evalpipe-batch.jsonl", content_type="application/jsonl")
        session = self._open()
        headers = {k: v for k, v in session.headers.items() if k.lower() != "content-type"}
        try:  # (the session's JSON content type must not be sent with a multipart body)
            async with aiohttp.ClientSession(headers=headers) as upload:
                async with upload.post(self._api("/files"), data=form, ssl=not self.url.startswith("http://")) as resp:
                    payload = await resp.read()
                    if resp.status != 200:
                        raise http_error(resp.status, payload.decode("utf-8", "replace"))
        except aiohttp.ClientError as exc:
            raise RetryableError(f"connection error: {type(exc).__name__}: {exc}") from None
        file_id = json.loads(payload)["id"]
        batch = await self._json("POST", self._api("/batches"), data=json.dumps(
            {"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"}).encode())
        return str(batch["id"])

    async def poll_batch(self, batch_id: str) -> dict[str, Any]:
        """The batch object (`status`: validating, in_progress, finalizing, completed, failed, expired, ...)."""
        return await self._json("GET", self._api(f"/batches/{batch_id}"))

    async def batch_results(self, batch: dict[str, Any]) -> dict[str, Generation | ModelError]:
        """Per custom_id (fingerprint): the reply as a Generation (priced at the batch rate), or its error."""
        out: dict[str, Generation | ModelError] = {}
        for key in ("output_file_id", "error_file_id"):
            if not batch.get(key):
                continue
            session = self._open()
            async with session.get(self._api(f"/files/{batch[key]}/content")) as resp:
                payload = await resp.read()
                if resp.status != 200:
                    raise http_error(resp.status, payload.decode("utf-8", "replace"))
            for line in payload.decode("utf-8", "replace").splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                resp_obj, err = rec.get("response") or {}, rec.get("error")
                if err or resp_obj.get("status_code") != 200:
                    out[rec["custom_id"]] = http_error(int(resp_obj.get("status_code") or 500),
                                                       json.dumps(err or resp_obj.get("body")))
                else:
                    out[rec["custom_id"]] = parse_chat_completion(json.dumps(resp_obj["body"]), self)
        return out

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


_TOKENIZERS: dict[tuple[str, bool], Any] = {}  # endpoints' tokenizers for rolling windows, loaded once per process


def completions_url(api_base: str) -> str:
    """The legacy completions endpoint beside the chat one: `https://h/v1` -> `https://h/v1/completions`."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(api_base.strip())
    path = u.path.rstrip("/").removesuffix("/chat/completions").removesuffix("/completions") + "/completions"
    return urlunsplit(u._replace(path=path))


def logprob_prompts(pairs: list[list[str]], model_key: str) -> tuple[list[str], list[tuple[int, int]]]:
    """The prompts (context + continuation) and each continuation's character span in its prompt. Trailing spaces
    of the context move onto the continuation, as lm-eval's `_encode_pair` does. An empty context is refused:
    lm-eval conditions on the model's BOS token there, which an endpoint taking text can't be given."""
    prompts, spans = [], []
    for context, continuation in pairs:
        if not context:
            raise ModelError(f"model {model_key!r}: a log-likelihood request with an empty context can't be scored "
                             "through an API endpoint (its BOS token can't be sent as text); use runner: local")
        n_ctx = len(context.rstrip())
        prompts.append(context + continuation)
        spans.append((n_ctx, len(context) + len(continuation)))
    return prompts, spans


def echoed_loglikelihoods(data: Any, spans: list[tuple[int, int]], url: str) -> list[tuple[float, bool]]:
    """(sum of the continuation tokens' logprobs, is_greedy) per prompt from a completions reply with `echo` and
    `logprobs`, as lm-eval's LocalCompletionsAPI.parse_logprobs reads it; the continuation's tokens are those that
    start at or after the context's end (`text_offset`), up to the prompt's end (the generated token is not read).
    ModelError when the reply has no prompt logprobs."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != len(spans):
        got = len(choices) if isinstance(choices, list) else 0
        raise ModelError(f"{url}: expected {len(spans)} choices (one per prompt), got {got}: {str(data)[:200]}")
    out = []
    for choice, (start, end) in zip(sorted(choices, key=lambda c: c.get("index", 0)), spans):
        lp = choice.get("logprobs") or {}
        offsets, token_lps, tops = lp.get("text_offset"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not offsets or not token_lps or len(offsets) != len(token_lps):
            raise ModelError(f"{url} returned no prompt logprobs (echo: true, logprobs: 1); log-likelihood tasks need "
                             "an endpoint that does (vLLM's OpenAI server), or runner: local")
        picked = [i for i, off in enumerate(offsets) if start <= off < end]
        values = [token_lps[i] for i in picked]
        if not values or any(v is None for v in values):
            raise ModelError(f"{url}: no logprob for the continuation's tokens (prompt chars {start}-{end})")
        greedy = True
        for i, value in zip(picked, values):
            top = tops[i] if isinstance(tops, list) and i < len(tops) else None
            if not top or value != max(top.values()):
                greedy = False
                break
        out.append((sum(values), greedy))
    return out


def echoed_window_loglikelihoods(data: Any, inputs: list[list[int]], ctxlens: list[int], url: str) -> list[float]:
    """The sum of the predicted tokens' logprobs per window (token-id prompt) from a completions reply with `echo`
    and `logprobs`, as lm-eval's LocalCompletionsAPI.parse_logprobs reads it: the prompt's logprobs after its first
    `ctxlen` tokens (the generated token is not read). ModelError when the reply has no prompt logprobs, or fewer
    than the prompt's tokens."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != len(inputs):
        got = len(choices) if isinstance(choices, list) else 0
        raise ModelError(f"{url}: expected {len(inputs)} choices (one per window), got {got}: {str(data)[:200]}")
    out = []
    for choice, inp, ctxlen in zip(sorted(choices, key=lambda c: c.get("index", 0)), inputs, ctxlens):
        token_lps = (choice.get("logprobs") or {}).get("token_logprobs")
        if not token_lps:
            raise ModelError(f"{url} returned no prompt logprobs (echo: true, logprobs: 1); log-likelihood tasks need "
                             "an endpoint that does (vLLM's OpenAI server), or runner: local")
        values = token_lps[ctxlen:len(inp)]
        if len(token_lps) < len(inp) or any(v is None for v in values):
            raise ModelError(f"{url}: {len(token_lps)} prompt logprobs for a window of {len(inp)} tokens; the "
                             "endpoint must echo a logprob for every prompt token")
        out.append(sum(values))
    return out


def _first_choice(text: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str | None]:
    """(reply, choice, message, content) of a chat-completions body; ModelError when it is not one."""
    try:
        data = loads_reply(text)
    except ValueError:
        raise ModelError(f"reply is not JSON: {text[:200]!r}") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not choices:
        err = data.get("error") if isinstance(data, dict) else None
        raise ModelError(f"reply has no choices: {str(err or text)[:200]}")
    choice = choices[0]
    message = choice.get("message") or {}
    content = message.get("content")
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return data, choice, message, content


def parse_chat_completion(text: str, runner: ApiRunner) -> Generation:
    data, choice, message, content = _first_choice(text)
    trajectory: list[dict[str, Any]] = []
    if message.get("tool_calls"):
        trajectory.append({"type": "tool_calls", "tool_calls": message["tool_calls"]})
    usage = data.get("usage") or {}
    tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Generation(text=content, finish_reason=choice.get("finish_reason"), input_tokens=tin,
                      output_tokens=tout, cost=runner.cost(tin, tout), raw=text, trajectory=trajectory)


def parse_chat_turn(text: str, runner: ApiRunner) -> ChatTurn:
    """A chat-completions reply as one assistant turn: content and tool calls (arguments kept as sent)."""
    data, choice, message, content = _first_choice(text)
    calls = []
    for c in message.get("tool_calls") or []:
        if not isinstance(c, dict):
            continue
        fn = c.get("function") or {}
        calls.append(ToolCall(str(fn.get("name") or ""), fn.get("arguments"), c.get("id")))
    usage = data.get("usage") or {}
    tin, tout = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return ChatTurn(content=content, tool_calls=calls, finish_reason=choice.get("finish_reason"), input_tokens=tin,
                    output_tokens=tout, cost=runner.cost(tin, tout), raw=text)


def _head(fixed: dict[str, Any]) -> bytes:
    """`{...fixed,"messages":` as bytes: everything of a chat body but the messages (and tools), encoded once."""
    fixed_json = json.dumps(fixed, ensure_ascii=False, separators=(",", ":"), default=str)
    return (fixed_json[:-1] + ',"messages":' if len(fixed) else '{"messages":').encode()

