"""Lenient scorers, beside a benchmark's official metric: they ask "is the right answer in the reply?" rather
than "did the model give the answer in the required format?". A gap between the two says the model knows
answers but does not follow the answer format.

- `includes`: the target appears in the reply (Inspect AI's `includes()`: case-insensitive substring);
  settings `ignore_case` (true), `whole_word` (false: a target "3" is then not found inside "2023"),
  `field` (`raw_output`, the whole reply, default; or `prediction`, the extracted answer).
- `choice`: a multiple-choice answer. The letter is read from "ANSWER: B", "the answer is (B)", "(B)",
  "B." / "B)" at the start of the reply, or a lone letter; failing those, the option whose text the reply
  states. The target may be the letter or the option text (`choices` of the sample map one to the other).
- `regex`: extract with `pattern` (`group`, default 1 or the whole match; `which`: `last` (default) or
  `first` match), then compare like `exact_match` (case-insensitive, numbers as numbers).
- `last_number`: the last number in the reply (lm-evaluation-harness' "flexible extract" for GSM8K-style
  targets: thousands separators, `$` and `%` dropped), compared as a number (`rel_tol`, `abs_tol`).

Every lenient metric sets `lenient = True`: `evalpipe run` shows it beside the official one.
"""
from __future__ import annotations

import re
import string

from evalpipe.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.exact_match import normalize_text
from evalpipe.metrics.numbers import numbers_close, parse_number
from evalpipe.types import Score

_WS = re.compile(r"\s+")
_FIELDS = ("raw_output", "prediction")


def _check(name: str, settings: dict, known: set[str]) -> None:
    unknown = set(settings) - known
    if unknown:
        raise ConfigError(f"{name}: unknown setting(s) {sorted(unknown)}; known: {sorted(known)}")


def _text(item: JudgeInput, field: str) -> str:
    if field == "prediction":
        return item.prediction or ""
    return item.raw_output if item.raw_output is not None else (item.prediction or "")


class LenientMetric(Metric):
    lenient = True
    inputs = frozenset({"input", "target", "prediction", "raw_output", "choices"})  # no stored JSON to decode


@register_metric("includes")
class Includes(LenientMetric):
    """The normalized target appears in the reply (lenient; settings ignore_case, whole_word, field)."""

    name = "includes"
    option_schema = {"ignore_case", "whole_word", "field"}  # issue 20: checked with the config

    def __init__(self, **settings):
        _check(self.name, settings, {"ignore_case", "whole_word", "field"})
        super().__init__(**settings)
        self.ignore_case = bool(settings.get("ignore_case", True))
        self.whole_word = bool(settings.get("whole_word", False))
        self.field = str(settings.get("field", "raw_output"))
        if self.field not in _FIELDS:
            raise ConfigError(f"includes: field must be one of {list(_FIELDS)}, got {self.field!r}")

    def _norm(self, s: str) -> str:
        s = _WS.sub(" ", s).strip()
        return s.lower() if self.ignore_case else s

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        text = self._norm(_text(item, self.field))
        gold = self._norm(item.target).strip(string.punctuation + " ") or self._norm(item.target)
        if not gold:
            return Score(value=0.0, correct=False, reason="empty target", normalized_target=gold)
        if self.whole_word:
            found = re.search(r"(?<!\w)" + re.escape(gold) + r"(?!\w)", text) is not None
        else:
            found = gold in text
        return Score(value=float(found), correct=found,
                     reason="target found in the reply" if found else "target not in the reply",
                     normalized_prediction=text[:500], normalized_target=gold)


_LETTER_PATTERNS = [
    re.compile(r"answer\s*(?:is|:)?\s*[:\-]?\s*\(?\**([A-Z])\b\)?", re.IGNORECASE),
    re.compile(r"\(([A-Z])\)"),
    re.compile(r"^\s*\**([A-Z])[.):]"),
    re.compile(r"^\s*\**([A-Z])\**\s*$"),
]


_OPTION_LINE = re.compile(r"^\s*([A-Z])[.)]\s+(.+?)\s*$", re.MULTILINE)


@register_metric("choice")
class Choice(LenientMetric):
    """Multiple choice: the letter (or option text) read from the reply equals the target (lenient)."""

    name = "choice"
    option_schema = {"field"}  # issue 20: checked with the config

    def __init__(self, **settings):
        _check(self.name, settings, {"field"})
        super().__init__(**settings)
        self.field = str(settings.get("field", "raw_output"))
        if self.field not in _FIELDS:
            raise ConfigError(f"choice: field must be one of {list(_FIELDS)}, got {self.field!r}")

    @staticmethod
    def _letters(n: int) -> list[str]:
        return list(string.ascii_uppercase[:n])

    def extract(self, text: str, choices: list[str] | None) -> str | None:
        letters = self._letters(len(choices)) if choices else list(string.ascii_uppercase)
        for pat in _LETTER_PATTERNS:
            hits = [m.group(1).upper() for m in pat.finditer(text)]
            hits = [h for h in hits if h in letters]
            if hits:
                return hits[-1]
        if choices:  # the option text itself, the longest one stated (so "New York" beats "York")
            low = normalize_text(text)
            found = [(len(c), letters[i]) for i, c in enumerate(choices)
                     if normalize_text(str(c)) and re.search(r"(?<!\w)" + re.escape(normalize_text(str(c))) + r"(?!\w)", low)]
            if found:
                return max(found)[1]
        return None

    def _target_letter(self, target: str, choices: list[str] | None) -> str:
        t = target.strip()
        if len(t) == 1 and t.upper() in string.ascii_uppercase:
            return t.upper()
        if choices:
            for i, c in enumerate(choices):
                if normalize_text(str(c)) == normalize_text(t):
                    return self._letters(len(choices))[i]
        return normalize_text(t)

    @staticmethod
    def options_from_prompt(text: str | None) -> list[str] | None:
        """The options as the file adapter writes them into the prompt ("A. Paris" lines, A, B, C... in order),
        for samples whose `choices` did not reach the judge."""
        found = _OPTION_LINE.findall(text or "")
        letters = [f[0] for f in found]
        if len(found) >= 2 and letters == list(string.ascii_uppercase[:len(found)]):
            return [f[1].strip() for f in found]
        return None

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        choices = item.choices or self.options_from_prompt(item.input)
        gold = self._target_letter(item.target, choices)
        got = self.extract(_text(item, self.field), choices)
        ok = got is not None and got == gold
        reason = "no choice found in the reply" if got is None else ("same choice" if ok else "different choice")
        return Score(value=float(ok), correct=ok, reason=reason, normalized_prediction=got, normalized_target=gold)


@register_metric("regex")
class RegexMatch(LenientMetric):
    """Extract the answer with a regex (`pattern`, `group`, `which`), then compare like exact_match."""

    name = "regex"
    option_schema = {"pattern", "group", "which", "ignore_case", "field", "rel_tol", "abs_tol"}  # issue 20

    def __init__(self, **settings):
        _check(self.name, settings, {"pattern", "group", "which", "ignore_case", "field", "rel_tol", "abs_tol"})
        super().__init__(**settings)
        if not settings.get("pattern"):
            raise ConfigError("regex: needs a 'pattern', e.g. {name: regex, pattern: 'answer is (\\S+)'}")
        flags = re.IGNORECASE if settings.get("ignore_case", True) else 0
        try:
            self.pattern = re.compile(str(settings["pattern"]), flags)
        except re.error as exc:
            raise ConfigError(f"regex: pattern {settings['pattern']!r} does not compile: {exc}") from None
        self.group = settings.get("group", 1 if self.pattern.groups else 0)
        self.which = str(settings.get("which", "last"))
        if self.which not in ("first", "last"):
            raise ConfigError(f"regex: which must be 'first' or 'last', got {self.which!r}")
        self.field = str(settings.get("field", "raw_output"))
        self.rel_tol, self.abs_tol = float(settings.get("rel_tol", 0.0)), float(settings.get("abs_tol", 0.0))

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        matches = list(self.pattern.finditer(_text(item, self.field)))
        gold = normalize_text(item.target)
        if not matches:
            return Score(value=0.0, correct=False, reason="pattern not found", normalized_target=gold)
        m = matches[-1] if self.which == "last" else matches[0]
        try:
            got = normalize_text(m.group(self.group) or "")
        except IndexError:
            raise ConfigError(f"regex: the pattern has no group {self.group!r}") from None
        p, g = parse_number(got), parse_number(gold)
        ok = numbers_close(p, g, self.rel_tol, self.abs_tol) if p is not None and g is not None else got == gold
        return Score(value=float(ok), correct=ok, reason="equal" if ok else "different",
                     normalized_prediction=got, normalized_target=gold)


_ANY_NUMBER = re.compile(r"-?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?|-?\$?\.\d+%?")


def last_number(text: str | None) -> str | None:
    """The last number written in `text` ("... so she pays $1,234.50." -> "1234.50"), or None."""
    hits = _ANY_NUMBER.findall(text or "")
    if not hits:
        return None
    return hits[-1].replace("$", "").replace(",", "").replace("%", "")


@register_metric("last_number")
class LastNumber(LenientMetric):
    """The last number in the reply equals the numeric target (lenient; rel_tol, abs_tol, field)."""

    name = "last_number"
    option_schema = {"rel_tol", "abs_tol", "field"}  # issue 20: checked with the config

    def __init__(self, **settings):
        _check(self.name, settings, {"rel_tol", "abs_tol", "field"})
        super().__init__(**settings)
        self.rel_tol, self.abs_tol = float(settings.get("rel_tol", 0.0)), float(settings.get("abs_tol", 0.0))
        self.field = str(settings.get("field", "raw_output"))

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        gold = parse_number(item.target.strip())
        if gold is None:
            return Score(value=0.0, correct=False, reason="target is not a number", normalized_target=item.target)
        got = last_number(_text(item, self.field))
        if got is None:
            return Score(value=0.0, correct=False, reason="no number in the reply", normalized_target=str(gold))
        ok = numbers_close(float(got), gold, self.rel_tol, self.abs_tol)
        return Score(value=float(ok), correct=ok, reason="equal" if ok else "different",
                     normalized_prediction=got, normalized_target=str(gold))


def is_lenient(metric_name: str) -> bool:
    """Whether a registered metric is a lenient one (False for unknown names)."""
    from evalpipe.metrics.base import get_metric

    try:
        return bool(getattr(get_metric(metric_name), "lenient", False))
    except Exception:
        return False
