"""Metrics (judges): score one prediction against its sample. Aggregation is separate (aggregate.py)."""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping

from evalpipe.core.errors import ConfigError
from evalpipe.core.registry import Registry
from evalpipe.core.types import Score


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


@dataclass
class ScoreColumns:
    """The verdicts on a batch column by column: Score's fields as lists, one value per sample (a details entry may
    be None: no details). A rule scoring a large batch builds these instead of a Score object per sample."""
    value: list[float | None]
    correct: list[bool | None]
    status: list[str]
    reason: list[str]
    normalized_prediction: list[str | None]
    normalized_target: list[str | None]
    details: list[dict[str, Any] | None]

    @classmethod
    def of(cls, scores: list[Score]) -> "ScoreColumns":
        return cls(*([getattr(s, f.name) for s in scores] for f in fields(cls)))

    def __len__(self) -> int:
        return len(self.value)

    def row(self, i: int) -> Score:
        return Score(value=self.value[i], correct=self.correct[i], status=self.status[i], reason=self.reason[i],
                     normalized_prediction=self.normalized_prediction[i],
                     normalized_target=self.normalized_target[i], details=self.details[i] or {})


SCORE, COUNT, AMOUNT = "score", "count", "amount"
KINDS = (SCORE, COUNT, AMOUNT)


@dataclass(frozen=True)
class Direction:
    """How to read one aggregate value (lm-eval's `higher_is_better`, plus what the number is).

    higher_is_better: True/False orders models; None: the value has no better side (a histogram bin, a difference
    between two modes), so it is never ranked. kind: `score` (a rate, mean or score: shown with decimals and its
    CI), `count` (a number of things: shown as a whole number, no CI), `amount` (a measured quantity in units:
    seconds, USD)."""
    higher_is_better: bool | None = True
    kind: str = SCORE

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Direction kind must be one of {', '.join(KINDS)}, got {self.kind!r}")


class Metric:
    name = "base"
    # Direction of every aggregate row this metric produces (the `metrics` table's `higher_is_better` and `kind`;
    # the leaderboard ranks by it). The metric's own mean uses `higher_is_better`/`kind`; a derived row
    # `<name>_<suffix>` (or `<name>[judge]`) uses `aggregates[suffix]` (`"[judge]"` for the latter) when declared,
    # else the same as the metric's own. Every built-in scorer is a higher-is-better score, hence the defaults.
    higher_is_better: ClassVar[bool | None] = True
    kind: ClassVar[str] = SCORE
    aggregates: ClassVar[Mapping[str, Direction]] = {}
    requires_target = True  # samples without ground truth are reported as unscored, never as wrong
    shared_settings: tuple[str, ...] = ()  # run-wide overrides this metric accepts (see build_metric)
    # The JudgeInput fields `score` reads (None: all). `judge` decodes a sample's stored JSON (metadata, tool
    # trace, trajectory, tools) only for a metric that reads it: for a rule metric that decoding is most of the
    # cost of judging. A field left out arrives with its default (empty metadata, no tool calls, ...).
    inputs: frozenset[str] | None = None
    # The settings a config entry may give (`{name: x, <setting>: ...}`): a set of names or a pydantic model class,
    # checked with the config before any model call (evalpipe/project/schema.py). None: undeclared (a plugin's
    # metric), its settings are passed on unchecked.
    option_schema: Any = None
    # A named variant of another metric, reported beside it (`gaia_strict` beside `gaia`): never its replacement.
    variant_of: ClassVar[str | None] = None
    needs_judge = False  # a model-graded metric: the config must give it a judge (`judges:` or its `judge:`)
    # True: the constructor takes `config=` (the project's EvalConfig, from build_metric's caller) for the
    # project-wide settings it reads (`judges:`, `sandbox:`, `rate_limits:`); metrics read no config themselves.
    takes_config = False

    def __init__(self, **settings: Any):
        self.settings = settings

    @classmethod
    def direction_of(cls, aggregate: str) -> Direction:
        """The direction of one aggregate row name this metric produces (its own name, `<name>_<suffix>`,
        `<name>[judge]`)."""
        return _declared(cls, cls.name, aggregate)

    def identity(self) -> dict[str, Any]:
        """What determines the verdicts; hashed into each judgement's fingerprint."""
        return {"metric": self.name, "settings": self.settings}

    def score(self, item: JudgeInput) -> Score:
        raise NotImplementedError

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        """Score a batch. Model-graded metrics override this to run concurrently."""
        return [self.score(i) for i in items]

    def score_columns(self, targets: list[str | None], predictions: list[str | None]) -> ScoreColumns | None:
        """A rule that reads nothing but the target and the prediction may score a whole batch from those two
        columns, with exactly the verdicts `score` gives row by row; `judge` then builds no JudgeInput or Score per
        sample. None (the default): not offered, `judge` calls `ascore_many`."""
        return None


_METRICS: Registry[Metric] = Registry("metric")
# The built-in metrics: importing each module registers its metrics. evalpipe/metrics/__init__.py imports none of
# them, so `evalpipe.metrics.aggregate` alone stays light (reading the leaderboard, issue 31); the registry's first
# use registers them all (`_load_builtins`), before any other registration, so a plugin's `replace=True` still wins.
BUILTIN_MODULES = ("code_execution", "exact_match", "hms", "list_match", "llm_judge", "semantic",
                   "lenient",  # includes, choice, regex, last_number
                   "bfcl_ast",  # BFCL's AST checker, issue 10
                   "tool_integration",  # tool-integration harness, issue 10
                   "dabstep", "kaggle",  # DSGym's domain metrics, issue 22
                   "lm_eval_scoring",  # an lm-evaluation-harness task's own scoring, issue 23
                   "inspect_scores")  # an Inspect AI log's own scores, issue 32
_BUILTIN_PATHS = frozenset(f"evalpipe.metrics.{m}" for m in BUILTIN_MODULES)
_builtins_lock = threading.RLock()
_builtins_state = "not loaded"  # -> "loading" (this thread importing them) -> "loaded"


def _load_builtins() -> None:
    global _builtins_state
    if _builtins_state == "loaded":
        return
    with _builtins_lock:  # another thread waits here until they are all registered
        if _builtins_state != "not loaded":  # loaded, or this thread's import of them asking again
            return
        _builtins_state = "loading"
        try:
            for module in BUILTIN_MODULES:
                importlib.import_module(f"evalpipe.metrics.{module}")
        except BaseException:
            _builtins_state = "not loaded"  # the next use fails the same way, not on a half-filled registry
            raise
        _builtins_state = "loaded"


def register_metric(name: str, factory: Callable[..., Metric] | None = None, *, replace: bool = False):
    def add(f: Callable[..., Metric]) -> Callable[..., Metric]:
        if replace and getattr(f, "__module__", None) not in _BUILTIN_PATHS:  # replacing a built-in: it must be
            _load_builtins()  # there first (a plain registration of a taken name fails either way, when both are in)
        _check_direction(name, f)
        return _METRICS.register(name, f, replace=replace)

    return add(factory) if factory is not None else add


def _check_direction(name: str, factory: Any) -> None:
    """A metric's direction declaration is checked when it is registered (a plugin's import), not when its first
    partition is aggregated, after the rollouts were paid for."""
    hib, kind = getattr(factory, "higher_is_better", True), getattr(factory, "kind", SCORE)
    if hib not in (True, False, None) or kind not in KINDS:
        raise ValueError(f"metric {name!r}: higher_is_better must be True, False or None and kind one of "
                         f"{', '.join(KINDS)}; got {hib!r}, {kind!r}")
    for suffix, d in (getattr(factory, "aggregates", None) or {}).items():
        if not isinstance(d, Direction):
            raise ValueError(f"metric {name!r}: aggregates[{suffix!r}] must be a Direction(higher_is_better, kind), "
                             f"got {d!r}")


def get_metric(name: str) -> Callable[..., Metric]:
    _load_builtins()
    return _METRICS.get(name)


def list_metrics() -> list[str]:
    _load_builtins()
    return _METRICS.names()


def _declared(factory: Any, name: str, aggregate: str) -> Direction:
    """`factory`'s declaration for `aggregate` (a row name starting with `name`). A factory that is a plain function
    (no class attributes) gets the defaults: a higher-is-better score, as every metric before directions."""
    own = Direction(getattr(factory, "higher_is_better", True), getattr(factory, "kind", SCORE))
    suffix = aggregate[len(name):] if aggregate.startswith(name) else None
    if not suffix:
        return own
    table = getattr(factory, "aggregates", None) or {}
    return table.get(suffix.removeprefix("_"), table.get(suffix, own))


# Rows no metric produces: the partition's usage rows (evalpipe/metrics/aggregate.py USAGE_METRICS); `*_total`
# tokens are counts, latency and cost amounts, all lower-is-better.
FIXED_DIRECTIONS: dict[str, Direction] = {
    "latency_s_p50": Direction(False, AMOUNT), "latency_s_p95": Direction(False, AMOUNT),
    "latency_s_mean": Direction(False, AMOUNT), "input_tokens_total": Direction(False, COUNT),
    "output_tokens_total": Direction(False, COUNT), "cost_usd_total": Direction(False, AMOUNT),
    "rollout_error_rate": Direction(False, SCORE),
    # [spend] the judges' calls (aggregate.py JUDGE_USAGE_METRICS)
    "judge_calls": Direction(False, COUNT), "judge_input_tokens_total": Direction(False, COUNT),
    "judge_output_tokens_total": Direction(False, COUNT), "judge_cost_usd_total": Direction(False, AMOUNT),
    "judge_latency_s_mean": Direction(False, AMOUNT),
}


def direction_of(aggregate: str, metric: str | None = None) -> Direction:
    """How to read the aggregate row `aggregate` (a `metrics` table name). `metric`: the judgement metric that
    produced it, when known; otherwise the registered metric whose name is the longest prefix of `aggregate`
    (followed by `_`, `[` or nothing). A name no metric claims reads as a higher-is-better score (the behaviour of
    warehouses written before directions were declared)."""
    if aggregate in FIXED_DIRECTIONS:
        return FIXED_DIRECTIONS[aggregate]
    names = [metric] if metric else sorted(
        (n for n in list_metrics() if aggregate == n or aggregate.startswith((n + "_", n + "["))),
        key=len, reverse=True)
    for name in names:
        try:
            factory = get_metric(name)
        except Exception:  # a metric registered in another process only (a plugin not loaded here)
            continue
        return _declared(factory, name, aggregate)
    return Direction()


def build_metric(spec: Any, overrides: dict[str, dict[str, Any]] | None = None, config: Any = None) -> Metric:
    """A metric from a config entry: `"exact_match"` or `{"name": "exact_match", <settings>}`. `config`: the
    project's EvalConfig, handed to the metrics that read project-wide settings (`takes_config`)."""
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
    extra = {"config": config} if getattr(factory, "takes_config", False) else {}
    from evalpipe.metrics.settings import check_settings  # pydantic: only where a metric is built, not for reading

    check_settings(name, getattr(factory, "option_schema", None), settings)  # typed and ranged, one line
    try:
        return factory(**settings, **extra)
    except TypeError as exc:
        raise ConfigError(f"metric {name!r}: bad settings {settings}: {exc}") from None


# Bump when a built-in metric's verdicts change for the same inputs: it is part of the `judgements` asset's
# code version, so Dagster marks judgements stale.
# 5: `gaia` is the official scorer again, `gaia_strict` beside it (issue 30); 4: rule metrics keep signs, % and
# exponents (issue 20); 3: DABench, DiscoveryBench (11)
METRICS_CODE_VERSION = "5"


def judgements_version(df: Any) -> str:
    """A content hash of a judgements frame (who judged what, and the verdicts): the `judgements` asset's data
    version, so `metrics` goes stale exactly when a verdict changed."""
    from evalpipe.core.fingerprint import fingerprint

    cols = [c for c in ("sample_id", "metric", "score", "status", "judge_fingerprint") if c in getattr(df, "columns", [])]
    if not cols or len(df) == 0:
        return fingerprint([], 16)
    ordered = df[cols].sort_values(cols[:2])
    # [sweeps] column by column (the same values as `.astype(object).where(notna, None)`, ~3x less work on a
    # partition's small batches): Python scalars, a missing value (None, NaN, NA) as None
    columns = [[None if _missing(v) else v for v in ordered[c].tolist()] for c in cols]
    return fingerprint([list(r) for r in zip(*columns)], 16)


def _missing(v: Any) -> bool:
    import pandas as pd

    if v is None or isinstance(v, (str, bool)):
        return v is None
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):  # (a list or array cell: not a missing value)
        return False
