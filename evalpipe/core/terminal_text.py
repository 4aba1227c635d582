"""Model text made safe for a terminal: control characters shown, never obeyed.

Model output is untrusted. Printed as it is, an ANSI/OSC escape sequence in it can recolour or clear the screen,
rewrite the window title, hide text, plant a clickable link, or (\\r) print over a verdict already on screen. Every
C0 and C1 control character except newline and tab, DEL, and the Unicode bidirectional overrides (which reorder
what is shown) is printed as its escape (`\\x1b`, `\\u202e`): nothing is lost and nothing is executed.
"""
from __future__ import annotations

import re

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal_safe(text: str) -> str:
    """`text` with its control characters (all but \\n and \\t) and bidi overrides written as escapes."""
    return _CONTROLS.sub(_escape, text) if isinstance(text, str) else text
