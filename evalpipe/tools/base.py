"""Tools: what a model may call during a conversation, behind a registry like runners and metrics.

A `Tool` has a name (the dataset's name, dots allowed), a description, JSON-Schema `parameters`, and an async
`call(arguments, ctx)`. Built-in tools (`python`, `bash`) and plugins register a factory with `register_tool`;
`build_tools(names, options)` builds them for a split. Live Python functions (`module:function`) are wrapped by
`evalpipe.tools.live.function_tool`. Replayed tools have no `Tool` object: the `ToolBroker` answers them from
fixtures (replay.py).

`ChatTurn` is what a runner's one-turn chat step returns (`runner.chat(messages, tools)`): the assistant's
content and its tool calls, in the wire names the runner was given (the loop maps them back).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from evalpipe.core.registry import Registry


class ToolError(Exception):
    """A tool's own failure, reported to the model as `{"ok": false, "error": <message>}`; the conversation goes on."""


@dataclass
class ToolCall:
    """One call as the model made it: `arguments` is the JSON text it sent (unparsed), or a dict when the
    runner's protocol gives objects (replay files, agents)."""

    name: str
    arguments: Any
    id: str | None = None


@dataclass
class ChatTurn:
    """One assistant reply from a runner's chat step."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: float | None = None
    raw: Any = None
    # tool-call blocks the runner could not parse (local models' JSON blocks): recorded as invalid arguments
    invalid_blocks: list[ToolCall] = field(default_factory=list)


@dataclass
class ToolContext:
    """Per-sample state a live tool may use: the sample's files, its sandbox session (opened on first use)."""

    sample_id: str
    files: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    call_timeout_s: float | None = None  # the current call's time limit (set by the tool layer)
    _session: Any = None
    _session_factory: Callable[[], Any] | None = None

    def sandbox(self) -> Any:
        """This sample's `evalpipe.sandbox` session (one interpreter, state kept across calls)."""
        if self._session is None:
            if self._session_factory is None:
                raise ToolError("no sandbox session available for this sample")
            self._session = self._session_factory()
        return self._session

    def close(self) -> None:
        if self._session is not None:
            try:
                self._session.close()
            finally:
                self._session = None


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
    validate: bool = True  # check arguments against `parameters` (jsonschema) before calling
    timeout_s: float | None = None

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        return await self.fn(arguments, ctx)


_TOOLS: Registry[Tool] = Registry("tool")


def register_tool(name: str, factory: Callable[[dict[str, Any]], Tool] | None = None, *, replace: bool = False):
    """Register a tool factory `factory(options) -> Tool` under `name` (usable as a decorator)."""
    return _TOOLS.register(name, factory, replace=replace)


def get_tool(name: str) -> Callable[[dict[str, Any]], Tool]:
    return _TOOLS.get(name)


def list_tools() -> list[str]:
    return _TOOLS.names()


def build_tools(names: list[str], options: dict[str, Any] | None = None) -> list[Tool]:
    return [get_tool(n)(dict(options or {})) for n in names]
