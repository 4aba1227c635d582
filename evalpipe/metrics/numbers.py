"""Reading numbers out of answers, shared by the rule-based metrics."""
from __future__ import annotations

import math
import re

# "1,234.5", "-3", ".5", "1e-3", "$12", "45%": thousands separators only in groups of three, so "1,2" (a list)
# is not read as 12.
_NUMBER = re.compile(r"^[+-]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?%?$")
_DIGIT = re.compile(r"\d")  # (compiled once: `re.search` looks its pattern up on every call)


def parse_number(text: object) -> float | None:
    """The number a short answer states, or None. Currency signs, percent signs and thousands separators
    are dropped ("45%" reads as 45, like "45")."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text) if math.isfinite(float(text)) else None
    s = str(text).strip().replace(" ", "")
    if not s or not _NUMBER.match(s) or not _DIGIT.search(s):
        return None
    try:
        value = float(s.replace("$", "").replace("%", "").replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def numbers_close(a: float, b: float, rel_tol: float = 0.0, abs_tol: float = 0.0) -> bool:
    """|a - b| <= max(rel_tol * |b|, abs_tol): relative to the reference `b` (not symmetric like math.isclose),
    so "within 1% of the right answer" means what it says."""
    return abs(a - b) <= max(rel_tol * abs(b), abs_tol)
