"""Exact match after light normalisation, with numeric tolerance and list-as-set options."""
from __future__ import annotations

import math
import re
import string

from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, ScoreColumns, register_metric
from evalpipe.metrics.settings import ExactMatchSettings
from evalpipe.metrics.numbers import ascii_minus, read_quantity, same_quantity
from evalpipe.core.types import Score

_SETTINGS = {"case_sensitive", "numeric", "rel_tol", "abs_tol", "numeric_tolerance", "list", "separators", "ordered"}


_STRIPPED = frozenset(string.punctuation + " ")
_NUMBER_HEAD = re.compile(r"[+-]?\.?$")  # the sign and decimal point a number may start with ("-3", ".5", "-.5")
_GLUED_MINUS = re.compile(r"-(?! )")  # a minus glued to the word after it ("-inf"); "- x" is a dash


def strip_outer_punctuation(s: str) -> str:
    """`s` without the ASCII punctuation and spaces at its ends, except what a number means by them: a leading sign
    or decimal point before a digit ("(-3)" -> "-3", "...-.5" -> "-.5"), a percent sign after a digit ("3%." ->
    "3%"), any minus before a number ("- 3", "-(3)" stay: never a silent sign flip) and a minus glued to a word
    ("-inf"; "- yes" is a dash and goes).
    A final period after a digit goes ("5." -> "5": a full stop, or the same number)."""
    n = len(s)
    i = 0
    while i < n and s[i] in _STRIPPED:
        i += 1
    if i == n:
        return ""
    j = n
    while s[j - 1] in _STRIPPED:
        j -= 1
    keep_from = i
    if s[i].isdigit():  # before a number, any minus stays ("- 3", "-(3)": not a number, and not 3 either)
        keep_from = _NUMBER_HEAD.search(s, 0, i).start()
        minus = s.find("-", 0, keep_from)
        if minus >= 0:
            keep_from = minus
    else:
        minus = _GLUED_MINUS.search(s, 0, i)
        if minus:
            keep_from = minus.start()
    keep_to = j
    if s[j - 1].isdigit():
        pct = s.find("%", j, j + 2)
        if pct >= 0 and s[j:pct].strip() == "":
            keep_to = pct + 1
    return s[keep_from:keep_to]


def normalize_text(s: str, *, case: bool = False, punctuation: bool = False) -> str:
    # whitespace runs to one space, ends stripped: the same text as re.sub(r"\s+", " ", s.strip()) (str.split,
    # str.strip and re's \s share one definition of whitespace, str.isspace), about three times faster
    s = ascii_minus(" ".join(s.split()))
    if not case:
        s = s.lower()
    if not punctuation:
        s = strip_outer_punctuation(s)
    return s


def within_relative_error(pred: float, gold: float, tolerance: float) -> bool:
    """DSGym's rule: relative error below the tolerance (strictly); against a reference of 0, |pred| below it."""
    error = abs(pred) if gold == 0 else abs(pred - gold) / abs(gold)
    return error < tolerance


@register_metric("exact_match")
class ExactMatch(Metric):
    """Settings:
    - case_sensitive (false)
    - numeric (true): when both sides read as numbers, compare them as numbers ("1.0" == "1", "$1,000" == "1000",
      "1e3" == "1000", "−3" == "-3"; never "-3" == "3", nor "3%" == "3": docs/metrics.md, "Normalizer rules")
    - rel_tol (0), abs_tol (0): tolerance of that comparison, relative to the reference answer / absolute
    - numeric_tolerance (DSGym's name; none): also right when the relative error |pred - ref| / |ref| is below it
      (strictly), or, for a reference of 0, when |pred| is below it, as DSGym's exact_match decides
    - list (false): answers are lists split on `separators` (",;"), compared as sets (`ordered: true`: as sequences)
    """

    name = "exact_match"
    option_schema = ExactMatchSettings  # typed and ranged (metrics/settings.py), checked before any model call

    def __init__(self, **settings):
        unknown = set(settings) - _SETTINGS
        if unknown:
            raise ConfigError(f"exact_match: unknown setting(s) {sorted(unknown)}; known: {sorted(_SETTINGS)}")
        super().__init__(**settings)
        self.case = bool(settings.get("case_sensitive", False))
        self.numeric = bool(settings.get("numeric", True))
        self.rel_tol = float(settings.get("rel_tol", 0.0))
        self.abs_tol = float(settings.get("abs_tol", 0.0))
        tol = settings.get("numeric_tolerance")
        try:
            self.numeric_tolerance = None if tol is None else float(tol)
        except (TypeError, ValueError):
            raise ConfigError(f"exact_match: numeric_tolerance must be a number, got {tol!r}") from None
        self.as_list = bool(settings.get("list", False))
        self.separators = str(settings.get("separators", ",;"))
        self.ordered = bool(settings.get("ordered", False))
        # equal texts are the same answer, so the numbers need not be read (most right answers): true unless a
        # tolerance is negative or NaN, which makes even a number unequal to itself
        self._equal_is_same = not self.numeric or (math.isfinite(self.rel_tol) and self.rel_tol >= 0
                                                   and self.abs_tol >= 0)

    def _same(self, pred: str, gold: str) -> bool:
        if self._equal_is_same and pred == gold:
            return True
        if self.numeric:
            p, g = read_quantity(pred), read_quantity(gold)
            if p is not None and g is not None:
                if p.percent != g.percent:  # "3%" is neither 3 nor 0.03: a percentage is its own answer
                    return False
                if self.numeric_tolerance is not None and within_relative_error(p.value, g.value,
                                                                                self.numeric_tolerance):
                    return True
                return same_quantity(p, g, self.rel_tol, self.abs_tol)
        return pred == gold

    def _split(self, s: str) -> list[str]:
        parts = re.split("[" + re.escape(self.separators) + "]", s) if self.separators else [s]
        return [normalize_text(p, case=self.case) for p in parts if p.strip()]

    def _lists_match(self, pred: list[str], gold: list[str]) -> bool:
        if self.ordered:
            return len(pred) == len(gold) and all(self._same(p, g) for p, g in zip(pred, gold))
        pred, gold = list(dict.fromkeys(pred)), list(dict.fromkeys(gold))  # as sets: duplicates don't count
        if len(pred) != len(gold):
            return False
        unused = list(pred)
        for g in gold:  # each reference element needs its own matching predicted element
            hit = next((p for p in unused if self._same(p, g)), None)
            if hit is None:
                return False
            unused.remove(hit)
        return True

    def score(self, item: JudgeInput) -> Score:
        return self.score_columns([item.target], [item.prediction]).row(0)

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        cols = self.score_columns([i.target for i in items], [i.prediction for i in items])
        return [cols.row(k) for k in range(len(cols))]

    def score_columns(self, targets: list[str | None], predictions: list[str | None]) -> ScoreColumns:
        normalized: dict[str, str] = {}  # the batch's texts, each normalized once: answers and references repeat
        rows = [self._verdict(pred, gold, normalized) for gold, pred in zip(targets, predictions)]
        if not rows:
            return ScoreColumns.of([])
        return ScoreColumns(*map(list, zip(*rows)), details=[None] * len(rows))

    def _verdict(self, pred: str | None, gold: str | None, normalized: dict[str, str]) -> tuple:
        """One sample's (value, correct, status, reason, normalized_prediction, normalized_target)."""
        if gold is None:
            return None, None, "unscored", "no ground truth", None, None
        if self.as_list:
            pred_l, gold_l = self._split(pred or ""), self._split(gold)
            ok = self._lists_match(pred_l, gold_l)
            norm_pred, norm_gold = " | ".join(pred_l), " | ".join(gold_l)
        else:
            norm_pred, norm_gold = self._normalized(pred or "", normalized), self._normalized(gold, normalized)
            ok = self._same(norm_pred, norm_gold)
        return float(ok), ok, "scored", "equal" if ok else "different", norm_pred, norm_gold

    def _normalized(self, text: str, normalized: dict[str, str]) -> str:
        out = normalized.get(text)
        if out is None:
            out = normalized[text] = normalize_text(text, case=self.case)
        return out
