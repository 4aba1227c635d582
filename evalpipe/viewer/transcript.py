"""A sample's conversation as a transcript of events (in the spirit of Inspect AI's transcript view): each message
once, and each tool call as a call (the tool, its arguments as a key/value table, the result or error, fixture hit
or miss, timing) rather than the raw JSON the trajectory stores.

The trajectory (rollouts.trajectory) holds the messages in order: an assistant message lists its calls
(`tool_calls`, OpenAI's form, arguments as JSON text) and each call's `tool` message follows it. The tool layer
(evalpipe/tools/execute.py) records the same calls in the same order as `tool_calls` rows (call_index 0, 1, ...),
with what the trajectory lacks: fixture hit, error, latency. So the k-th call of the trajectory is the record of
call_index k when the names agree; a record that matches no call (an agent runner that keeps no trajectory) is
shown after the messages.
"""
from __future__ import annotations

import json
from typing import Any


def _parse(text: Any) -> tuple[Any, bool]:
    """(value, parsed): JSON text as its value, anything else as it is."""
    if isinstance(text, str):
        try:
            return json.loads(text), True
        except ValueError:
            return text, False
    return text, text is not None


def _text(v: Any) -> str:
    """A value as a reader wants it: a string as its characters (real line breaks, no quotes or escapes), anything
    else as indented JSON."""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, indent=2 if isinstance(v, (dict, list)) and v else None, default=str)


def key_values(value: Any) -> list[dict[str, str]] | None:
    """The rows of a small key/value table for a JSON object; None for anything else."""
    if not isinstance(value, dict):
        return None
    return [{"key": str(k), "value": _text(v)} for k, v in value.items()]


def call_view(record: dict[str, Any] | None, name: str | None = None, arguments: Any = None,
              call_id: str | None = None, tool_message: Any = None) -> dict[str, Any]:
    """One call: from its `tool_calls` record when there is one, else from the trajectory alone."""
    r = record or {}
    raw_args = r.get("arguments") if record is not None else arguments
    args, parsed = _parse(raw_args)
    result_raw = r.get("result") if record is not None and r.get("result") is not None else tool_message
    result, _ = _parse(result_raw)
    hit = r.get("fixture_hit")
    valid = r.get("arguments_valid")
    return {
        "kind": "call", "id": call_id, "name": r.get("name") or name, "turn": r.get("turn"),
        "call_index": r.get("call_index"),
        "arguments": key_values(args) if parsed else None,
        # arguments that are not an object (or not JSON at all) are shown as written
        "arguments_text": None if parsed and isinstance(args, dict) else (raw_args if raw_args not in (None, "") else None),
        "arguments_valid": valid if valid is not None else (parsed and isinstance(args, dict)),
        "result": key_values(result), "result_text": None if isinstance(result, dict) else
        (None if result is None else _text(result)),
        "error": r.get("error"),
        "fixture": "hit" if hit is True else "miss" if hit is False else None,  # None: a live call, or unknown
        "latency_s": r.get("latency_s"), "recorded": record is not None,
    }


def build(trajectory: list[dict[str, Any]], tool_calls: list[dict[str, Any]], complete: bool = True) -> list[dict[str, Any]]:
    """The transcript's events: {"kind": "message", role, name, content} and {"kind": "call", ...} (call_view).
    `complete`: the trajectory is whole (not cut for length), so records no call matched are appended."""
    records = sorted(tool_calls or [], key=lambda t: (t.get("call_index") is None, t.get("call_index") or 0))
    results: dict[str, Any] = {m.get("tool_call_id"): m.get("content") for m in trajectory or []
                               if isinstance(m, dict) and m.get("role") == "tool" and m.get("tool_call_id")}
    shown_ids: set[str] = set()
    events: list[dict[str, Any]] = []
    used = 0  # records are matched in order
    for m in trajectory or []:
        if not isinstance(m, dict):
            events.append({"kind": "message", "role": "event", "name": None, "content": _text(m)})
            continue
        role = m.get("role") or "event"
        if role == "tool" and m.get("tool_call_id") in shown_ids:
            continue  # shown as its call's result
        content = m.get("content")
        if content not in (None, "", []):
            events.append({"kind": "message", "role": role, "name": m.get("name"), "content": _text(content)})
        elif role != "assistant" or not m.get("tool_calls"):
            events.append({"kind": "message", "role": role, "name": m.get("name"), "content": _text(m)})
        for c in m.get("tool_calls") or []:
            fn = (c.get("function") or {}) if isinstance(c, dict) else {}
            name, cid = fn.get("name"), c.get("id") if isinstance(c, dict) else None
            record = None
            if used < len(records) and records[used].get("name") == name:
                record, used = records[used], used + 1
            events.append(call_view(record, name, fn.get("arguments"), cid, results.get(cid)))
            if role == "user":  # [tau2] the simulated user's own tool (telecom): told apart from the agent's
                events[-1]["by"] = "user"
            if cid:
                shown_ids.add(cid)
    if complete or not trajectory:
        events += [call_view(r) for r in records[used:]]
    for number, e in enumerate((e for e in events if e["kind"] == "call"), start=1):
        e["number"] = number
    return events
