"""`runner: function`: an agent given as a Python function in this process (`evalpipe.evaluate(agent=fn)`,
`@evalpipe.agent`), rather than as an importable `module:callable` (`runner: agent`).

The function (sync or async) gets one sample, an `AgentTask` (`.question`, `.messages`, `.metadata`, `.files`,
`.id`, `.workdir`, `.call_tool`), or the question text alone when its one parameter is annotated `str`. It returns
the prediction: a string, or a dict with `text` (or `prediction`) and optionally `usage`, `messages`, `events`.
It runs as the `agent` runner runs a callable (sync ones in daemon threads, async ones on a loop of their own, a
scratch folder per sample, the run's timeout bounding each: evalpipe/runners/agent.py).

The model entry names the function by its fingerprint (`options.function`, evalpipe/core/callables.py): the
function is looked up in this process's `FUNCTIONS`, and the fingerprint is part of every rollout's identity, so
an unchanged function resumes from the journal and an edited one is evaluated again.
"""
from __future__ import annotations

import inspect
import typing
from typing import Any, Callable, Iterable, Literal, Optional

from pydantic import BaseModel

from evalpipe.core.callables import callable_fingerprint, callable_name
from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Generation
from evalpipe.runners.agent import AgentRunner, usage_owner
from evalpipe.runners.base import Runner, register_runner

# fingerprint -> the agent function, filled by `register_function` (the Python API) in this process
FUNCTIONS: dict[str, Callable[..., Any]] = {}


def register_function(fn: Callable[..., Any], fingerprint: str | None = None) -> str:
    """Make `fn` reachable by `runner: function` in this process; returns its fingerprint (`options.function`)."""
    if not callable(fn):
        raise ConfigError(f"agent {fn!r} is not callable; pass a function, a Runner or a model string")
    fp = fingerprint or callable_fingerprint(fn)
    FUNCTIONS[fp] = fn
    return fp


def wants_text(fn: Callable[..., Any]) -> bool:
    """Whether `fn`'s first parameter is annotated `str`: it then gets the question, not the whole sample."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that can't be evaluated: read it as written
        hints = {}
    hint = hints.get(params[0].name, params[0].annotation)
    return hint is str or hint == "str"


def _as_agent_result(result: Any) -> Any:
    """What a function agent may return, in the form `runner: agent` reads (`prediction`, not `text`)."""
    if isinstance(result, Generation):
        return {"prediction": result.text, "usage": {"input_tokens": result.input_tokens,
                                                     "output_tokens": result.output_tokens, "cost": result.cost}}
    if isinstance(result, dict) and "prediction" not in result and "text" in result:
        return {**{k: v for k, v in result.items() if k != "text"}, "prediction": result["text"]}
    return result


def adapt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as the agent runner calls it, `(task) -> result`, keeping it sync or async (the runner runs a sync
    function in a worker thread and awaits an async one)."""
    text = wants_text(fn)
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        async def call_async(task: Any) -> Any:
            return _as_agent_result(await fn(task.question if text else task))
        return call_async

    def call(task: Any) -> Any:
        result = fn(task.question if text else task)
        if inspect.isawaitable(result):  # a sync wrapper around a coroutine: the runner awaits it
            async def awaited() -> Any:
                return _as_agent_result(await result)
            return awaited()
        return _as_agent_result(result)
    return call


class FunctionOptions(BaseModel):
    """The `function` runner's options: which function (its fingerprint) and the agent runner's own."""

    function: str
    keep_workdir: Optional[bool] = None
    isolation: Optional[Literal["thread"]] = None  # a function defined in a notebook can't run in another process


@register_runner("function")
class FunctionRunner(AgentRunner):
    name = "function"
    option_schema = FunctionOptions

    def __init__(self, model: ModelConfig):
        Runner.__init__(self, model)
        self.fingerprint = str(model.options.get("function") or "")
        fn = FUNCTIONS.get(self.fingerprint)
        if fn is None:
            raise ConfigError(f"model {model.key!r}: its Python function (fingerprint {self.fingerprint or '-'}) is "
                              f"not defined in this process; evaluate it with evalpipe.evaluate(agent=<function>) "
                              f"from the process that defines it")
        self.spec = str(model.model or callable_name(fn))
        self.fn = adapt(fn)
        self.isolation = "thread"
        self.keep_workdir = bool(model.options.get("keep_workdir", False))
        self._agent_loop = None  # where async agents run (agent.py's AgentLoop)
        self._usage_owner, self._in_flight = usage_owner(fn), 0  # [usage deltas] read around each sample (agent.py)
        if self._usage_owner is not None:
            self.default_concurrency = 1

    def identity(self) -> dict[str, Any]:
        # `version` (the source fingerprint) is one of the identity keys of the model fingerprint too
        return {"runner": self.name, "agent": self.spec, "version": self.fingerprint, "params": self.model.params}


def functions_version(models: Iterable[ModelConfig]) -> str | None:
    """One hash of the Python functions and Runner classes among `models` (their source fingerprints), or None
    when there are none: the `rollouts` asset's code version in a project built by the Python API."""
    from evalpipe.core.fingerprint import fingerprint

    sources = sorted((m.key, str(m.options.get("function") or m.runner)) for m in models
                     if m.runner == "function" or m.runner.startswith("python:"))
    return fingerprint(sources, 16) if sources else None


def runner_class_entry(runner: type[Runner] | Runner, key: str) -> dict[str, Any]:
    """A model entry for a `Runner` subclass or instance given to the Python API: registered in this process under
    a name carrying its class's source fingerprint, which is also added to its identity (so an edited class is a
    new identity, as for a function)."""
    cls = runner if isinstance(runner, type) else type(runner)
    fp = callable_fingerprint(cls)
    name = f"python:{cls.__name__}:{fp}"

    def build(model: ModelConfig) -> Runner:
        built = runner(model) if isinstance(runner, type) else runner
        if not getattr(built, "_source_in_identity", False):  # an instance is built once, patched once
            own = built.identity
            built.identity = lambda: {**own(), "source": fp}  # type: ignore[method-assign]
            built._source_in_identity = True  # type: ignore[attr-defined]
        return built

    build.option_schema = getattr(cls, "option_schema", None)  # type: ignore[attr-defined]
    build.__module__ = cls.__module__  # the user's component, not a built-in one
    register_runner(name, build, replace=True)
    return {"runner": name, "model": key}


__all__ = ["FUNCTIONS", "FunctionRunner", "adapt", "functions_version", "register_function", "runner_class_entry",
           "wants_text"]
