"""Lenient scorers, beside a benchmark's official metric: they ask "is the right answer in the reply?" rather
than "did the model give the answer in the required format?". A gap between the two says the model knows
answers but does not follow the answer format.

- `includes`: the target appears in the reply (Inspect AI's `includes()`: case-insensitive substring; a number
  target is found as a number, as Inspect's `match(location="any", numeric=True)`: "3" is not in "-3" or "2023");
  settings `ignore_case` (true), `whole_word` (false: with true, a text target is not found glued to a word),
  `field` (`raw_output`, the whole reply, default; or `prediction`, the extracted answer).
- `choice`: a multiple-choice answer. The letter is read from "ANSWER: B", "the answer is (B)", "(B)",
  "B." / "B)" at the start of the reply, or a lone letter; failing those, the option whose text the reply
  states. The target may be the letter or the option text (`choices` of the sample map one to the other).
- `regex`: extract with `pattern` (`group`, default 1 or the whole match; `which`: `last` (default) or
  `first` match), then compare like `exact_match` (case-insensitive, numbers as numbers).
- `last_number`: the last number in the reply (lm-evaluation-harness' "flexible extract" for GSM8K-style
  targets: thousands separators and `$` dropped; sign, exponent and `%` kept), compared as a number (`rel_tol`,
  `abs_tol`; a percentage only equals a percentage).

Every lenient metric sets `lenient = True`: `evalpipe run` shows it beside the official one.
"""
from __future__ import annotations

import re
import string

from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import ChoiceSettings, IncludesSettings, LastNumberSettings, RegexSettings
from evalpipe.metrics.exact_match import normalize_text, strip_outer_punctuation
from evalpipe.metrics.numbers import ascii_minus, find_quantities, read_quantity, same_quantity
from evalpipe.core.types import Score

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
    option_schema = IncludesSettings  # typed and ranged (metrics/settings.py), checked before any model call

    def __init__(self, **settings):
        _check(self.name, settings, {"ignore_case", "whole_word", "field"})
        super().__init__(**settings)
        self.ignore_case = bool(settings.get("ignore_case", True))
        self.whole_word = bool(settings.get("whole_word", False))
        self.field = str(settings.get("field", "raw_output"))
        if self.field not in _FIELDS:
            raise ConfigError(f"includes: field must be one of {list(_FIELDS)}, got {self.field!r}")

    def _norm(self, s: str) -> str:
        s = ascii_minus(_WS.sub(" ", s).strip())
        return s.lower() if self.ignore_case else s

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        text = self._norm(_text(item, self.field))
        gold = strip_outer_punctuation(self._norm(item.target)) or self._norm(item.target)
        if not gold:
            return Score(value=0.0, correct=False, reason="empty target", normalized_target=gold)
        number = read_quantity(gold)
        if number is not None:  # a number target: some number of the reply is that number (sign, %, exponent)
            found = any(same_quantity(q, number) for q, _ in find_quantities(text))
        else:
            found = contains(text, gold, whole_word=self.whole_word)
        return Score(value=float(found), correct=found,
                     reason="target found in the reply" if found else "target not in the reply",
                     normalized_prediction=text[:500], normalized_target=gold)


def contains(text: str, needle: str, *, whole_word: bool = False) -> bool:
    """`needle` occurs in `text`, never as a piece of a longer number: where the needle begins with a digit (or a
    sign or point before one) it is not preceded by a digit, a point or a minus ("3" is not in "2023", "3.3" or
    "-3"), and where it ends with a digit it is not followed by more of a number (a digit, ".5", ",000", "%", an
    exponent). `whole_word`: not glued to a letter or digit on either side either."""
    for m in re.finditer("(?=" + re.escape(needle) + ")", text):  # overlapping occurrences too
        end = m.start() + len(needle)
        before, after = text[max(0, m.start() - 3):m.start()], text[end:end + 6]  # the checks need a few chars
        if whole_word and (re.search(r"\w$", before) or re.match(r"\w", after)):
            continue
        if re.match(r"[+-]?\.?\d", needle) and re.search(r"(?:[\d.-]|\d,|-\$ ?)$", before):
            continue
        if needle[-1].isdigit() and re.match(r"\d|\.\d|,\d{3}(?!\d)| ?%|[eE][+-]?\d", after):
            continue
        return True
    return False


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
    option_schema = ChoiceSettings

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
        if choices:  # the option text itself, the longest one stated (so "New York" beats "York"; "-3" is not "3")
            low = normalize_text(text)
            numbers = [q for q, _ in find_quantities(low)]
            found = [(len(c), letters[i]) for i, c in enumerate(choices) if self._stated(str(c), low, numbers)]
            if found:
                return max(found)[1]
        return None

    @staticmethod
    def _stated(option: str, low: str, numbers: list) -> bool:
        """The reply states the option: a number option as one of the reply's numbers (sign, %, exponent), any
        other as text."""
        opt = normalize_text(option)
        if not opt:
            return False
        q = read_quantity(opt)
        if q is not None:
            return any(same_quantity(n, q) for n in numbers)
        return contains(low, opt, whole_word=True)

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
    option_schema = RegexSettings

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
        p, g = read_quantity(got), read_quantity(gold)
        ok = same_quantity(p, g, self.rel_tol, self.abs_tol) if p is not None and g is not None else got == gold
        return Score(value=float(ok), correct=ok, reason="equal" if ok else "different",
                     normalized_prediction=got, normalized_target=gold)


def last_number(text: str | None) -> str | None:
    """The last number written in `text`, sign, exponent and percent sign kept, currency sign and thousands
    separators dropped ("... so she pays $1,234.50." -> "1234.50", "−3" -> "-3", "45%" -> "45%"), or None."""
    found = find_quantities(text)
    return found[-1][1] if found else None


@register_metric("last_number")
class LastNumber(LenientMetric):
    """The last number in the reply equals the numeric target (lenient; rel_tol, abs_tol, field)."""

    name = "last_number"
    option_schema = LastNumberSettings

    def __init__(self, **settings):
        _check(self.name, settings, {"rel_tol", "abs_tol", "field"})
        super().__init__(**settings)
        self.rel_tol, self.abs_tol = float(settings.get("rel_tol", 0.0)), float(settings.get("abs_tol", 0.0))
        self.field = str(settings.get("field", "raw_output"))

    def score(self, item: JudgeInput) -> Score:
        if item.target is None:
            return Score.unscored()
        gold = read_quantity(strip_outer_punctuation(ascii_minus(item.target.strip())))
        if gold is None:
            return Score(value=0.0, correct=False, reason="target is not a number", normalized_target=item.target)
        shown_gold = repr(gold.value) + ("%" if gold.percent else "")
        found = find_quantities(_text(item, self.field))
        if not found:
            return Score(value=0.0, correct=False, reason="no number in the reply", normalized_target=shown_gold)
        got, got_text = found[-1]
        ok = same_quantity(got, gold, self.rel_tol, self.abs_tol)
        return Score(value=float(ok), correct=ok, reason="equal" if ok else "different",
                     normalized_prediction=got_text, normalized_target=shown_gold)


def is_lenient(metric_name: str) -> bool:
    """Whether a registered metric is a lenient one (False for unknown names)."""
    from evalpipe.metrics.base import get_metric

    try:
        return bool(getattr(get_metric(metric_name), "lenient", False))
    except Exception:
        return False
