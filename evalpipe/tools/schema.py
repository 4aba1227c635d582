"""JSON Schema for a Python function from its signature and docstring (`docstring_parser`), and provider-safe
tool names.

Type hints become JSON Schema types; the docstring's summary is the tool description and its `Args:` / `:param:`
entries describe the parameters; parameters without a default are required; extra properties are refused.
A missing description (tool or parameter) is an error at registration, with the fix in the message.
"""
from __future__ import annotations

import inspect
import re
import types
import typing
from typing import Any, Callable

from evalpipe.core.errors import ConfigError

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array",
           type(None): "null"}


def type_schema(hint: Any) -> dict[str, Any]:
    """A type hint as JSON Schema (unknown or missing hints: no constraint)."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [type_schema(a) for a in args]
        if all(set(p) == {"type"} for p in parts):
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        return {"type": "array", **({"items": type_schema(args[0])} if args else {})}
    if origin is dict:
        return {"type": "object"}
    return {}


def function_schema(fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                    require_descriptions: bool = True) -> dict[str, Any]:
    """The OpenAI function-tool schema of `fn`."""
    import docstring_parser

    tool_name = name or fn.__name__
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    desc = description or " ".join(p for p in (doc.short_description, doc.long_description) if p) or ""
    if require_descriptions and not desc:
        raise ConfigError(f"tool {tool_name!r}: {getattr(fn, '__qualname__', fn)} has no docstring; add one "
                          "(its first line is the tool's description) or give `description:` in the config")
    param_docs = {p.arg_name: p.description for p in doc.params}
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    props: dict[str, Any] = {}
    required: list[str] = []
    for pname, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or pname in ("self", "ctx"):
            continue
        schema = type_schema(hints.get(pname, p.annotation))
        pdesc = param_docs.get(pname)
        if require_descriptions and not pdesc:
            raise ConfigError(f"tool {tool_name!r}: parameter {pname!r} has no description; document it in the "
                              "docstring (`Args:` section) or give the schema in the config")
        if pdesc:
            schema["description"] = pdesc
        if p.default is p.empty:
            required.append(pname)
        props[pname] = schema
    params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    return {"type": "function", "function": {"name": tool_name, "description": desc, "parameters": params}}


def schema_name(schema: dict[str, Any]) -> str:
    """The tool name of an OpenAI function-tool schema (or a bare `{"name": ...}` function entry)."""
    fn = schema.get("function", schema) if isinstance(schema, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(f"tool schema {str(schema)[:120]!r} has no function name; expected "
                          '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
    return name


def as_function_tool(schema: dict[str, Any]) -> dict[str, Any]:
    """Accept `{"type": "function", "function": {...}}` or a bare `{"name", "description", "parameters"}`."""
    schema_name(schema)
    if schema.get("type") == "function" and isinstance(schema.get("function"), dict):
        return schema
    return {"type": "function", "function": dict(schema)}


_SAFE = re.compile(r"[^A-Za-z0-9_-]")
SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def wire_names(names: list[str]) -> dict[str, str]:
    """Dataset name -> a name every provider accepts (`^[A-Za-z0-9_-]{1,64}$`; `math.factorial` ->
    `math_factorial`), unique within the list. Names that are already safe are kept."""
    out: dict[str, str] = {}
    used: set[str] = set(n for n in names if SAFE_NAME.match(n))
    for n in names:
        if SAFE_NAME.match(n):
            out[n] = n
            continue
        base = _SAFE.sub("_", n)[:60] or "tool"
        cand, i = base, 1
        while cand in used:
            i += 1
            cand = f"{base[:58]}_{i}"
        used.add(cand)
        out[n] = cand
    return out
