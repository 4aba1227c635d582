"""Exact match after light normalisation."""
from __future__ import annotations

import re
import string

from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.types import Score

_WS = re.compile(r"\s+")


def normalize_text(s: str, *, case: bool = False, punctuation: bool = False) -> str:
    s = _WS.sub(" ", s.strip())
    if not case:
        s = s.lower()
    if not punctuation:
        s = s.strip(string.punctuation + " ")
    return s


@register_metric("exact_match")
class ExactMatch(Metric):
    name = "exact_match"

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        case = bool(self.settings.get("case_sensitive", False))
        pred = normalize_text(item.prediction or "", case=case)
        gold = normalize_text(item.target, case=case)
        ok = pred == gold
        return Score(value=float(ok), correct=ok, reason="equal" if ok else "different",
                     normalized_prediction=pred, normalized_target=gold)
