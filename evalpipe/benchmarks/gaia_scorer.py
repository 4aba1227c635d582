"""The GAIA scorer, the official leaderboard's `question_scorer` verbatim, quirks included, and the `gaia` metric;
beside it the named variant `gaia_strict`, which keeps a number's sign and decimal point in the string branch.

Leaderboard numbers are computed with that scorer, so `gaia` reproduces its behaviour rather than improving on it.
The branch is chosen by the GROUND TRUTH, never by the prediction:

1. number  - the ground truth parses with `float()`: the prediction loses every `$`, `%` and `,` and must
             parse to the same float. A prediction that does not parse counts as `inf` (so it is wrong,
             except against a ground truth of "inf", as in the original).
2. list    - the ground truth contains `,` or `;`: both sides are split on either character; different
             lengths are wrong; each element compares as a number (when the ground-truth element parses)
             or as a string with all whitespace removed and lowercased, punctuation KEPT.
3. string  - otherwise: all whitespace removed, lowercased, every ASCII punctuation character removed (a minus
             sign and a decimal point too: "3.5 million" equals "35 million", "-3 km" equals "3 km"), then equality.

Consequences kept on purpose: "1,000" as a ground truth is a two-element list, not a number; "17 km" is
wrong against "17"; "sea gull" equals "seagull"; the number branch drops `$` and `%` ("3%" is right for "3") and
does not read the unicode minus ("−3" is wrong for "-3"). One difference: the original crashes (or turns `None` into
the string "None") on a missing or non-string prediction; here such a prediction is wrong.

`gaia_strict` (issue 20's reading, a named variant since issue 30) differs only in the string branch: it keeps
what makes a number, a minus right before a digit and not glued to a letter or digit on its left, or opening the
text ("-3 km" and "- 3 km" are not "3 km", while "COVID-19" still equals "covid 19" and "3 - 2" equals "3-2"), and
a decimal point between two digits ("3.5 km" is not "35 km").
"""
from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass
from typing import Any

from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.gaia_tolerance import NumberRules
from evalpipe.metrics.settings import GaiaSettings
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


_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)

# For `gaia_strict`: ASCII punctuation, except a sign and a decimal point between two digits: group 1 holds what is
# kept. A sign is a "-" right before a digit (or ".digit", "$digit") and not glued to a letter or digit on its left
# ("-3 km", "from -3"; "COVID-19" and "3-2" have hyphens), or a "-" that opens the text, spaces allowed ("- 3 km");
# "3 - 2" has a dash.
_PUNCT_BUT_NUMBER = re.compile(r"(^\s*-(?=\s*\$?\s*\.?\d)|(?<![^\W_])-(?=\$?\.?\d)|(?<=\d)\.(?=\d))|["
                               + re.escape(string.punctuation) + "]")


def normalize_str(text: str, remove_punct: bool = True) -> str:
    """The official normalisation: all whitespace removed, lowercased, and (by default) every ASCII punctuation
    character removed, in the original's order."""
    no_spaces = _WHITESPACE.sub("", text)
    return no_spaces.lower().translate(_DROP_PUNCTUATION) if remove_punct else no_spaces.lower()


def normalize_str_keeping_numbers(text: str) -> str:
    """`gaia_strict`'s string branch: as `normalize_str`, except that a number's sign and decimal point stay."""
    return _WHITESPACE.sub("", _PUNCT_BUT_NUMBER.sub(lambda m: m.group(1) or "", text)).lower()


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


def score_answer(model_answer: Any, ground_truth: str, numbers: NumberRules = _OFFICIAL,
                 keep_number_signs: bool = False) -> GaiaVerdict:
    """Score one answer and say why: which branch, and the normalised forms that were compared. `numbers`: the
    official exact comparison by default; the opt-in tolerance/fraction variant (metrics/gaia_tolerance.py).
    `keep_number_signs`: `gaia_strict`'s string branch instead of the official one."""
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

    normalize = normalize_str_keeping_numbers if keep_number_signs else normalize_str
    gt_norm_s = normalize(gt)
    if not isinstance(model_answer, str):
        return GaiaVerdict(False, 0.0, f"no answer (got {type(model_answer).__name__})", None, gt_norm_s)
    pred_s = normalize(model_answer)
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
    option_schema = GaiaSettings  # none given: the official scorer
    requires_target = True
    keep_number_signs = False

    def __init__(self, **settings: Any):
        self.numbers = NumberRules.from_settings(settings)  # a bad value fails here, before any model call
        super().__init__(**settings)

    def score(self, item: JudgeInput) -> Score:
        if is_unscored(item.target):
            return Score.unscored("no ground truth ('?')")
        v = score_answer(item.prediction, item.target, self.numbers, keep_number_signs=self.keep_number_signs)
        return Score(value=v.score, correct=v.correct, reason=v.reason,
                     normalized_prediction=v.normalized_prediction, normalized_target=v.normalized_ground_truth)


@register_metric("gaia_strict")
class GaiaStrictMetric(GaiaMetric):
    """The official GAIA scorer, except that its string branch keeps a number's sign and decimal point ("-3 km" is
    not "3 km", "3.5 million" is not "35 million"). Reported beside `gaia`, never in its place: the official number
    is the one leaderboards compare; the gap between the two counts answers that are right only because the official
    scorer deletes a sign or a decimal point."""

    name = "gaia_strict"
    variant_of = "gaia"
    keep_number_signs = True
