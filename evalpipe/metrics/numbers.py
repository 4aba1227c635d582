"""Reading numbers out of answers, shared by the rule-based metrics.

A sign (`-`, `+`, the unicode minus U+2212), a decimal point, an exponent and a percent sign are part of the number
they are written with (docs/metrics.md, "Normalizer rules"): `-3` is never 3, `3%` is never the plain number 3,
`1e3` and `1 × 10^3` are 1000. Currency signs and thousands separators (`,` or a space, in groups of three) are dropped.
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

# The unicode minus and the two minus-like compatibility forms that NFKC maps to "-" (small and fullwidth
# hyphen-minus): each is a minus sign, never punctuation to drop.
MINUS_SIGNS = "\u2212\ufe63\uff0d"
_ASCII_MINUS = str.maketrans({c: "-" for c in MINUS_SIGNS})


def ascii_minus(text: str) -> str:
    """`text` with every minus-sign character written as "-" (same length: positions stay valid)."""
    return text.translate(_ASCII_MINUS)


# An exponent: "e3", "E-3", or a power of ten written out ("× 10^3", "x10^-3", "*10**3", "·10^{3}").
_EXP = r"(?P<exp>[eE][+-]?\d+|\ ?[×xX*·]\ ?10\ ?(?:\^|\*\*)\ ?\{?(?P<pow>[+-]?\d+)\}?)"

# One sign (before or after a `$`, not both), digits (thousands separators "," or " " only in groups of three, one
# kind per number: "1,2" is a list, not 12; "1 2" is two numbers), an optional decimal point (a bare "5." is 5,
# ".5" is 0.5), an optional exponent, an optional percent sign.
_QUANTITY = re.compile(
    r"(?P<s1>[+-]?)(?:\$ ?(?P<s2>[+-]?))?"
    r"(?P<int>\d{1,3}(?P<sep>[, ])\d{3}(?:(?P=sep)\d{3})*|\d+)?(?P<frac>\.\d*)?"
    r"" + _EXP + r"?(?P<pct> ?%)?")
_DIGIT = re.compile(r"\d")  # (compiled once: `re.search` looks its pattern up on every call)


class Quantity(NamedTuple):
    value: float
    percent: bool  # written with a percent sign: "45%" is (45.0, True), a different answer from 45 and from 0.45


def _exponent(m: re.Match) -> str:
    if m["pow"] is not None:
        return "e" + m["pow"]
    return m["exp"] or ""


def _quantity(m: re.Match) -> Quantity | None:
    if m["s1"] and m["s2"]:  # "-$-3": two signs, not a number
        return None
    digits = (m["int"] or "") + (m["frac"] or "")
    if not _DIGIT.search(digits):
        return None
    integer = (m["int"] or "").replace(m["sep"], "") if m["sep"] else (m["int"] or "")
    try:
        value = float((m["s1"] or m["s2"] or "") + integer + (m["frac"] or "") + _exponent(m))
    except ValueError:
        return None
    return Quantity(value, bool(m["pct"])) if math.isfinite(value) else None


def read_quantity(text: object) -> Quantity | None:
    """The number a short answer states, with whether it is a percentage, or None ("-$1,234.5" -> (-1234.5, False),
    "45 %" -> (45.0, True); "1,2", "- 3", "inf", "3 apples" -> None)."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return Quantity(float(text), False) if math.isfinite(float(text)) else None
    s = " ".join(ascii_minus(str(text)).split())  # any whitespace run (a no-break space too) is one space
    m = _QUANTITY.fullmatch(s)
    return _quantity(m) if m else None


def parse_number(text: object) -> float | None:
    """The plain number a short answer states, or None. A currency sign and thousands separators are dropped; a
    sign, a decimal point and an exponent are kept. A percentage is not a plain number: "45%" is None (see
    `read_quantity`)."""
    q = read_quantity(text)
    return q.value if q is not None and not q.percent else None


# Numbers inside a reply: not the tail of a word or of another number ("H2O", "3.14.15"). A sign is a "-" or "+"
# not glued to a letter or digit on its left ("x = -3", "...-3", "(-3)"); a dash glued to a digit is a range or a
# subtraction ("2020-2021", "5-3": 2021 and 3); after a letter it is a hyphen or a sign ("COVID-19", "is-3"), so
# that number is not read at all (find_quantities), as Inspect does not read such a token.
_IN_TEXT = re.compile(
    r"(?:(?<![^\W_])(?P<s1>[+-])|(?<![\w.]))(?:\$ ?(?P<s2>[+-]?))?"
    r"(?P<int>\d{1,3}(?P<sep>,)\d{3}(?:,\d{3})*(?![\d])|\d+)?(?P<frac>\.\d+)?(?<=\d)"
    r"(?:" + _EXP + r"(?!\w))?(?P<pct> ?%)?")


def find_quantities(text: str | None) -> list[tuple[Quantity, str]]:
    """Every number written in `text`, in order, with its normalized text ("-$1,234.50" -> "-1234.50",
    "45 %" -> "45%")."""
    out = []
    text = ascii_minus(text or "")
    for m in _IN_TEXT.finditer(text):
        start = m.start()
        if not m["s1"] and start >= 2 and text[start - 1] in "+-" and text[start - 2].isalpha():
            continue  # "COVID-19", "is-3": a hyphen or a sign, undecidable
        q = _quantity(m)
        if q is not None:
            sign = m["s1"] or m["s2"] or ""
            out.append((q, sign + (m["int"] or "").replace(",", "") + (m["frac"] or "") + _exponent(m)
                        + ("%" if q.percent else "")))
    return out


def same_quantity(a: Quantity, b: Quantity, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """Equal within the tolerance (relative to the reference `b`) and both percentages or both plain numbers."""
    return a.percent == b.percent and numbers_close(a.value, b.value, rel_tol, abs_tol)


def numbers_close(a: float, b: float, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """|a - b| <= max(rel_tol * |b|, abs_tol): relative to the reference `b` (not symmetric like math.isclose),
    so "within 1% of the right answer" means what it says."""
    return abs(a - b) <= max(rel_tol * abs(b), abs_tol)
