"""`dabstep`: DABStep answers, scored as DABStep's official scorer does (`question_scorer` in
`dabstep_benchmark/evaluation/scorer.py` of the adyen/DABstep leaderboard space), the authority for the benchmark.

The rules, in the scorer's order, on both texts stripped and lower-cased:

1. if either side is a "formatted number" (`1,000`, `$12,345.67`, or a decimal such as `0.99` / `0,99`; a plain
   integer such as `64` is not one), both are read as numbers and compared; no number on one side: wrong;
2. else, if either side holds `,` or `;`, both are lists: outer `[` `]` dropped, split on `,`/`;`, blanks dropped,
   sorted; equal lists are right, lists of another length wrong, else each pair (in sorted order) must pass these
   rules recursively;
3. else, if both hold a number, the first number of each is compared;
4. else as strings: equal once every non-word character is dropped; or, when one side is a single word, one side's
   words are a subset of the other's; or a `difflib` similarity above 0.95.

Numbers: commas and `$` dropped, the first `\\d*\\.\\d+|\\d+\\.?\\d*` read (a `%` after it ignored; no sign: the
official scorer reads `-5` as `5`, and so do we). Equal when identical; when both are below 1, within 1e-4 (relative
or absolute); else equal after rounding both to the fewer decimals of the two (Python's `round`), or within 1e-4.

`rule: dsgym` scores instead as DSGym's own `dabstep` metric does today (stripped, lower-cased equality; its source
marks it "exact match for now"). Either way a sample without a reference is unscored, as both leave it.
"""
from __future__ import annotations

import math
import re
from difflib import SequenceMatcher

from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import DabstepSettings

RULES = ("official", "dsgym")
# DABStep's "number with commas": thousands groups (at least one comma), or a decimal with `.` or `,`.
_FORMATTED_NUMBER = re.compile(r"^\$?(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+[.,]\d+)$")
_FIRST_NUMBER = re.compile(r"(\d*\.\d+|\d+\.?\d*)%?")
_LIST_SEPARATORS = re.compile(r"[,;]")
_NON_WORD = re.compile(r"[^\w]")
_WORD = re.compile(r"\b\w+\b")
_TOL = 1e-4
_SIMILARITY = 0.95


def first_number(text: str) -> float | None:
    """The first unsigned number of `text` once `,` and `$` are dropped (DABStep's `extract_numeric`)."""
    match = _FIRST_NUMBER.search(text.replace(",", "").replace("$", ""))
    return float(match.group(1)) if match else None


def _decimals(x: float) -> int:
    text = str(x)
    return len(text.split(".")[-1]) if "." in text else 0


def same_number(a: float, b: float) -> bool:
    if a == b:
        return True
    close = math.isclose(a, b, rel_tol=_TOL, abs_tol=_TOL)
    if a < 1 and b < 1:
        return close
    places = min(_decimals(a), _decimals(b))
    return round(a, places) == round(b, places) or close


def same_text(a: str, b: str) -> bool:
    if _NON_WORD.sub("", a) == _NON_WORD.sub("", b):
        return True
    words_a, words_b = _WORD.findall(a), _WORD.findall(b)
    if words_a and words_b and (len(words_a) == 1 or len(words_b) == 1):
        return set(words_a) <= set(words_b) or set(words_b) <= set(words_a)
    return SequenceMatcher(None, a, b).ratio() > _SIMILARITY


def _items(text: str) -> list[str]:
    text = re.sub(r"^\[|\]$", "", text.strip())
    return sorted(item.strip() for item in _LIST_SEPARATORS.split(text) if item.strip())


def same_list(a: str, b: str) -> bool:
    items_a, items_b = _items(a), _items(b)
    if items_a == items_b:
        return True
    return len(items_a) == len(items_b) and all(official_match(x, y) for x, y in zip(items_a, items_b))


def official_match(answer: str | None, reference: str | None) -> bool:
    """DABStep's `question_scorer(agent_answer, reference)`."""
    if answer is None or reference is None:
        return False
    a, b = answer.strip().lower(), reference.strip().lower()
    if _FORMATTED_NUMBER.match(a) or _FORMATTED_NUMBER.match(b):
        x, y = first_number(a), first_number(b)
        return x is not None and y is not None and same_number(x, y)
    if any(sep in a or sep in b for sep in ",;"):
        return same_list(a, b)
    x, y = first_number(a), first_number(b)
    if x is not None and y is not None:
        return same_number(x, y)
    return same_text(a, b)


@register_metric("dabstep")
class DABStep(Metric):
    """DABStep's official answer scorer (setting `rule`: `official`, default, or `dsgym`)."""

    name = "dabstep"
    option_schema = DabstepSettings
    inputs = frozenset({"target", "prediction"})

    def __init__(self, **settings):
        super().__init__(**settings)
        self.rule = str(settings.get("rule", "official"))
        if self.rule not in RULES:
            raise ConfigError(f"dabstep: rule must be one of {list(RULES)}, got {self.rule!r}")

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        prediction = item.prediction or ""
        if self.rule == "dsgym":
            ok = prediction.strip().lower() == item.target.strip().lower()
        else:
            ok = official_match(prediction, item.target)
        return Score(value=1.0 if ok else 0.0, correct=ok, normalized_prediction=prediction.strip().lower(),
                     normalized_target=item.target.strip().lower(), details={"rule": self.rule})
