"""Metrics (judges): score one prediction against its sample. Aggregation is separate (aggregate.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from evalpipe.errors import ConfigError
from evalpipe.registry import Registry
from evalpipe.types import Score


@dataclass
class JudgeInput:
    sample_id: str
    input: str
    target: str | None
    prediction: str | None  # the extracted answer
    raw_output: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    choices: list[str] | None = None


class Metric:
    name = "base"
    requires_target = True  # samples without ground truth are reported as unscored, never as wrong

    def __init__(self, **settings: Any):
        self.settings = settings

    def identity(self) -> dict[str, Any]:
        """What determines the verdicts; hashed into each judgement's fingerprint."""
        return {"metric": self.name, "settings": self.settings}

    def score(self, item: JudgeInput) -> Score:
        raise NotImplementedError

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        """Score a batch. Model-graded metrics override this to run concurrently."""
        return [self.score(i) for i in items]


_METRICS: Registry[Metric] = Registry("metric")


def register_metric(name: str, factory: Callable[..., Metric] | None = None, *, replace: bool = False):
    return _METRICS.register(name, factory, replace=replace)


def get_metric(name: str) -> Callable[..., Metric]:
    return _METRICS.get(name)


def list_metrics() -> list[str]:
    return _METRICS.names()


def build_metric(spec: Any, overrides: dict[str, dict[str, Any]] | None = None) -> Metric:
    """A metric from a config entry: `"exact_match"` or `{"name": "exact_match", <settings>}`."""
    if isinstance(spec, str):
        name, settings = spec, {}
    elif isinstance(spec, dict) and "name" in spec:
        name, settings = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    else:
        raise ConfigError(f"metric entry {spec!r} must be a name or a mapping with 'name'")
    settings = {**settings, **((overrides or {}).get(name) or {})}
    try:
        return get_metric(name)(**settings)
    except TypeError as exc:
        raise ConfigError(f"metric {name!r}: bad settings {settings}: {exc}") from None
