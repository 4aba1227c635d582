"""DAEval-style answers: `@answer_name[value]`, several per response.

Per question the score is 1 when every sub-answer is right (accuracy by question); the details carry the
fraction right (proportional accuracy, row `list_match_proportional`) and the counts behind accuracy by
sub-question (row `list_match_by_subquestion` = right sub-answers / all sub-answers over the partition).
"""
from __future__ import annotations

import json
import re
from typing import Any

from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.numbers import numbers_close
from evalpipe.types import Score

_ANSWER = re.compile(r"@(\w+)\[([^\]]*)\]")  # the value ends at the first ']'
NUMERIC_TOL = 1e-6


def parse_answers(text: str | None) -> dict[str, str]:
    """name -> value; a name given twice keeps its last value."""
    out: dict[str, str] = {}
    for name, value in _ANSWER.findall(text or ""):
        out[name] = value.strip()
    return out


def parse_gold(target: Any) -> dict[str, str]:
    """The reference answers: `@name[value]` text, a JSON object {name: value}, or JSON [[name, value], ...]."""
    if isinstance(target, str):
        found = parse_answers(target)
        if found:
            return found
        try:
            target = json.loads(target)
        except ValueError:
            return {}
    if isinstance(target, dict):
        return {str(k): str(v).strip() for k, v in target.items()}
    if isinstance(target, list):
        return {str(p[0]): str(p[1]).strip() for p in target if isinstance(p, (list, tuple)) and len(p) == 2}
    return {}


def _to_float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def sub_answer_right(pred: str | None, gold: str) -> bool:
    if pred is None:
        return False
    if pred == gold:
        return True
    p, g = _to_float(pred), _to_float(gold)
    return p is not None and g is not None and numbers_close(p, g, abs_tol=NUMERIC_TOL)


@register_metric("list_match")
class ListMatch(Metric):
    name = "list_match"

    def score(self, item: JudgeInput) -> Score:
        gold = parse_gold(item.target)
        if not gold:
            return Score.unscored("no @name[value] reference answers")
        pred = parse_answers(item.raw_output if item.raw_output is not None else item.prediction)
        right = {name: sub_answer_right(pred.get(name), value) for name, value in gold.items()}
        n_right = sum(right.values())
        ok = n_right == len(gold)
        return Score(
            value=float(ok), correct=ok, reason=f"{n_right}/{len(gold)} sub-answers right",
            normalized_prediction=json.dumps(pred, ensure_ascii=False), normalized_target=json.dumps(gold, ensure_ascii=False),
            details={"sub_answers": right, "components": {"proportional": n_right / len(gold)},
                     "ratios": {"by_subquestion": [n_right, len(gold)]}},
        )

    @classmethod
    def failure_details(cls, target: str | None) -> dict[str, Any]:
        """Details for a sample whose rollout failed: every sub-answer counts as wrong."""
        n = len(parse_gold(target))
        return {"components": {"proportional": 0.0}, "ratios": {"by_subquestion": [0, n]}} if n else {}
