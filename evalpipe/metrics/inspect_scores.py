"""Metric `inspect_scores`: the scores an Inspect AI log's own scorers gave (docs/interop.md "Inspect AI logs").

An `adapter: inspect_log` split keeps, per sample, each scorer's value (`metadata.inspect_scores`) and the log's
own output (`metadata.inspect_output`). For a rollout whose output is the log's (a `runner: replay` over the same
log), the sample's score is the first scorer's value as Inspect's `value_to_float` reads it ("C" 1, "I" 0, "P" 0.5,
numbers as they are), `details.inspect_scores` holds every scorer's value. Another model's output has no Inspect
score (an error verdict saying so): the log's scorers judged the log's outputs only. Per partition, `summary_rows`
gives `<metric>_<scorer>`: the mean of those values (what Inspect's `accuracy()` / `mean()` give) with the stderr
of Inspect's own `stderr()` metric, higher is better; the log's own reported metric values are kept beside them as
`<metric>_<scorer>.<log metric>` when the partition holds every sample of the log.
"""
from __future__ import annotations

import re
from typing import Any

from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import NoSettings

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def to_float(value: Any) -> float | None:
    """Inspect's own reading of a score value as a number (its `value_to_float`); None for a dict/list value."""
    from inspect_ai.scorer import value_to_float

    if isinstance(value, (dict, list)):
        return None
    return float(value_to_float()(value))


@register_metric("inspect_scores")
class InspectScores(Metric):
    name = "inspect_scores"
    requires_target = False  # the log's scorer judged against its own target, list or not
    inputs = frozenset({"metadata", "raw_output"})
    option_schema = NoSettings

    def score(self, item: JudgeInput) -> Score:
        scores = item.metadata.get("inspect_scores")
        if not isinstance(scores, dict) or not scores:
            return Score.error("no Inspect scores in the sample's metadata; the split's adapter must be inspect_log "
                               "over a log whose samples were scored")
        if item.raw_output != item.metadata.get("inspect_output"):
            return Score.error("not the log's own output: an Inspect log's scores judge its outputs only (use "
                               "runner: replay over the same log)")
        values = {name: to_float(v) for name, v in scores.items()}
        first = next(iter(values.values()))
        return Score(value=first, correct=(bool(first) if first in (0.0, 1.0) else None), reason="inspect",
                     details={"inspect_scores": values, "inspect_metrics": item.metadata.get("inspect_metrics")})

    @staticmethod
    def summary_rows(metric: str, counted: Any, details: list[dict], seed: int) -> list[dict]:
        import math

        from inspect_ai.scorer import SampleScore, stderr
        from inspect_ai.scorer import Score as InspectScore

        details = [d for d in details if isinstance(d, dict) and isinstance(d.get("inspect_scores"), dict)]
        if not details:
            return []
        log_metrics = details[0].get("inspect_metrics") or {}
        rows = []
        for scorer in details[0]["inspect_scores"]:
            values = [d["inspect_scores"].get(scorer) for d in details]
            values = [v for v in values if v is not None]
            if not values:
                continue
            err = float(stderr()([SampleScore(score=InspectScore(value=v)) for v in values])) if len(values) > 1 \
                else float("nan")
            name = f"{metric}_{_UNSAFE.sub('_', scorer)}"
            rows.append({"metric": name, "slice": "all", "value": sum(values) / len(values), "n": len(values),
                         "n_unscored": 0, "n_errors": 0, "stderr": err, "ci_low": math.nan, "ci_high": math.nan,
                         "higher_is_better": True, "kind": "score"})
            own = log_metrics.get(scorer) or {}
            if own.get("samples") == len(values):  # the log's figures describe these samples only when all are here
                for m, v in (own.get("metrics") or {}).items():
                    rows.append({"metric": f"{name}.{_UNSAFE.sub('_', m)}", "slice": "all", "value": float(v),
                                 "n": len(values), "n_unscored": 0, "n_errors": 0, "stderr": math.nan,
                                 "ci_low": math.nan, "ci_high": math.nan,
                                 "higher_is_better": None if "stderr" in m or m in ("std", "var") else True,
                                 "kind": "score"})
        return rows
