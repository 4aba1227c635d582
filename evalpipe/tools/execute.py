"""Running one tool call: the one place where a call's arguments are parsed, the tool is chosen (replayed or
live), exceptions become tool errors, and the output cap applies. Every call yields one tool-call record
(docs/interfaces.md) and the text the model is shown.

This module does not import env.py (env.py builds sessions from it): what a session reads of its split's tool layer
is `SessionEnv`, which `ToolEnv` provides.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any, Callable, Protocol

from evalpipe.core.jsontext import dumps, raw_decode
from evalpipe.tools.base import Tool, ToolContext, ToolError
from evalpipe.tools.replay import NOT_ALLOWED, ToolBroker, normalized_key

DEFAULT_OUTPUT_CAP = 16 * 1024  # characters of a tool result shown to the model


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(arguments, None) when `raw` is a JSON object (text or dict), else (None, why). One narrow repair: an empty
    string means no arguments (servers send it for tools without parameters)."""
    if isinstance(raw, dict):
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return None, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        obj = _loads(raw)
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({exc.msg} at char {exc.pos})"
    if not isinstance(obj, dict):
        return None, f"arguments must be a JSON object, got {type(obj).__name__}"
    return obj, None


def _loads(text: str) -> Any:
    """`json.loads(text)`: the same value or the same error, the common case (one JSON value, nothing around it)
    read by the decoder's `raw_decode` without json.loads' Python layers."""
    try:
        value, end = raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def arguments_text(raw: Any) -> str:
    """The arguments as sent: text kept as is, objects as compact JSON."""
    if isinstance(raw, str):
        return raw
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"), default=str)


def cap(text: str, limit: int) -> str:
    if limit and len(text) > limit:
        return text[:limit] + f"\n[output truncated: {len(text) - limit} more characters]"
    return text


class SessionEnv(Protocol):
    """What a `ToolSession` reads of its split's tool layer (`evalpipe.tools.env.ToolEnv`)."""

    mode: str
    broker: ToolBroker
    live_tools: dict[str, Tool]
    always_live: set[str]
    options: dict[str, Any]
    output_cap: int
    tool_timeout_s: float
    max_tool_calls: int
    counts: Counter[str]

    def allowed(self, name: str, offered: list[str]) -> bool: ...

    def sandbox_factory(self, files: list[str]) -> Callable[[], Any] | None: ...


class ToolSession:
    """The tool layer for one sample: runs its calls in order, keeps its records, owns its sandbox session."""

    def __init__(self, env: SessionEnv, sample_id: str, offered: list[str], files: list[str] | None = None):
        self.env = env
        self.offered = list(offered)
        self.records: list[dict[str, Any]] = []
        self.ctx = ToolContext(sample_id=sample_id, files=list(files or []), options=env.options,
                               _session_factory=env.sandbox_factory(files or []))

    async def call(self, name: str, raw_arguments: Any, turn: int, timeout_s: float | None = None,
                   parse_error: str | None = None, arguments: str | None = None) -> tuple[dict[str, Any], str]:
        """Run one call; returns (record, content for the model's `tool` message). Never raises (but
        cancellation). `arguments`: the arguments text when the caller has it already (`arguments_text`)."""
        env = self.env
        start = time.perf_counter()
        text = arguments if arguments is not None else (
            arguments_text(raw_arguments) if raw_arguments is not None else "")
        args, why = (None, parse_error) if parse_error else parse_arguments(raw_arguments)
        record: dict[str, Any] = {"turn": turn, "call_index": len(self.records), "name": name, "arguments": text,
                                  "arguments_valid": args is not None, "normalized_key": None, "result": None,
                                  "fixture_hit": None, "error": None, "latency_s": 0.0}
        result: Any
        tool = env.live_tools.get(name)
        if not env.allowed(name, self.offered):
            env.counts["disallowed"] += 1
            result, record["error"] = dict(NOT_ALLOWED), "tool_not_allowed"
        elif args is None:
            result, record["error"] = {"ok": False, "error": "invalid_arguments", "detail": why}, "invalid_arguments"
        elif tool is not None and (env.mode == "live" or tool.name in env.always_live):
            record["normalized_key"] = normalized_key(name, args)
            result, record["error"] = await self._live(tool, args, timeout_s)
        else:
            key = normalized_key(name, args)
            record["normalized_key"] = key
            hit, result = env.broker.lookup(name, key)
            record["fixture_hit"] = hit
            if not hit:
                env.counts["misses"] += 1
                record["error"] = "fixture_miss"
            elif isinstance(result, dict) and result.get("ok") is False and result.get("error"):
                record["error"] = str(result["error"])  # a recorded tool error (the model should recover)
        content = cap(result if isinstance(result, str) else dumps(result), env.output_cap)  # (json.dumps(result,
        # ensure_ascii=False, default=str), the encoder made once)
        record["result"] = content
        record["latency_s"] = time.perf_counter() - start
        self.records.append(record)
        return record, content

    async def _live(self, tool: Tool, args: dict[str, Any], timeout_s: float | None) -> tuple[Any, str | None]:
        if tool.validate and tool.parameters:
            import jsonschema

            try:
                jsonschema.validate(args, tool.parameters)
            except jsonschema.ValidationError as exc:
                return {"ok": False, "error": "invalid_arguments", "detail": exc.message}, "invalid_arguments"
        limits = [t for t in (tool.timeout_s, self.env.tool_timeout_s, timeout_s) if t is not None]
        limit = min(limits) if limits else None
        self.ctx.call_timeout_s = limit
        # sandbox tools stop their own call at `limit` (and say so); the outer bound only guards against a hang,
        # so a late session is never handed the next call while still busy
        outer = limit + 10 if (limit is not None and tool.name in self.env.always_live) else limit
        try:
            async with asyncio.timeout(outer):
                value = await tool.call(args, self.ctx)
        except TimeoutError:
            return {"ok": False, "error": "timeout", "detail": f"tool took over {limit:g}s"}, "timeout"
        except ToolError as exc:
            return {"ok": False, "error": str(exc)}, str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the tool's bug or bad input: the model sees it, the conversation goes on
            msg = f"{type(exc).__name__}: {exc}"
            return {"ok": False, "error": msg}, msg
        if isinstance(value, dict) and value.get("error"):  # a tool that reports its own failure
            lines = str(value["error"]).strip().splitlines()
            return value, (lines[-1][:300] if lines else "error")
        return value, None

    async def aclose(self) -> None:
        if self.ctx._session is not None:
            await asyncio.to_thread(self.ctx.close)
