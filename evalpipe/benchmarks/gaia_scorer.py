"""The GAIA scorer, with the semantics of the official leaderboard's `question_scorer`, and the `gaia` metric.

Leaderboard numbers are computed with that scorer, quirks included, so this module reproduces its behaviour
rather than improving on it. The branch is chosen by the GROUND TRUTH, never by the prediction:

1. number  - the ground truth parses with `float()`: the prediction loses every `$`, `%` and `,` and must
             parse to the same float. A prediction that does not parse counts as `inf` (so it is wrong,
             except against a ground truth of "inf", as in the original).
2. list    - the ground truth contains `,` or `;`: both sides are split on either character; different
             lengths are wrong; each element compares as a number (when the ground-truth element parses)
             or as a string with all whitespace removed and lowercased, punctuation KEPT.
3. string  - otherwise: all whitespace and ASCII punctuation removed, lowercased, then equality; except, on
             purpose, a sign and a decimal point (below).

Consequences kept on purpose: "1,000" as a ground truth is a two-element list, not a number; "17 km" is
wrong against "17"; "sea gull" equals "seagull"; the number branch drops `$` and `%` ("3%" is right for "3") and
does not read the unicode minus ("−3" is wrong for "-3"). Two deliberate differences: the original crashes (or
turns `None` into the string "None") on a missing or non-string prediction; here such a prediction is wrong. And
the string branch keeps what makes a number (issue 20): a minus right before a digit and not glued to a letter or
digit on its left, or opening the text ("-3 km" and "- 3 km" are not "3 km", while "COVID-19" still equals
"covid 19" and "3 - 2" equals "3-2") and a decimal point between two digits ("3.5 km" is not "35 km"); the
original deletes both as punctuation. Ground truths of the number and list
branches are scored exactly as the original scores them.
"""
from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from typing import Any

from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.gaia_tolerance import NumberRules
from evalpipe.core.types import Score

_WHITESPACE = re.compile(r"\s")  # any Unicode whitespace, like the original's re.sub(r"\s", "", ...)
_LIST_SEPARATORS = re.compile(r"[,;]")
_NUMBER_NOISE = ("$", "%", ",")
_DROP_NUMBER_NOISE = str.maketrans("", "", "".join(_NUMBER_NOISE))


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def normalize_number_str(text: str) -> float:
    """The prediction as a number: `$`, `%` and `,` removed, then `float()`; `inf` when that fails."""
    for ch in _NUMBER_NOISE:
        text = text.replace(ch, "")
    try:
        return float(text)
    except ValueError:
        return math.inf


def split_string(text: str) -> list[str]:
    """Split on every `,` and `;` (empty pieces kept, as `re.split` does)."""
    return _LIST_SEPARATORS.split(text)


# ASCII punctuation, except a sign and a decimal point between two digits: group 1 holds what is kept. A sign is a
# "-" right before a digit (or ".digit", "$digit") and not glued to a letter or digit on its left ("-3 km", "from -3";
# "COVID-19" and "3-2" have hyphens), or a "-" that opens the text, spaces allowed ("- 3 km"); "3 - 2" has a dash.
_PUNCT_BUT_NUMBER = re.compile(r"(^\s*-(?=\s*\$?\s*\.?\d)|(?<![^\W_])-(?=\$?\.?\d)|(?<=\d)\.(?=\d))|["
                               + re.escape(string.punctuation) + "]")


def normalize_str(text: str, remove_punct: bool = True) -> str:
    """All whitespace removed, lowercased, and (by default) ASCII punctuation removed, signs and decimal points of
    numbers excepted."""
    if remove_punct:
        text = _PUNCT_BUT_NUMBER.sub(lambda m: m.group(1) or "", text)
    return _WHITESPACE.sub("", text).lower()


@dataclass(frozen=True)
class GaiaVerdict:
    correct: bool
    score: float
    reason: str
    normalized_prediction: str | None
    normalized_ground_truth: str


def _fmt_number(x: float) -> str:
    return repr(x)


_OFFICIAL = NumberRules()


def score_answer(model_answer: Any, ground_truth: str, numbers: NumberRules = _OFFICIAL) -> GaiaVerdict:
    """Score one answer and say why: which branch, and the normalised forms that were compared. `numbers`: the
    official exact comparison by default; the opt-in tolerance/fraction variant (metrics/gaia_tolerance.py)."""
    gt = str(ground_truth)
    gt_num = numbers.ground_truth_number(gt)
    if gt_num is not None:
        if not isinstance(model_answer, str):
            return GaiaVerdict(False, 0.0, f"no answer (got {type(model_answer).__name__})", None, _fmt_number(gt_num))
        pred_num = numbers.prediction_number(model_answer, normalize_number_str(model_answer))
        ok = numbers.equal(pred_num, gt_num)
        parsed = not math.isinf(pred_num) or _parses_as_float(model_answer.translate(_DROP_NUMBER_NOISE))
        within = f" within {numbers.tolerance:g}" if ok and pred_num != gt_num else ""
        why = f"number: equal{within}" if ok else ("number: different value" if parsed else "number: prediction is not a number")
        return GaiaVerdict(ok, float(ok), why, _fmt_number(pred_num), _fmt_number(gt_num))

    if any(sep in gt for sep in (",", ";")):
        gt_items = split_string(gt)
        gt_nums = [numbers.ground_truth_number(g) for g in gt_items]
        gt_norm = [_fmt_number(x) if x is not None else normalize_str(g, remove_punct=False)
                   for g, x in zip(gt_items, gt_nums)]
        shown_gt = ",".join(gt_norm)
        if not isinstance(model_answer, str):
            return GaiaVerdict(False, 0.0, f"no answer (got {type(model_answer).__name__})", None, shown_gt)
        pred_items = split_string(model_answer)
        if len(pred_items) != len(gt_items):
            shown = ",".join(normalize_str(p, remove_punct=False) for p in pred_items)
            return GaiaVerdict(False, 0.0, f"list: {len(pred_items)} elements, expected {len(gt_items)}",
                               shown, shown_gt)
        pred_norm, mismatches = [], []
        for i, (p, g) in enumerate(zip(pred_items, gt_nums)):
            if g is not None:
                pn = numbers.prediction_number(p, normalize_number_str(p))
                pred_norm.append(_fmt_number(pn))
                ok_item = numbers.equal(pn, g)
            else:
                pred_norm.append(normalize_str(p, remove_punct=False))
                ok_item = pred_norm[-1] == gt_norm[i]
            if not ok_item:
                mismatches.append(i + 1)
        ok = not mismatches
        why = "list: all elements equal" if ok else f"list: element(s) {', '.join(map(str, mismatches))} differ"
        return GaiaVerdict(ok, float(ok), why, ",".join(pred_norm), shown_gt)

    gt_norm_s = normalize_str(gt)
    if not isinstance(model_answer, str):
        return GaiaVerdict(False, 0.0, f"no answer (got {type(model_answer).__name__})", None, gt_norm_s)
    pred_s = normalize_str(model_answer)
    ok = pred_s == gt_norm_s
    return GaiaVerdict(ok, float(ok), "string: equal" if ok else "string: different", pred_s, gt_norm_s)


def question_scorer(model_answer: Any, ground_truth: str) -> bool:
    """True when `model_answer` matches `ground_truth` as the official GAIA leaderboard judges it."""
    return score_answer(model_answer, ground_truth).correct


def is_unscored(ground_truth: Any) -> bool:
    """GAIA's test split hides its answers as '?': such samples have no ground truth, they are not wrong."""
    return ground_truth is None or (isinstance(ground_truth, str) and ground_truth.strip() == "?")


@register_metric("gaia")
class GaiaMetric(Metric):
    """Accuracy under the official GAIA scorer. Ground truth `?` or missing: unscored. Opt-in settings
    `numeric_tolerance` and `fractions` (metrics/gaia_tolerance.py) give the GAIA lab's lenient number variant."""

    name = "gaia"
    option_schema: frozenset[str] = frozenset({"numeric_tolerance", "fractions"})  # none given: the official scorer
    requires_target = True

    def __init__(self, **settings: Any):
        self.numbers = NumberRules.from_settings(settings)  # a bad value fails here, before any model call
        super().__init__(**settings)

    def score(self, item: JudgeInput) -> Score:
        if is_unscored(item.target):
            return Score.unscored("no ground truth ('?')")
        v = score_answer(item.prediction, item.target, self.numbers)
        return Score(value=v.score, correct=v.correct, reason=v.reason,
                     normalized_prediction=v.normalized_prediction, normalized_target=v.normalized_ground_truth)
