"""Tools and multi-turn conversations (docs/tools.md, docs/interfaces.md).

- `base`: `Tool`, `ToolError`, `ChatTurn`, the tool registry (`register_tool`, `get_tool`, `list_tools`, `build_tools`)
- `schema`: JSON Schema from a function's signature and docstring; provider-safe tool names
- `replay`: `ToolBroker`, fixtures and their normalization, `tool_registry_sha256`
- `execute`: `ToolSession`, where arguments are parsed, tools run, errors and output caps applied
- `live`: `module:function` tools and the sandbox tools `python` and `bash`
- `env`: `ToolEnv`, a split's tool layer from its `tools:` config
- `textcalls`: tool calls written as JSON blocks in plain text (local models)

The conversation loop that drives a runner through these tools is `evalpipe/runners/tool_loop.py` (it calls the
runners, so it lives with them; this package stays below them).
"""
from evalpipe.tools.base import (ChatTurn, Tool, ToolCall, ToolContext, ToolError, build_tools, get_tool, list_tools,
                                 register_tool)
from evalpipe.tools.env import ToolEnv
from evalpipe.tools.replay import ToolBroker, normalize_arguments, normalized_key
from evalpipe.tools import live  # noqa: F401  (registers python and bash)


def tool_registry_sha256(split) -> str | None:
    """The split's `tool_registry_sha256` (allowlist plus normalized fixtures), None when it has no tools."""
    env = ToolEnv.for_split(split)
    return env.tool_registry_sha256() if env is not None else None


__all__ = ["ChatTurn", "Tool", "ToolBroker", "ToolCall", "ToolContext", "ToolEnv", "ToolError", "build_tools",
           "get_tool", "list_tools", "normalize_arguments", "normalized_key", "register_tool", "tool_registry_sha256"]
