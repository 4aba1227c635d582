"""The domain toolkits' common part: a domain database held as plain JSON data, the tools as methods, and the way
a call is answered (docs/benchmarks.md, tau2-bench).

A toolkit instance owns one copy of its database: a conversation gets a fresh copy (per sample and per trial), the
evaluator builds two more (the conversation's calls replayed, and the task's expected actions replayed). A tool
that refuses raises `ValueError`; the model is shown `Error: <message>`, as the official environment shows it.
Results are shown as JSON text (strings as they are). The database hash is a SHA-256 of its canonical JSON.
"""
from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Callable


def tool(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method as a tool of kind `read`, `write` or `generic` (the official tool types)."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__tau2_tool__ = kind  # type: ignore[attr-defined]
        return fn
    return mark


class Toolkit:
    """Tools over one database. Subclasses define tool methods (marked with `@tool`)."""

    domain = "base"

    def __init__(self, db: dict[str, Any]):
        self.db = copy.deepcopy(db)

    @classmethod
    def tool_names(cls) -> list[str]:
        return sorted(n for n in dir(cls) if getattr(getattr(cls, n), "__tau2_tool__", None))

    @classmethod
    def tool_kind(cls, name: str) -> str | None:
        return getattr(getattr(cls, name, None), "__tau2_tool__", None)

    @classmethod
    def schemas(cls) -> list[dict[str, Any]]:
        from evalpipe.tools.schema import function_schema

        return [function_schema(getattr(cls, n), name=n) for n in cls.tool_names()]

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(content shown to the caller, error?) for one call; never raises for the tool's own refusals."""
        if not self.tool_kind(name):
            return f"Error: Tool '{name}' not found.", True
        try:
            result = getattr(self, name)(**arguments)
        except Exception as exc:  # (the official environment answers any exception of a tool this way)
            return f"Error: {exc}", True
        return (result if isinstance(result, str) else json.dumps(result, default=str)), False

    def db_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.db, sort_keys=True, default=str).encode("utf-8")).hexdigest()


class Calculator:
    """The `calculate` tool, as the airline and retail domains both offer it (mixed into their toolkits)."""

    @tool("generic")
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return the result rounded to 2 decimals.

        Args:
            expression: Digits, + - * /, parentheses, dots and spaces only, e.g. '2 + 2'.
        """
        if not all(ch in "0123456789+-*/(). " for ch in expression):
            raise ValueError("Invalid characters in expression")
        return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))  # noqa: S307 (digits/operators only)
