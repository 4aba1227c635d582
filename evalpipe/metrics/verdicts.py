"""Reading a judge model's reply: a JSON object, or `VERDICT: ...` style lines, or a bare verdict word.

Nothing is guessed: a reply that holds no recognisable verdict gives `None`, which the metric records as a
`parse_error` (it is never turned into "correct" or "incorrect" by a heuristic).
"""
from __future__ import annotations

import json
import re
from typing import Any

POSITIVE = {"correct", "true", "yes", "pass", "passed", "right", "1", "1.0"}
NEGATIVE = {"incorrect", "false", "no", "fail", "failed", "wrong", "0", "0.0"}
VERDICT_KEYS = ("verdict", "correct", "is_correct", "answer", "grade", "result", "label", "score", "match")
RATIONALE_KEYS = ("rationale", "reason", "reasoning", "explanation", "justification")

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_LINE = re.compile(r"^[\s*#>_-]*(?:final\s+)?(verdict|answer|grade|result|correct)\s*[:=]\s*[*_\"'`]*\s*([A-Za-z0-9.]+)",
                   re.I | re.M)


def json_objects(text: str) -> list[dict[str, Any]]:
    """JSON objects found in a reply: the whole reply, fenced blocks, then `{...}` spans (outermost first)."""
    found: list[dict[str, Any]] = []
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    candidates += re.findall(r"\{[^{}]*\}", text)
    for c in candidates:
        try:
            obj = json.loads(c)
        except (ValueError, TypeError):
            continue
        if isinstance(obj, dict):
            found.append(obj)
    return found


def _word_value(word: Any, positive: set[str], negative: set[str]) -> float | None:
    if isinstance(word, bool):
        return float(word)
    if isinstance(word, (int, float)):
        return float(word) if 0.0 <= float(word) <= 1.0 else None
    if not isinstance(word, str):
        return None
    w = word.strip().strip(".!*`'\"()[]").lower()
    if w in positive:
        return 1.0
    if w in negative:
        return 0.0
    return None


def parse_verdict(text: str | None, positive: set[str] = POSITIVE,
                  negative: set[str] = NEGATIVE) -> tuple[float | None, str]:
    """(score in [0, 1] or None when there is no readable verdict, rationale)."""
    if not text or not text.strip():
        return None, ""
    for obj in json_objects(text):
        lowered = {str(k).lower(): v for k, v in obj.items()}
        rationale = next((str(lowered[k]) for k in RATIONALE_KEYS if k in lowered), "")
        for key in VERDICT_KEYS:
            if key in lowered:
                value = _word_value(lowered[key], positive, negative)
                if value is not None:
                    return value, rationale
    lines = _LINE.findall(text)
    if lines:  # the last one: judges often restate the task's format before giving their own verdict
        value = _word_value(lines[-1][1], positive, negative)
        if value is not None:
            return value, text.strip()
    value = _word_value(text.strip().splitlines()[-1], positive, negative) if text.strip() else None
    if value is None:
        value = _word_value(text.strip().splitlines()[0], positive, negative)
    return value, text.strip() if value is not None else ""
