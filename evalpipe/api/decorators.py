"""`@evalpipe.agent`, `@evalpipe.metric`, `@evalpipe.tool`: plain typed functions (sync or async) marked as what
they are, in the spirit of Inspect AI's `@solver`/`@scorer`/`@tool`.

    @evalpipe.agent
    def shout(sample) -> str:                      # sample: .question, .messages, .metadata, .call_tool(...)
                                                   # (or `await sample.acall_tool(...)` in an async agent)
        return sample.question.upper()

    @evalpipe.metric(higher_is_better=True)
    def same(prediction: str, target: str) -> bool:
        return prediction.strip() == target.strip()

    @evalpipe.tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.\"\"\"
        return a + b

The decorated function still calls as before; the decorator records its name and settings. A plain undecorated
function works too wherever `evaluate` takes an agent or a metric: the decorator only names it or sets options.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from evalpipe.core.callables import callable_fingerprint, callable_name


class _Marked:
    """A function with a role: calls through to it, and tells its name and source fingerprint."""

    def __init__(self, fn: Callable[..., Any], name: str | None):
        if not callable(fn):
            raise TypeError(f"{type(self).__name__.lower()} decorator needs a function, got {type(fn).__name__}")
        self.fn, self.name = fn, name or callable_name(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def fingerprint(self) -> str:
        """The function's source fingerprint now (evalpipe/core/callables.py): re-read on every access."""
        return callable_fingerprint(self.fn)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class AgentFunction(_Marked):
    """What `@evalpipe.agent` returns."""


class MetricFunction(_Marked):
    """What `@evalpipe.metric` returns."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, higher_is_better: bool | None = True,
                 requires_target: bool = True):
        super().__init__(fn, name)
        self.higher_is_better, self.requires_target = higher_is_better, requires_target


class ToolFunction(_Marked):
    """What `@evalpipe.tool` returns: the function and its OpenAI function-tool schema (from its type hints and
    docstring, evalpipe/tools/schema.py)."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                 timeout_s: float | None = None):
        super().__init__(fn, name)
        self.description, self.timeout_s = description, timeout_s
        self.schema = self.tool().schema()  # built now: a missing docstring is an error at decoration

    def tool(self) -> Any:
        """The `Tool` the tool layer calls (evalpipe/tools/live.py)."""
        from evalpipe.tools.live import function_tool

        return function_tool(self.fn, self.name, self.description, timeout_s=self.timeout_s)


def _decorator(make: Callable[..., _Marked], fn: Callable[..., Any] | None, **settings: Any) -> Any:
    if fn is not None:
        return make(fn, **settings)
    return lambda f: make(f, **settings)


def agent(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark a function as an agent: it gets a sample (an `AgentTask`; the question text when its parameter is
    annotated `str`) and returns the prediction (text, or a dict with `text` and `usage`). `@agent` or
    `@agent(name=...)` (the model key its results are stored under; default: the function's name)."""
    return _decorator(AgentFunction, fn, name=name)


def metric(fn: Callable[..., Any] | None = None, *, name: str | None = None, higher_is_better: bool | None = True,
           requires_target: bool = True) -> Any:
    """Mark a function as a metric: it gets `(prediction, target, sample)` (or fewer) and returns a bool, a number,
    a `Score` or None. `name`: its row in the metrics table (default: the function's name); `higher_is_better`:
    how the leaderboard ranks it; `requires_target=False` to score samples without ground truth too."""
    return _decorator(MetricFunction, fn, name=name, higher_is_better=higher_is_better,
                      requires_target=requires_target)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         timeout_s: float | None = None) -> Any:
    """Mark a function as a tool the agent may call (`sample.call_tool(name, args)`, or a model's tool calls):
    its schema comes from its type hints and docstring. Give the tools to `evaluate(..., tools=[...])`."""
    return _decorator(ToolFunction, fn, name=name, description=description, timeout_s=timeout_s)
