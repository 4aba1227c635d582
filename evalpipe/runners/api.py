"""What the two API paths of the `litellm` runner share: settings, identity, keys, prices.

`runner: litellm` picks its path per model (see `litellm_runner.build_litellm_runner`): OpenAI-compatible
chat-completions endpoints go through a lean aiohttp client (`openai_compat.py`), every other provider through
`litellm.acompletion` (`litellm_runner.py`). Both read the same settings, produce the same records (text, finish
reason, usage, cost, raw response) and raise the same errors (`ModelError` / `RetryableError` with
`HTTP <status>: <message>`), so switching paths changes speed, nothing else.
"""
from __future__ import annotations

from typing import Any

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.runners.base import Runner
from evalpipe.runners.pricing import token_prices

# Providers whose chat endpoint speaks the OpenAI wire format. `openai` and the self-hosted ones always take the
# fast path; hosted ones take it when the config gives `api_base` (without it, litellm knows their endpoints).
ALWAYS_FAST = frozenset({"openai", "hosted_vllm", "custom_openai", "litellm_proxy", "llamafile", "lm_studio"})
OPENAI_COMPATIBLE = ALWAYS_FAST | frozenset({
    "anyscale", "cerebras", "deepinfra", "deepseek", "fireworks_ai", "groq", "hyperbolic", "lambda_ai", "mistral",
    "moonshot", "nebius", "novita", "nscale", "nvidia_nim", "openrouter", "perplexity", "sambanova", "together_ai",
    "xai", "featherless_ai", "dashscope",
})
KNOWN_PROVIDERS = OPENAI_COMPATIBLE | frozenset({
    "anthropic", "azure", "azure_ai", "bedrock", "cohere", "cohere_chat", "gemini", "vertex_ai", "ollama",
    "ollama_chat", "huggingface", "replicate", "sagemaker", "watsonx", "databricks", "ai21", "text-completion-openai",
    "vllm", "cloudflare", "predibase", "clarifai", "triton",
})
DEFAULT_API_BASE = {"openai": "https://api.openai.com/v1"}
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY"}

# Params that configure the transport rather than the request body.
TRANSPORT_PARAMS = ("extra_headers", "extra_body")


def split_provider(model: str) -> tuple[str | None, str]:
    """`openai/gpt-4o-mini` -> ("openai", "gpt-4o-mini"); `meta-llama/Llama-3` (no known provider) -> (None, as is)."""
    head, sep, rest = model.partition("/")
    if sep and head in KNOWN_PROVIDERS:
        return head, rest
    return None, model


def limit_key(model: ModelConfig) -> str:
    """The provider key a model's requests count against in the shared rate limits (evalpipe/store/ratelimit.py):
    its `options.rate_limit_key`, else its provider (`openai` for `openai/gpt-4o-mini`), else its config key."""
    key = (model.options or {}).get("rate_limit_key")
    if key:
        return str(key)
    if model.model and "/" in model.model:
        provider, _ = split_provider(model.model)
        if provider:
            return provider
    return model.key


def wants_fast_path(model: ModelConfig) -> bool:
    forced = model.options.get("fast_path")
    if forced is not None:
        return bool(forced)
    provider, _ = split_provider(model.model or "")
    if provider in ALWAYS_FAST:
        return True
    return bool(model.api_base) and (provider is None or provider in OPENAI_COMPATIBLE)


class ApiRunner(Runner):
    name = "litellm"  # both paths: the runner name users write, and the identity hashed into fingerprints
    default_concurrency = 16

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        if not model.model:
            raise ConfigError(f"model {model.key!r}: runner 'litellm' needs `model:` (e.g. openai/gpt-4o-mini or "
                              "anthropic/claude-3-5-haiku-20241022)")
        self.provider, self.bare_model = split_provider(model.model)
        self.api_base = model.api_base or DEFAULT_API_BASE.get(self.provider or "")
        self.params = {k: v for k, v in model.params.items() if k not in TRANSPORT_PARAMS}
        self.extra_headers = dict(model.params.get("extra_headers") or {})
        self.extra_body = dict(model.params.get("extra_body") or {})
        self._prices: tuple[float, float] | None = None

    def identity(self) -> dict[str, Any]:
        # The same for both paths, so switching path keeps the journal; keys, endpoints, limits stay out.
        return {"runner": self.name, "model": self.model.model, "params": self.model.params}

    def resolve_api_key(self, required: bool) -> str | None:
        env = self.model.api_key_env or DEFAULT_KEY_ENV.get(self.provider or "")
        if self.model.api_key_env:
            import os

            key = os.environ.get(env)
            if not key:
                raise ConfigError(f"model {self.model.key!r}: environment variable {env} (its api_key_env) is not "
                                  "set; export it before the run")
            return key
        if env and required:
            import os

            key = os.environ.get(env)
            if not key:
                raise ConfigError(f"model {self.model.key!r}: no API key; export {env} or set `api_key_env:` to the "
                                  "name of the variable holding it (or `api_base:` for a local server)")
            return key
        return None

    def prices(self) -> tuple[float, float]:
        """(USD per input token, USD per output token), looked up once per runner; (0, 0) without a price."""
        if self._prices is None:
            try:
                self._prices = token_prices(self.model.model, self.provider, self.model.options.get("pricing"))
            except Exception:  # a price must never fail a sample
                self._prices = (0.0, 0.0)
        return self._prices

    def cost(self, input_tokens: int | None, output_tokens: int | None) -> float:
        """USD for one reply from the per-token prices; 0 without a price."""
        pin, pout = self._prices if self._prices is not None else self.prices()
        return (input_tokens or 0) * pin + (output_tokens or 0) * pout


def merge_request_params(model_params: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A request's generation settings as sent over the model's `params`: the request's win; a model that sends
    `max_completion_tokens` (OpenAI's reasoning models refuse `max_tokens`) gets the request's max_tokens there."""
    out = dict(params)
    if "max_tokens" in out and "max_completion_tokens" in model_params:
        out["max_completion_tokens"] = out.pop("max_tokens")
    return out
