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
    # From the rollout (docs/interfaces.md): the tool-call records (dataset tool names), the message
    # trajectory, the tool schemas the sample offered, and why the conversation stopped.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    stop_reason: str | None = None


class Metric:
    name = "base"
    requires_target = True  # samples without ground truth are reported as unscored, never as wrong
    shared_settings: tuple[str, ...] = ()  # run-wide overrides this metric accepts (see build_metric)

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
    factory = get_metric(name)
    # "*" holds run-wide overrides (the judge resource's judges and call settings); only metrics that declare
    # them in `shared_settings` take them
    shared = {k: v for k, v in ((overrides or {}).get("*") or {}).items() if k in getattr(factory, "shared_settings", ())}
    settings = {**settings, **shared, **((overrides or {}).get(name) or {})}
    try:
        return factory(**settings)
    except TypeError as exc:
        raise ConfigError(f"metric {name!r}: bad settings {settings}: {exc}") from None


# Bump when a built-in metric's verdicts change for the same inputs: it is part of the `judgements` asset's
# code version, so Dagster marks judgements stale.
METRICS_CODE_VERSION = "3"  # 3: list_match as DABench scores it, llm_score and hms_score as DiscoveryBench (issue 11)


def judging_version(cfg: Any) -> str:
    """The `judgements` asset's code version: what decides verdicts besides the rollouts themselves, i.e. the
    metric code version, every split's metric list and settings, and the judge models (`judges:`). Changing a
    judge's model, prompt or settings in the config changes it, and Dagster shows `judgements` as stale."""
    from evalpipe.benchmarks import adapter_for
    from evalpipe.fingerprint import fingerprint

    per_split = {}
    for key, split in sorted(cfg.splits.items()):
        try:
            per_split[key] = adapter_for(split).metrics()
        except Exception:  # an adapter that can't be built yet fails at materialization, with its own message
            per_split[key] = split.metrics
    return fingerprint({"code": METRICS_CODE_VERSION, "metrics": per_split, "judges": cfg.judges}, 16)


def judgements_version(df: Any) -> str:
    """A content hash of a judgements frame (who judged what, and the verdicts): the `judgements` asset's data
    version, so `metrics` goes stale exactly when a verdict changed."""
    from evalpipe.fingerprint import fingerprint

    cols = [c for c in ("sample_id", "metric", "score", "status", "judge_fingerprint") if c in getattr(df, "columns", [])]
    if not cols or len(df) == 0:
        return fingerprint([], 16)
    rows = df[cols].sort_values(cols[:2]).astype(object).where(df[cols].notna(), None).values.tolist()
    return fingerprint(rows, 16)
