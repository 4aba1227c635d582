"""The conversation loop every runner uses when a sample offers tools.

send messages + tool schemas -> the runner's one-turn `chat` step -> when the reply has tool calls, run each
(in the order the model gave them, parallel calls included) through the sample's `ToolSession`, append the
results as `tool` messages, call the model again; stop on a final answer (`final`), `max_turns`,
`max_tool_calls`, or the sample's time budget (`timeout`).

Tool names a provider would reject (dots, as in `math.factorial`) are renamed for the request
(`schema.wire_names`) and mapped back at once: the trajectory, the records and the scores only ever see the
dataset's names. One conversation is one driver attempt, so retries, the journal and resume work per
conversation.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any

from evalpipe.tools.base import ChatTurn
from evalpipe.tools.env import ToolEnv
from evalpipe.tools.schema import schema_name, wire_names
from evalpipe.core.types import Generation, RolloutRequest
from evalpipe.runners.base import ModelError
from evalpipe.runners.limits import estimate_tokens


def _renamed(schema: dict[str, Any], name: str) -> dict[str, Any]:
    fn = dict(schema.get("function") or {})
    fn["name"] = name
    return {**schema, "function": fn}


class WireTools:
    """A sample's schemas in provider-safe names, and the mapping back."""

    __slots__ = ("schemas", "to_wire", "from_wire", "offered")

    def __init__(self, tools: list[dict[str, Any]]):
        names = [schema_name(t) for t in tools]
        self.to_wire = wire_names(names)
        self.offered = list(self.to_wire)  # the dataset's names (each conversation's tool session copies them)
        self.from_wire = {w: n for n, w in self.to_wire.items()}
        self.schemas = [t if self.to_wire[n] == n else _renamed(t, self.to_wire[n]) for t, n in zip(tools, names)]


class WireMessages(list):
    """The conversation as the provider sees it. The loop only ever appends to it, so a runner may keep its
    encoding of the first `n` messages in `encoded` = (n, bytes) and encode only what is new each turn."""

    __slots__ = ("encoded",)

    def __init__(self, messages: list[dict[str, Any]]):
        super().__init__(messages)
        self.encoded: tuple[int, bytes] | None = None


_WIRE_CACHE: dict[int, tuple[list, WireTools]] = {}


def wire_tools(tools: list[dict[str, Any]]) -> WireTools:
    """Cached per schema list object (prompts share one list per distinct JSON): no per-turn renaming work."""
    hit = _WIRE_CACHE.get(id(tools))
    if hit is not None and hit[0] is tools:
        return hit[1]
    w = WireTools(tools)
    if len(_WIRE_CACHE) > 4096:
        _WIRE_CACHE.clear()
    _WIRE_CACHE[id(tools)] = (tools, w)
    return w


async def run_conversation(runner: Any, request: RolloutRequest, env: ToolEnv, budget_s: float,
                           limiter: Any = None, first_estimate: int = 0, max_tokens: int | None = None) -> Generation:
    """One whole conversation for one sample; never raises for tool problems (model errors propagate to the
    driver, which retries or records them). With a rate `limiter`, each model turn takes its share: the driver
    took the first turn's (`first_estimate`), the loop takes the later ones and settles every turn's usage."""
    from evalpipe.tools.execute import arguments_text

    agentic = getattr(runner, "generate_with_tools", None)
    if agentic is not None:  # user agents loop themselves and call tools through the same layer
        return await _agent_conversation(agentic, request, env, budget_s)
    chat = getattr(runner, "chat", None)
    if chat is None:
        raise ModelError(f"runner {runner.name!r} has no chat step, so it cannot run samples that offer tools; "
                         "use litellm, local, echo (reply: script), replay or agent")
    deadline = time.monotonic() + budget_s
    bound = _TurnBound(deadline)  # the budget over every model turn: one timer for the conversation
    tools = request.tools or []
    wire = wire_tools(tools)
    session = env.session(request.sample_id, wire.offered, request.files)
    messages = WireMessages(request.messages)  # what the provider sees (wire names)
    trajectory = [dict(m) for m in request.messages]  # what is recorded (dataset names)
    turns, tin, tout, cost = 0, None, None, 0.0
    stop, text, finish, raw = None, None, None, None
    # [interactive] a conversation partner (a simulated user, evalpipe/benchmarks/tau2): it speaks whenever the
    # model answers in text, and says when the conversation is over
    partner = getattr(env, "partner", None)
    try:
        if partner is not None:
            stop = await partner.respond(session, trajectory, messages, request, first=True)
        while stop is None:
            if partner is not None:
                stop = partner.limit(session, trajectory)
                if stop is not None:
                    break
            if turns >= env.max_turns:
                stop = "max_turns"
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or bound.expired:
                stop = "timeout"
                break
            estimate = first_estimate
            if limiter is not None and turns:
                estimate = estimate_tokens(messages, max_tokens)
                await limiter.acquire(estimate)
            try:
                bound.waiting = True
                reply: ChatTurn = await chat(messages, wire.schemas, request)
            except asyncio.CancelledError:
                if bound.timed_out():
                    stop = "timeout"
                    break
                raise
            finally:
                bound.waiting = False
            bound.timed_out()  # (the turn answered though the budget ran out meanwhile: the next check stops)
            if limiter is not None:
                limiter.settle(estimate, (reply.input_tokens or 0) + (reply.output_tokens or 0))
            turn = turns
            turns += 1
            if reply.input_tokens is not None:
                tin = (tin or 0) + reply.input_tokens
            if reply.output_tokens is not None:
                tout = (tout or 0) + reply.output_tokens
            cost += reply.cost or 0.0
            finish, raw = reply.finish_reason, reply.raw
            # one pass over the calls: the provider's assistant message (wire names), the recorded one (dataset
            # names) and what to run; the arguments text is worked out once for all three
            blocks = reply.tool_calls
            invalid = None
            if reply.invalid_blocks:
                blocks = [*blocks, *reply.invalid_blocks]
                invalid = {id(c) for c in reply.invalid_blocks}
            if not blocks:
                messages.append({"role": "assistant", "content": reply.content})
                trajectory.append({"role": "assistant", "content": reply.content})
                text = reply.content
                if partner is None:
                    stop = "final"
                    break
                stop = await partner.respond(session, trajectory, messages, request)
                continue
            to_wire, from_wire, first = wire.to_wire, wire.from_wire, len(session.records)
            wire_calls, named_calls, calls = [], [], []
            for i, c in enumerate(blocks):
                cid = c.id or f"call_{first + i}"
                name = from_wire.get(c.name, c.name)
                a = c.arguments if type(c.arguments) is str else (
                    arguments_text(c.arguments) if c.arguments is not None else "")
                wire_calls.append({"id": cid, "type": "function", "function": {
                    "name": to_wire.get(name, name), "arguments": a}})
                named_calls.append({"id": cid, "type": "function", "function": {"name": name, "arguments": a}})
                calls.append((cid, name, a, c))
            messages.append({"role": "assistant", "content": reply.content, "tool_calls": wire_calls})
            trajectory.append({"role": "assistant", "content": reply.content, "tool_calls": named_calls})
            for cid, name, args, call in calls:
                if len(session.records) >= env.max_tool_calls:
                    stop = "max_tool_calls"
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    stop = "timeout"
                    break
                _, content = await session.call(
                    name, call.arguments, turn, timeout_s=left, arguments=args,
                    parse_error="the tool-call block is not valid JSON" if invalid and id(call) in invalid else None)
                messages.append({"role": "tool", "tool_call_id": cid, "content": content})
                trajectory.append({"role": "tool", "tool_call_id": cid, "content": content, "name": name})
    finally:
        bound.close()
        await session.aclose()
    return Generation(text=text, finish_reason=finish, input_tokens=tin, output_tokens=tout, cost=cost, raw=raw,
                      trajectory=trajectory, tool_calls=session.records, turns=turns, stop_reason=stop)


class _TurnBound:
    """A conversation's time budget over its model turns, as `asyncio.timeout(remaining)` around each turn bounded
    them, on one timer for the whole conversation instead of one per turn: at the deadline the timer cancels the
    task if it waits on a model turn (`waiting`), else marks the budget spent (`expired`: the loop stops before the
    next turn). Tool calls keep their own bounds. A cancellation from outside propagates, as with asyncio.timeout."""

    __slots__ = ("_task", "_cancelling", "_handle", "waiting", "expired", "_fired")

    def __init__(self, deadline: float):
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._cancelling = self._task.cancelling() if self._task is not None else 0
        self.waiting = self.expired = self._fired = False
        # (time.monotonic() is the default loop's clock: the deadline is loop time)
        self._handle: asyncio.TimerHandle | None = loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        self._handle = None
        self.expired = True
        if self.waiting and self._task is not None:
            self._fired = True
            self._task.cancel()

    def timed_out(self) -> bool:
        """After a turn: True when this bound's cancellation ended it (then it is a timeout, not a cancel)."""
        if not self._fired:
            return False
        self._fired = False
        return self._task.uncancel() <= self._cancelling  # type: ignore[union-attr]

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def _agent_conversation(agentic: Any, request: RolloutRequest, env: ToolEnv, budget_s: float) -> Generation:
    session = env.session(request.sample_id, wire_tools(request.tools or []).offered, request.files)
    try:
        try:
            async with asyncio.timeout(budget_s):
                gen = await agentic(request, session)
            stop = "max_tool_calls" if len(session.records) >= env.max_tool_calls else "final"
        except TimeoutError:
            gen, stop = Generation(text=None, trajectory=[]), "timeout"
    finally:
        await session.aclose()
    gen.tool_calls, gen.stop_reason = session.records, stop
    return gen


def trace_fields(gen: Generation) -> dict[str, Any]:
    """The rollouts columns of a conversation (docs/interfaces.md); empty for a one-shot generation."""
    if gen.stop_reason is None and not gen.tool_calls:
        return {}
    recs = gen.tool_calls
    return {"turns": gen.turns, "tool_calls": len(recs),
            "invalid_args": sum(1 for r in recs if r.get("arguments_valid") is False),
            "fixture_misses": sum(1 for r in recs if r.get("fixture_hit") is False),
            "stop_reason": gen.stop_reason,
            # kept as records until the row is redacted (field by field: cheap) and journaled; the pipeline
            # writes it as JSON text (rollouts.tool_trace)
            "tool_trace": recs}
