"""Live tools: Python functions given as `module:function`, and the sandbox tools `python` and `bash`.

A function tool's schema comes from its signature and docstring (schema.py) unless the config gives
`parameters` (and `description`); sync functions run in a daemon thread (a hung one is abandoned at its timeout and
never keeps the process alive: threads.py), async ones on the loop. Arguments are
validated against the schema before the call. `python` keeps one interpreter per sample inside the code sandbox
(`evalpipe.sandbox.open_session`, the same entry point the `code_execution` metric uses): state survives across
calls, the sample's files sit in its working folder, and each call returns stdout, stderr and the last
expression's value. `bash` runs a command in the same session's folder and sandbox.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Callable

from evalpipe.core.errors import ConfigError
from evalpipe.tools.base import Tool, ToolContext, ToolError, get_tool, list_tools, register_tool
from evalpipe.tools.schema import function_schema
from evalpipe.tools.threads import in_daemon_thread


def load_function(spec: str, where: str = "tools") -> Callable[..., Any]:
    if ":" not in spec:
        raise ConfigError(f"{where}: live tool {spec!r} must be 'package.module:function' or a registered tool "
                          f"({', '.join(list_tools())})")
    from evalpipe.core.registry import import_callable

    return import_callable(spec, f"{where}: live tool {spec!r}")


def function_tool(fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                  parameters: dict[str, Any] | None = None, timeout_s: float | None = None) -> Tool:
    """Wrap a plain (sync or async) function as a Tool; called with keyword arguments."""
    if parameters is None:
        schema = function_schema(fn, name, description)["function"]
    else:
        schema = {"name": name or fn.__name__, "description": description or (inspect.getdoc(fn) or "").split("\n")[0],
                  "parameters": parameters}
    is_async = inspect.iscoroutinefunction(fn)

    async def call(args: dict[str, Any], ctx: ToolContext) -> Any:
        if is_async:
            return await fn(**args)
        return await in_daemon_thread(functools.partial(fn, **args))  # a hung one: abandoned

    return Tool(schema["name"], schema["description"], schema["parameters"], call, timeout_s=timeout_s)


def build_live_tools(specs: list[Any], where: str = "tools") -> list[Tool]:
    out: list[Tool] = []
    for spec in specs:
        if isinstance(spec, str):
            if ":" not in spec and spec in list_tools():
                out.append(get_tool(spec)({}))
            else:
                out.append(function_tool(load_function(spec, where)))
        elif isinstance(spec, dict) and spec.get("function"):
            fn = load_function(str(spec["function"]), where)
            out.append(function_tool(fn, spec.get("name"), spec.get("description"), spec.get("parameters"),
                                     spec.get("timeout_s")))
        else:
            raise ConfigError(f"{where}: live tool entry {spec!r} must be 'module:function' or "
                              "{function: module:function, name, description, parameters}")
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}: live tools {dup} are declared twice; give each a distinct `name:`")
    return out


def builtin_tool(name: str, options: dict[str, Any] | None = None) -> Tool:
    return get_tool(name)(dict(options or {}))


# ---- the sandbox tools --------------------------------------------------------------------------------------------
PYTHON_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["code"], "properties": {
    "code": {"type": "string", "description": "Python code to run; the value of a final expression is returned"}}}
BASH_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["command"], "properties": {
    "command": {"type": "string", "description": "A shell command, run in the sample's working folder"}}}


def _session_result(out: Any) -> dict[str, Any]:
    """The session's reply as the model sees it: stdout, stderr, the last expression's value, an error (the
    traceback's last line); empty parts left out. A timed-out call is the `timeout` tool error."""
    if not isinstance(out, dict):
        out = {"stdout": str(out)}
    if out.get("timed_out"):
        raise ToolError("timeout")
    return {k: out.get(k) for k in ("stdout", "stderr", "value", "error") if out.get(k) not in (None, "")}


@register_tool("python")
def python_tool(options: dict[str, Any] | None = None) -> Tool:
    async def call(args: dict[str, Any], ctx: ToolContext) -> Any:
        # asyncio's own pool (not threads.py): each call stops itself at its timeout, and the sandbox's processes
        # die with the thread that started them (PDEATHSIG), which that pool ends with the run
        session = await asyncio.to_thread(ctx.sandbox)
        return _session_result(await asyncio.to_thread(session.run, args["code"], ctx.call_timeout_s))

    return Tool("python", "Run Python code in a persistent interpreter (state is kept between calls; the "
                "sample's files are in the working folder). Returns stdout, stderr and the last expression's value.",
                PYTHON_SCHEMA, call)


@register_tool("bash")
def bash_tool(options: dict[str, Any] | None = None) -> Tool:
    async def call(args: dict[str, Any], ctx: ToolContext) -> Any:
        # asyncio's own pool (not threads.py): each call stops itself at its timeout, and the sandbox's processes
        # die with the thread that started them (PDEATHSIG), which that pool ends with the run
        session = await asyncio.to_thread(ctx.sandbox)
        return _session_result(await asyncio.to_thread(session.bash, args["command"], ctx.call_timeout_s))

    return Tool("bash", "Run a shell command in the sample's working folder (sandboxed). Returns stdout and stderr.",
                BASH_SCHEMA, call)
