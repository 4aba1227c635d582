"""The driver's per-attempt bound on one shared timer (`driver.Deadlines`): what `asyncio.timeout_at` per attempt did,
attempt for attempt (timeouts where due, none early, outside cancellation kept), with one timer for the run."""
import asyncio

import pytest

from evalpipe.core.types import Generation, RolloutRequest
from evalpipe.runners import Runner, RunSettings, run_requests
from evalpipe.runners.driver import Deadlines, FailFast


class Sleeper(Runner):
    """Answers each prompt after the seconds it names ("0.05"); "hang" never answers."""
    name = "sleeper"
    default_concurrency = 8

    def __init__(self):
        super().__init__(None)  # type: ignore[arg-type]  (no model config: a scripted runner)
        self.cancelled: list[str] = []

    async def generate(self, request: RolloutRequest) -> Generation:
        prompt = request.messages[-1]["content"]
        try:
            await asyncio.sleep(3600 if prompt == "hang" else float(prompt))
        except asyncio.CancelledError:
            self.cancelled.append(prompt)
            raise
        return Generation(text=prompt)


def reqs(*prompts):
    return [RolloutRequest(f"s{i}", [{"role": "user", "content": p}], f"fp{i}") for i, p in enumerate(prompts)]


def test_only_the_attempts_past_their_deadline_time_out():
    # 0.3 s bound, one at a time: the shared timer is set for the first attempt's deadline (0.3 s) and fires while
    # the second (0.2-0.4 s, deadline 0.5 s) still runs: that one must not be cut short; the hung third times out
    runner = Sleeper()
    settings = RunSettings(concurrency=1, timeout_s=0.3, max_retries=0)
    rows = asyncio.run(run_requests(runner, reqs("0.2", "0.2", "hang", "0.01"), None, settings))
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    assert rows[2]["error"] == "timeout after 0.3s" and 0.3 <= rows[2]["latency_s"] < 0.8  # at its deadline
    assert runner.cancelled == ["hang"]


def test_a_timed_out_attempt_is_retried_under_a_fresh_deadline():
    class HangsOnce(Sleeper):
        calls = 0

        async def generate(self, request):
            self.calls += 1
            if self.calls == 1:
                await asyncio.sleep(3600)
            return Generation(text="late but fine")

    runner = HangsOnce()
    rows = asyncio.run(run_requests(runner, reqs("x"), None,
                                    RunSettings(timeout_s=0.2, max_retries=1, backoff_base_s=0.01)))
    assert (rows[0]["status"], rows[0]["attempts"], rows[0]["raw_output"]) == ("ok", 2, "late but fine")


def test_a_cancellation_from_outside_is_not_turned_into_a_timeout():
    async def main():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        task = asyncio.create_task(deadlines.bound(loop.time() + 60, asyncio.sleep(3600)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        deadlines.close()

    asyncio.run(main())


def test_fail_fast_cancels_the_waiting_attempts_without_timeouts():
    class FailsFirst(Sleeper):
        async def generate(self, request):
            if request.messages[-1]["content"] == "bad":
                from evalpipe.runners.base import ModelError
                raise ModelError("no")
            return await super().generate(request)

    with pytest.raises(FailFast):
        asyncio.run(run_requests(FailsFirst(), reqs("hang", "hang", "bad"), None,
                                 RunSettings(concurrency=3, timeout_s=60, fail_fast=True)))


def test_expiry_matches_asyncio_timeout_and_leaves_no_timer():
    async def main():
        loop = asyncio.get_running_loop()
        deadlines = Deadlines(loop)
        t0 = loop.time()
        results = await asyncio.gather(
            deadlines.bound(t0 + 0.05, asyncio.sleep(1, "a")),
            deadlines.bound(t0 + 0.10, asyncio.sleep(0.01, "b")),
            deadlines.bound(t0 + 0.15, asyncio.sleep(1, "c")),
            return_exceptions=True)
        assert isinstance(results[0], TimeoutError) and results[1] == "b" and isinstance(results[2], TimeoutError)
        assert loop.time() - t0 < 0.5
        assert deadlines._timer is None and not deadlines._open  # all done: no timer pending, nothing held

    asyncio.run(main())


def test_a_conversation_cancelled_from_outside_is_cancelled_not_timed_out():
    # the tool loop bounds its model turns on one timer per conversation: an outside cancellation (a failing
    # TaskGroup, Ctrl-C) during a turn must propagate, not end the conversation as stop_reason "timeout"
    from evalpipe.runners.tool_loop import run_conversation
    from evalpipe.tools import ToolEnv

    class SlowChat:
        name = "slow"

        async def chat(self, messages, tools, request):
            await asyncio.sleep(3600)

    req = RolloutRequest("s", [{"role": "user", "content": "hi"}], "fp", tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])

    async def main():
        task = asyncio.create_task(run_conversation(SlowChat(), req, ToolEnv({}), 60.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_a_model_turn_past_the_conversation_budget_ends_it_as_a_timeout():
    from evalpipe.runners.tool_loop import run_conversation
    from evalpipe.tools import ToolEnv
    from evalpipe.tools.base import ChatTurn, ToolCall

    class Chat:
        name = "chat"
        turns = 0

        async def chat(self, messages, tools, request):
            self.turns += 1
            await asyncio.sleep(0.05 if self.turns == 1 else 3600)  # the second turn hangs
            return ChatTurn(None, [ToolCall("f", "{}", "c")])

    req = RolloutRequest("s", [{"role": "user", "content": "hi"}], "fp", tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])

    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        gen = await run_conversation(Chat(), req, ToolEnv({}), 0.3)
        assert gen.stop_reason == "timeout" and gen.turns == 1 and len(gen.tool_calls) == 1
        assert 0.3 <= loop.time() - t0 < 1.0
        assert asyncio.current_task().cancelling() == 0  # the bound's cancellation was taken back

    asyncio.run(main())
