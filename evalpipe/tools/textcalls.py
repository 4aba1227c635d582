"""Tool calls written as JSON blocks in plain text, for models without a native tool API (the `local` runner).

The prompt (`system_prompt`) asks the model to answer a tool call with a block

    <tool_call>{"name": "web.search", "arguments": {"q": "..."}}</tool_call>

(```json fenced blocks holding an object with "name" are accepted too). `parse_tool_blocks` returns the text
outside the blocks and the calls; a block that does not parse is returned as an invalid call (its raw text as
the arguments), which the loop records as invalid arguments: never a crash.
"""
from __future__ import annotations

import json
import re
from typing import Any

from evalpipe.tools.base import ToolCall

_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCED = re.compile(r"```(?:json|tool_call)?\s*(\{.*?\})\s*```", re.S)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')

SYSTEM_PROMPT = """You can call tools. The tools are listed below as JSON schemas.
To call a tool, reply with one block per call, and nothing else:
<tool_call>{{"name": "<tool name>", "arguments": {{<arguments as JSON>}}}}</tool_call>
For example:
<tool_call>{example}</tool_call>
Results come back in messages starting with "Tool result". When you know the answer, reply with the answer only,
without a block.

Tools:
{tools}"""


def system_prompt(tools: list[dict[str, Any]]) -> str:
    lines = [json.dumps(t.get("function", t), ensure_ascii=False) for t in tools]
    fn = tools[0].get("function", tools[0]) if tools else {"name": "tool", "parameters": {}}
    props = (fn.get("parameters") or {}).get("properties") or {}
    example = json.dumps({"name": fn.get("name"), "arguments": {k: "..." for k in list(props)[:2]}})
    return SYSTEM_PROMPT.format(tools="\n".join(lines), example=example)


def parse_tool_blocks(text: str | None) -> tuple[str | None, list[ToolCall], list[ToolCall]]:
    """(content outside the blocks, parsed calls, invalid blocks)."""
    if not text:
        return text, [], []
    spans = [(m.start(), m.end(), m.group(1)) for m in _TAGGED.finditer(text)]
    if not spans:
        spans = [(m.start(), m.end(), m.group(1)) for m in _FENCED.finditer(text) if _NAME.search(m.group(1))]
    calls: list[ToolCall] = []
    invalid: list[ToolCall] = []
    for _, _, body in spans:
        try:
            obj = json.loads(body)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            args = obj.get("arguments", obj.get("parameters", {}))
            calls.append(ToolCall(obj["name"], args if isinstance(args, str) else
                                  json.dumps(args, ensure_ascii=False)))
        else:
            m = _NAME.search(body)
            invalid.append(ToolCall(m.group(1) if m else "", body))
    rest = text
    for start, end, _ in reversed(spans):
        rest = rest[:start] + rest[end:]
    return rest.strip() or None, calls, invalid


def render_for_text_model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-format messages (assistant tool calls, `tool` results) as plain system/user/assistant turns."""
    out: list[dict[str, Any]] = []
    prompt = system_prompt(tools)
    if messages and messages[0].get("role") == "system":
        out.append({"role": "system", "content": f"{messages[0].get('content') or ''}\n\n{prompt}"})
        messages = messages[1:]
    else:
        out.append({"role": "system", "content": prompt})
    names: dict[str, str] = {}
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            names.update({c.get("id"): c["function"]["name"] for c in m["tool_calls"]})
            blocks = [f"<tool_call>{{\"name\": {json.dumps(c['function']['name'])}, \"arguments\": "
                      f"{c['function'].get('arguments') or '{}'}}}</tool_call>" for c in m["tool_calls"]]
            out.append({"role": "assistant", "content": "\n".join(filter(None, [m.get("content"), *blocks]))})
        elif role == "tool":
            out.append({"role": "user", "content": f"Tool result ({m.get('name') or names.get(m.get('tool_call_id'), 'tool')}): "
                                                   f"{m.get('content')}"})
        else:
            out.append({"role": role or "user", "content": m.get("content") or ""})
    return out
