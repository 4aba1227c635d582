"""`contains_answer`: 1 when the ground truth appears in the prediction (case-insensitive), else 0."""
from __future__ import annotations

from evalpipe.metrics import JudgeInput, Metric
from evalpipe.core.types import Score


class ContainsAnswer(Metric):
    """1 if the target occurs in the prediction, ignoring case and surrounding spaces."""

    name = "contains_answer"
    option_schema: frozenset[str] = frozenset()  # no settings (docs/config.md#declaring-options)

    def score(self, item: JudgeInput) -> Score:
        pred = (item.prediction or "").strip().lower()
        target = (item.target or "").strip().lower()
        ok = bool(target) and target in pred
        return Score(value=1.0 if ok else 0.0, correct=ok, normalized_prediction=pred, normalized_target=target)
