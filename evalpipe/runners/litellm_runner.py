"""`runner: litellm`: any model litellm supports. OpenAI-compatible endpoints take the fast path
(`openai_compat.py`); every other provider (Anthropic, Gemini, Bedrock, ...) goes through `litellm.acompletion`.
"""
from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, Field

from evalpipe.core.config import ModelConfig
from evalpipe.runners.api import OPENAI_COMPATIBLE, ApiRunner, merge_request_params, wants_fast_path
from evalpipe.runners.base import ModelError, RetryableError, Runner, http_error, register_runner
from evalpipe.runners.pricing import import_litellm
from evalpipe.tools.base import ChatTurn, ToolCall
from evalpipe.core.types import Generation, RolloutRequest


class LiteLLMRunner(ApiRunner):
    path = "litellm"

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        self._litellm = import_litellm()
        self._api_key = self.resolve_api_key(required=False)  # else litellm reads the provider's usual variable
        self._kwargs: dict[str, Any] = dict(self.params)
        if model.api_base:
            # litellm appends its path to api_base: a query string (`?api-version=X`, `?key=...`) goes in
            # `api_version` (Azure) or an OpenAI client's default query instead, so it ends up after the path
            from urllib.parse import parse_qsl, urlsplit, urlunsplit

            u = urlsplit(model.api_base)
            self._kwargs["api_base"] = urlunsplit(u._replace(query="")) if u.query else model.api_base
            query = dict(parse_qsl(u.query))
            if self.provider in ("azure", "azure_ai") and "api-version" in query and "api_version" not in self._kwargs:
                self._kwargs["api_version"] = query.pop("api-version")
            if query and (self.provider in OPENAI_COMPATIBLE or self.provider is None):
                self._query = query  # litellm has no `extra_query` for chat: an OpenAI client that adds it
        if self._api_key:
            self._kwargs["api_key"] = self._api_key
        elif model.api_base and (self.provider in OPENAI_COMPATIBLE or self.provider is None):
            self._kwargs["api_key"] = "no-key"  # a local server needs none, but litellm's OpenAI client insists
        if self.extra_headers:
            self._kwargs["extra_headers"] = self.extra_headers
        if self.extra_body:
            self._kwargs["extra_body"] = self.extra_body
        self._kwargs["num_retries"] = 0  # the driver retries (with Retry-After); litellm must not retry too
        self._kwargs["max_retries"] = 0
        if getattr(self, "_query", None):
            import openai

            self._kwargs["client"] = openai.AsyncOpenAI(
                base_url=self._kwargs["api_base"], api_key=self._kwargs.get("api_key") or "no-key",
                default_query=self._query, max_retries=0)
        # litellm prices every reply itself (response metadata, its logging payload) before our record does.
        # When no litellm callback consumes that figure, it gets the per-token prices looked up once here: then it
        # skips its per-call search of the cost map (and, for a model without a price, part of a zero-cost
        # diagnosis): measured ~0.5 ms of CPU per call, 3-5% of litellm's. With callbacks configured (litellm's
        # globals, or `callbacks` / `success_callback` in params) it prices as it always does (tiers, cached
        # tokens) for them, unless `options.pricing` gives this model's price: then that one. The recorded cost
        # is ours either way.
        pin, pout = self.prices()
        self._priced_kwargs = {"input_cost_per_token": pin, "output_cost_per_token": pout, **self._kwargs}
        self._priced_always = bool(model.options.get("pricing"))
        self._priced_never = not self._priced_always and any(k in self._kwargs
                                                             for k in ("callbacks", "success_callback"))

    def _call_kwargs(self) -> dict[str, Any]:
        """The kwargs of one call: with our prices unless a litellm callback consumes litellm's own pricing
        (checked per call: callbacks may be registered after the runner was built)."""
        if self._priced_always:
            return self._priced_kwargs
        lm = self._litellm
        if self._priced_never or lm.callbacks or lm.success_callback or getattr(lm, "_async_success_callback", None):
            return self._kwargs
        return self._priced_kwargs

    def request_params_problem(self, params: dict[str, Any] | None) -> str | None:
        """A request's own generation settings (RolloutRequest.params) are passed merged over the model's: none."""
        return None

    def _request_kwargs(self, request: RolloutRequest | None) -> dict[str, Any]:
        kwargs = self._call_kwargs()
        if request is None or not request.params:
            return kwargs
        return {**kwargs, **merge_request_params(kwargs, request.params)}

    async def generate(self, request: RolloutRequest) -> Generation:
        try:
            resp = await self._litellm.acompletion(model=self.model.model, messages=request.messages,
                                                   **self._request_kwargs(request))
        except Exception as exc:
            raise self._translate(exc) from None
        choice = resp.choices[0]
        usage = getattr(resp, "usage", None)
        tin = getattr(usage, "prompt_tokens", None)
        tout = getattr(usage, "completion_tokens", None)
        trajectory = []
        tool_calls = getattr(choice.message, "tool_calls", None)
        if tool_calls:
            trajectory.append({"type": "tool_calls", "tool_calls": [t.model_dump() for t in tool_calls]})
        return Generation(text=choice.message.content, finish_reason=choice.finish_reason, input_tokens=tin,
                          output_tokens=tout, cost=self.cost(tin, tout), raw=resp.model_dump_json(),
                          trajectory=trajectory)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   request: RolloutRequest | None = None) -> ChatTurn:
        """One turn of a tool-using conversation (evalpipe/runners/tool_loop.py) through `litellm.acompletion`."""
        try:
            resp = await self._litellm.acompletion(model=self.model.model, messages=messages,
                                                   **({"tools": tools} if tools else {}),
                                                   **self._request_kwargs(request))
        except Exception as exc:
            raise self._translate(exc) from None
        choice = resp.choices[0]
        usage = getattr(resp, "usage", None)
        tin = getattr(usage, "prompt_tokens", None)
        tout = getattr(usage, "completion_tokens", None)
        calls = [ToolCall(str(t.function.name or ""), t.function.arguments, t.id)
                 for t in getattr(choice.message, "tool_calls", None) or []]
        return ChatTurn(content=choice.message.content, tool_calls=calls, finish_reason=choice.finish_reason,
                        input_tokens=tin, output_tokens=tout, cost=self.cost(tin, tout), raw=resp.model_dump_json())

    def _translate(self, exc: Exception) -> ModelError:
        """litellm's exceptions -> the same errors the fast path raises (`HTTP <status>: <message>`)."""
        lm = self._litellm
        if isinstance(exc, (lm.Timeout, lm.APIConnectionError)) and not getattr(exc, "response", None):
            return RetryableError(f"connection error: {type(exc).__name__}: {_message(exc)}")
        status = getattr(exc, "status_code", None)
        if isinstance(status, int):
            headers = getattr(exc, "litellm_response_headers", None) or getattr(
                getattr(exc, "response", None), "headers", None)
            from evalpipe.runners.base import parse_retry_after

            return http_error(status, _message(exc), parse_retry_after(headers))
        return ModelError(f"{type(exc).__name__}: {_message(exc)}")


def _message(exc: Exception) -> str:
    """litellm prefixes messages with `litellm.XError: XError: OpenAIException - `; keep the provider's part."""
    msg = str(getattr(exc, "message", None) or exc)
    for sep in ("Exception - ", "Error - "):
        if sep in msg:
            msg = msg.split(sep, 1)[1]
    return msg


class LiteLLMOptions(BaseModel):
    """The `litellm` runner's options (both paths); decoding settings go under `params:`."""

    fast_path: Optional[bool] = None  # force (true) or refuse (false) the OpenAI-compatible fast path
    pricing: Any = None  # prices per token when litellm's map has none (evalpipe/runners/pricing.py)
    max_connections: Optional[int] = Field(default=None, ge=1)  # fast path: open connections
    batch: Optional[bool] = None  # [spend] send a partition's requests through the provider's batch API
    batch_poll_s: Optional[float] = Field(default=None, gt=0)  # seconds between two looks at a batch
    tokenizer: Optional[str] = None  # fast path, lm_eval perplexity tasks: the served model's HF tokenizer
    max_length: Optional[int] = Field(default=None, ge=3)  # fast path, lm_eval perplexity tasks: tokens per window


def build_litellm_runner(model: ModelConfig) -> Runner:
    """The fast path for OpenAI-compatible endpoints, litellm for the rest; `options.fast_path` forces either."""
    if model.options.get("batch") and not wants_fast_path(model):
        from evalpipe.core.errors import ConfigError

        raise ConfigError(f"model {model.key!r}: options.batch needs an OpenAI-compatible endpoint with a batch API "
                          "(the fast path: an openai/ model, or api_base:); leave batch out for this provider")
    if wants_fast_path(model):
        from evalpipe.runners.openai_compat import OpenAICompatRunner

        return OpenAICompatRunner(model)
    return LiteLLMRunner(model)


build_litellm_runner.option_schema = LiteLLMOptions  # type: ignore[attr-defined]
register_runner("litellm", build_litellm_runner)
