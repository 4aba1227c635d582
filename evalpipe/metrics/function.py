"""A metric given as a Python function (`evalpipe.evaluate(metrics=[fn])`, `@evalpipe.metric`).

The function (sync or async) gets `(prediction, target, sample)` (fewer when it takes fewer: `(prediction,
target)` or `(prediction,)`; `sample` is the `JudgeInput`: input, metadata, raw_output, tool calls) and returns
a bool (correct or not), a number (the score), a `Score`, or None (unscored). An exception is that sample's error
verdict, not the run's.

It is registered in this process's metric registry under its name; the config entry carries its source
fingerprint as the setting `source` (evalpipe/core/callables.py), which is part of each judgement's fingerprint
and of the `judgements` asset's code version: an edited metric judges again and shows its partitions stale.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

from evalpipe.core.callables import callable_fingerprint, callable_name
from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, get_metric, register_metric


class FunctionMetric(Metric):
    """Base of the metric class made for each function (`register_function_metric`)."""

    fn: Callable[..., Any] | None = None
    arity = 3
    is_async = False
    option_schema = {"source"}  # the function's fingerprint; nothing else is configurable

    def _args(self, item: JudgeInput) -> tuple[Any, ...]:
        return (item.prediction, item.target, item)[: self.arity]

    def _verdict(self, value: Any) -> Score:
        if isinstance(value, Score):
            return value
        if value is None:
            return Score.unscored("the metric returned None")
        if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy's bool too
            return Score(value=1.0 if value else 0.0, correct=bool(value))
        if isinstance(value, (int, float)) or hasattr(value, "__float__"):
            return Score(value=float(value))
        return Score.error(f"metric {self.name!r} returned {type(value).__name__}; return a bool, a number, a "
                           f"Score or None")

    def score(self, item: JudgeInput) -> Score:
        try:
            value = self.fn(*self._args(item))  # type: ignore[misc]
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
        except Exception as exc:
            return Score.error(f"{type(exc).__name__}: {exc}")
        return self._verdict(value)

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        if not self.is_async:
            return [self.score(i) for i in items]

        async def one(item: JudgeInput) -> Score:
            try:
                return self._verdict(await self.fn(*self._args(item)))  # type: ignore[misc]
            except Exception as exc:
                return Score.error(f"{type(exc).__name__}: {exc}")
        return list(await asyncio.gather(*(one(i) for i in items)))


async def _awaited(value: Any) -> Any:
    return await value


def _arity(fn: Callable[..., Any]) -> int:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 3
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional or len([p for p in positional if p.default is p.empty]) > 3:
        raise ConfigError(f"metric {callable_name(fn)!r} must take (prediction, target, sample) or fewer of them, "
                          f"in that order; it takes ({', '.join(p.name for p in params)})")
    return min(3, len(positional))


def register_function_metric(fn: Callable[..., Any], name: str | None = None, *, higher_is_better: bool | None = True,
                             requires_target: bool = True) -> dict[str, Any]:
    """Register `fn` as the metric `name` (default: the function's name) in this process; returns its config
    entry `{"name": ..., "source": <fingerprint>}`. A name a built-in or plugin metric holds is refused."""
    name = name or callable_name(fn)
    if not name.isidentifier():
        raise ConfigError(f"metric name {name!r} must be a Python identifier; pass name='my_metric'")
    try:
        existing = get_metric(name)
    except ConfigError:
        existing = None
    if existing is not None and not (isinstance(existing, type) and issubclass(existing, FunctionMetric)):
        raise ConfigError(f"metric name {name!r} is taken by a built-in or plugin metric; rename the function or "
                          f"give @evalpipe.metric(name=...)")
    fn_is_async = inspect.iscoroutinefunction(fn)
    cls = type(f"FunctionMetric_{name}", (FunctionMetric,), {
        "name": name, "fn": staticmethod(fn), "arity": _arity(fn), "is_async": fn_is_async,
        "higher_is_better": higher_is_better, "requires_target": requires_target,
        "__doc__": inspect.getdoc(fn) or f"The Python function {name}.",
        "__module__": getattr(fn, "__module__", None) or __name__})  # the user's component, not a built-in one
    register_metric(name, cls, replace=True)  # the latest definition of a name wins (a notebook cell run again)
    return {"name": name, "source": callable_fingerprint(fn)}
