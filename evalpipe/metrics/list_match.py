"""DAEval (InfiAgent-DABench) answers: `@answer_name[value]`, several per response.

The semantics are those of the benchmark's official closed-form evaluation (InfiAgent, `eval_closed_form.py`):

- answers are read from the response with the pattern `@(\\w+)\\[(.*?)\\]`: the name is word characters, the value
  is everything up to the first `]` on the same line, **kept as it is** (no stripping: `@x[ male]` is the value
  `" male"`); a name given twice keeps its last value;
- a sub-answer is right when the value equals the reference value as a string, or when both convert with
  Python's `float()` and differ by less than 1e-6 (`float()` itself ignores surrounding whitespace, so
  `@x[ 0.5]` is right for `0.5`, while `@x[ yes]` is wrong for `yes`); a missing name is wrong;
- a question is right when all its sub-answers are.

Setting `skip_empty` (false): an empty response is left out (unscored), as the reference script leaves out
questions whose response is empty; by default it is wrong, like every failed answer in evalpipe. (A rollout that
failed for good is always counted wrong.)

Per question the score is 1 when every sub-answer is right (the reference's "accuracy by question"); the details
carry the fraction right (row `list_match_proportional`, "proportional accuracy by sub-question") and the counts
behind `list_match_by_subquestion` (right sub-answers / all sub-answers over the partition).

The reference answers may be given as `@name[value]` text, as JSON `[["name", "value"], ...]` (the
`common_answers` of `da-dev-labels.jsonl`) or `{"name": "value"}`, or as the Python literal
`[['name', 'value'], ...]` that DSGym's task files use: all three read the same. A reference that is none of
these is an error naming the sample (never a silent "unscored").
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from evalpipe.core.errors import DataError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import ListMatchSettings
from evalpipe.core.types import Score

# The reference's own pattern: `.` stops at a newline, `.*?` at the first `]`.
_ANSWER = re.compile(r"@(\w+)\[(.*?)\]")
NUMERIC_TOL = 1e-6  # |float(a) - float(b)| < 1e-6, strictly, as the reference


def parse_answers(text: str | None) -> dict[str, str]:
    """name -> value, values exactly as written; a name given twice keeps its last value."""
    return {name: value for name, value in _ANSWER.findall(text or "")}


class BadReference(ValueError):
    """A reference answer in none of the accepted spellings."""


def _pairs_to_dict(obj: Any) -> dict[str, Any] | None:
    if isinstance(obj, dict):
        return {str(k): v for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if all(isinstance(p, (list, tuple)) and len(p) == 2 for p in obj):
            return {str(p[0]): p[1] for p in obj}
    return None


def parse_gold(target: Any) -> dict[str, Any]:
    """The reference answers as name -> value (values kept as given: text stays text, a JSON number stays a number).

    Accepts `@name[value]` text, JSON `[[name, value], ...]` / `{name: value}`, the Python literal
    `[['name', 'value'], ...]`, or those objects themselves. Raises BadReference for anything else."""
    if target is None:
        return {}
    if not isinstance(target, str):
        found = _pairs_to_dict(target)
        if found is None:
            raise BadReference(f"a {type(target).__name__} that is not a list of [name, value] pairs")
        return found
    text = target.strip()
    if not text:
        return {}
    if text[0] in "[{":
        for parse in (json.loads, ast.literal_eval):
            try:
                obj = parse(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            found = _pairs_to_dict(obj)
            if found is not None:
                return found
    found = parse_answers(text)
    if found:
        return found
    raise BadReference("not @name[value] text, JSON [[\"name\", \"value\"], ...] or a Python literal "
                          "[['name', 'value'], ...]")


def is_equal(response: Any, label: Any) -> bool:
    """The reference's comparison: equal as given, else both through float() within 1e-6 (strictly)."""
    if response == label:
        return True
    try:
        return abs(float(response) - float(label)) < NUMERIC_TOL
    except (TypeError, ValueError, OverflowError):
        return False


def sub_answer_right(pred: Any, gold: Any) -> bool:
    return pred is not None and is_equal(pred, gold)


@register_metric("list_match")
class ListMatch(Metric):
    """DAEval's @name[value] answers scored as InfiAgent-DABench's official closed-form evaluation."""

    name = "list_match"
    option_schema = ListMatchSettings  # typed (metrics/settings.py), checked before any model call
    inputs = frozenset({"sample_id", "target", "prediction", "raw_output"})  # no stored JSON to decode

    def __init__(self, **settings: Any):
        unknown = set(settings) - {"skip_empty"}
        if unknown:
            from evalpipe.core.errors import ConfigError

            raise ConfigError(f"list_match: unknown setting(s) {sorted(unknown)}; known: ['skip_empty']")
        super().__init__(**settings)
        self.skip_empty = bool(settings.get("skip_empty", False))

    def score(self, item: JudgeInput) -> Score:
        text = item.raw_output if item.raw_output is not None else item.prediction
        if self.skip_empty and not text:  # the reference leaves questions without a response out of every total
            return Score.unscored("empty response (skip_empty: left out, as the reference script does)")
        try:
            gold = parse_gold(item.target)
        except BadReference as exc:
            raise DataError(f"sample {item.sample_id!r}: list_match cannot read its reference answer "
                            f"{str(item.target)[:200]!r}: {exc}; fix the sample's ground truth") from None
        if not gold:
            return Score.unscored("no reference sub-answers")
        pred = parse_answers(text)
        right = {name: sub_answer_right(pred.get(name), value) for name, value in gold.items()}
        n_right = sum(right.values())
        ok = n_right == len(gold)
        return Score(
            value=float(ok), correct=ok, reason=f"{n_right}/{len(gold)} sub-answers right",
            normalized_prediction=json.dumps(pred, ensure_ascii=False),
            normalized_target=json.dumps(gold, ensure_ascii=False),
            details={"sub_answers": right, "components": {"proportional": n_right / len(gold)},
                     "ratios": {"by_subquestion": [n_right, len(gold)]}},
        )

    @classmethod
    def failure_details(cls, target: str | None) -> dict[str, Any]:
        """Details for a sample whose rollout failed: every sub-answer counts as wrong."""
        try:
            n = len(parse_gold(target))
        except BadReference:
            return {}
        return {"components": {"proportional": 0.0}, "ratios": {"by_subquestion": [0, n]}} if n else {}
