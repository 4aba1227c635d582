"""The opt-in lenient number rules of the `gaia` metric (settings `numeric_tolerance` and `fractions`).

The official GAIA scorer (evalpipe/benchmarks/gaia_scorer.py) compares numbers with `==` after removing `$`, `%`
and `,`, and reads a fraction such as `3/4` as a string. The GAIA lab document (design_refs 003) describes a
variant: numbers equal within 1e-3, fractions read as numbers. These rules are that variant, used only where a
config asks for them, so leaderboard numbers keep the official semantics by default.

- `numeric_tolerance: t` (t >= 0): two numbers are equal when `|prediction - ground_truth| <= t` (absolute, as
  the document's "tolerance 1e-3"), or when they are exactly equal (so `inf` still matches `inf`).
- `fractions: true`: `a/b` (an optional sign, whole numbers, spaces around the slash allowed, b != 0) is the number
  a / b on either side; a ground truth `3/4` then takes the number branch instead of the string branch. Mixed
  numbers (`1 1/2`) are not read.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from evalpipe.core.errors import ConfigError

_FRACTION = re.compile(r"^\s*([+-]?\d+)\s*/\s*(\d+)\s*$")


def parse_fraction(text: str) -> float | None:
    """`a/b` as the float a / b; None for anything else (and for a zero denominator)."""
    m = _FRACTION.match(text)
    if not m or int(m.group(2)) == 0:
        return None
    return int(m.group(1)) / int(m.group(2))


@dataclass(frozen=True)
class NumberRules:
    """How the `gaia` metric compares numbers. The default is the official scorer's: exact, no fractions."""

    tolerance: float = 0.0
    fractions: bool = False

    @property
    def official(self) -> bool:
        return self.tolerance == 0.0 and not self.fractions

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> "NumberRules":
        tol = settings.get("numeric_tolerance", 0.0)
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol < 0:
            raise ConfigError(f"gaia: numeric_tolerance must be a number >= 0 (e.g. 0.001), not {tol!r}")
        fractions = settings.get("fractions", False)
        if not isinstance(fractions, bool):
            raise ConfigError(f"gaia: fractions must be true or false, not {fractions!r}")
        return cls(float(tol), fractions)

    def ground_truth_number(self, text: str) -> float | None:
        """The ground truth as a number when the number branch applies (float() parses it, or, with `fractions`, it
        is a fraction); None: not a number."""
        try:
            return float(text)
        except ValueError:
            return parse_fraction(text) if self.fractions else None

    def prediction_number(self, text: str, official: float) -> float:
        """The prediction's number: the official reading (`official`, inf when it failed), else its fraction."""
        if math.isinf(official) and self.fractions:
            got = parse_fraction(text.replace("$", "").replace("%", "").replace(",", ""))
            if got is not None:
                return got
        return official

    def equal(self, prediction: float, ground_truth: float) -> bool:
        return prediction == ground_truth or abs(prediction - ground_truth) <= self.tolerance
