"""Model runners: turn one prompt into one generation. Concurrency, retries and the journal live in the driver."""
from __future__ import annotations

from typing import Any, Callable

from evalpipe.config import ModelConfig
from evalpipe.registry import Registry
from evalpipe.types import Generation, RolloutRequest


class RetryableError(Exception):
    """A transient failure (rate limit, 5xx, timeout): the driver retries it with backoff."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Runner:
    name = "base"
    default_concurrency = 8

    def __init__(self, model: ModelConfig):
        self.model = model

    def identity(self) -> dict[str, Any]:
        """Everything that determines the answer; it is hashed into each rollout's fingerprint.
        Things that don't change answers (api keys, concurrency, timeouts) stay out."""
        return {"runner": self.name, "model": self.model.model or self.model.key, "params": self.model.params}

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
