"""Model runners: turn one prompt into one generation. Concurrency, retries and the journal live in the driver."""
from __future__ import annotations

from typing import Any, Callable

from evalpipe.core.config import ModelConfig
from evalpipe.core.registry import Registry
from evalpipe.core.types import Generation, RolloutRequest


class ModelError(Exception):
    """The model call failed for good (bad request, auth, unknown model, unparseable reply): recorded, not retried.
    Its message is what lands in the rollout's `error` column, e.g. `HTTP 400: unknown parameter 'foo'`."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RetryableError(ModelError):
    """A transient failure (rate limit, 5xx, timeout, dropped connection): the driver retries it with backoff,
    waiting at least `retry_after` seconds when the server said so."""

    def __init__(self, message: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(message, status)
        self.retry_after = retry_after


RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529})


def http_error(status: int, body: str, retry_after: float | None = None) -> ModelError:
    """The one error both API paths raise for an HTTP failure, so records look alike whichever path ran."""
    message = f"HTTP {status}: {_short(body)}"
    if status in RETRYABLE_STATUS or status >= 500:
        return RetryableError(message, retry_after=retry_after, status=status)
    return ModelError(message, status=status)


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` / `Retry-After` (seconds or an HTTP date); None when absent."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime
        import time

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _short(text: str, limit: int = 300) -> str:
    """Provider error bodies are JSON like {"error": {"message": ...}}: keep the message, one line, bounded."""
    import json

    msg = text
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = err.get("message", text) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        pass
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


class Runner:
    name = "base"
    default_concurrency = 8
    retry_timeouts = True  # False: a timed-out attempt fails the sample (agents: a slow task stays slow)

    def __init__(self, model: ModelConfig):
        self.model = model

    def identity(self) -> dict[str, Any]:
        """Everything that determines the answer; it is hashed into each rollout's fingerprint.
        Things that don't change answers (api keys, concurrency, timeouts) stay out."""
        return {"runner": self.name, "model": self.model.model or self.model.key, "params": self.model.params}

    async def start(self) -> None:
        """Slow one-time setup (loading weights), awaited once before the first request of a run that has work,
        outside the per-attempt timeout. A fully journaled run never calls it."""

    async def generate(self, request: RolloutRequest) -> Generation:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release sessions, servers or processes the runner started."""


_RUNNERS: Registry[Runner] = Registry("model runner")


def register_runner(name: str, factory: Callable[[ModelConfig], Runner] | None = None, *, replace: bool = False):
    return _RUNNERS.register(name, factory, replace=replace)


def get_runner(name: str) -> Callable[[ModelConfig], Runner]:
    return _RUNNERS.get(name)


def list_runners() -> list[str]:
    return _RUNNERS.names()


def build_runner(model: ModelConfig) -> Runner:
    return get_runner(model.runner)(model)
