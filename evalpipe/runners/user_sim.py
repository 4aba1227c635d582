"""A simulated user: a second model role that plays the customer in an interactive benchmark (tau2-bench,
docs/benchmarks.md), configured like a judge (its own runner and model).

It sees the conversation from the other side: the agent's text messages are its `user` turns, its own earlier
messages its `assistant` turns, and its own tool calls and their results (telecom's user tools) as they were; the
agent's tool calls are hidden from it. One reply may call the user's tools first (answered by `call_tool`) and
ends with a text message. A text holding one of `stop_tokens` ends the conversation (the official user stop).
"""
from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from evalpipe.core.types import RolloutRequest
from evalpipe.runners.base import ModelError


def flipped(system: str, trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the user simulator is shown it."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in trajectory:
        role = m.get("role")
        if role == "assistant" and not m.get("tool_calls") and m.get("content"):
            out.append({"role": "user", "content": m["content"]})
        elif role == "user":
            msg = {"role": "assistant", "content": m.get("content")}
            if m.get("tool_calls"):
                msg["tool_calls"] = m["tool_calls"]
            out.append(msg)
        elif role == "tool" and m.get("requestor") == "user":
            out.append({"role": "tool", "tool_call_id": m.get("tool_call_id"), "content": m.get("content")})
    return out


class UserSimulator:
    """One runner playing the user for every conversation of a split (started on first use)."""

    def __init__(self, runner: Any, stop_tokens: tuple[str, ...], max_tool_rounds: int = 10):
        if getattr(runner, "chat", None) is None:
            raise ModelError(f"user simulator: runner {runner.name!r} has no chat step; use litellm, local or echo "
                             f"(reply: script)")
        self.runner, self.stop_tokens, self.max_tool_rounds = runner, stop_tokens, max_tool_rounds
        self._started = False

    async def aclose(self) -> None:
        """Close the runner if it was started (its sessions, servers or processes)."""
        if self._started:
            self._started = False
            await self.runner.aclose()

    def is_stop(self, text: str | None) -> bool:
        return bool(text) and any(t in text for t in self.stop_tokens)

    async def reply(self, sample_id: str, system: str, trajectory: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None = None,
                    call_tool: Callable[[str, Any], Awaitable[str]] | None = None) -> list[dict[str, Any]]:
        """The user's next messages for the trajectory (its tool calls and their results, then its text)."""
        if not self._started:
            await self.runner.start()
            self._started = True
        request = RolloutRequest(sample_id=sample_id, messages=[{"role": "system", "content": system}],
                                 fingerprint="", tools=tools or None)
        new: list[dict[str, Any]] = []
        for _ in range(self.max_tool_rounds + 1):
            turn = await self.runner.chat(flipped(system, trajectory + new), tools or [], request)
            calls = list(turn.tool_calls or [])
            if not calls or call_tool is None:
                new.append({"role": "user", "content": turn.content or ""})
                return new
            named = []
            for i, c in enumerate(calls):
                args = c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments or {})
                named.append({"id": c.id or f"user_call_{len(trajectory) + len(new)}_{i}", "type": "function",
                              "function": {"name": c.name, "arguments": args}})
            new.append({"role": "user", "content": turn.content, "tool_calls": named})
            for c in named:
                content = await call_tool(c["function"]["name"], c["function"]["arguments"])
                new.append({"role": "tool", "tool_call_id": c["id"], "content": content, "name": c["function"]["name"],
                            "requestor": "user"})
        new.append({"role": "user", "content": ""})
        return new
