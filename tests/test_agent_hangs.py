"""Agents that hang or call tools the wrong way never hang a run or the process: `timeout_s` bounds every sample
(sync agents, async agents that block their loop, async agents calling the sync `task.call_tool`), and a hung
agent's thread never keeps the interpreter from exiting. Each case runs in its own process under a hard timeout,
so a regression fails here instead of hanging the suite."""
import pytest

from tests.helpers.exits import run_script

ROWS = "[{'id': 'q1', 'question': '2 + 3', 'answer': '5'}, {'id': 'q2', 'question': '4 + 4', 'answer': '8'}]"

RUNNER = """
import asyncio, time
from evalpipe.core.config import ModelConfig
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.runners.function import register_function
from evalpipe.core.types import RolloutRequest

def run(fn, timeout_s, n=1, concurrency=None):
    model = ModelConfig(key="a", runner="function", model="a", options={"function": register_function(fn)})
    reqs = [RolloutRequest(sample_id=f"s{i}", messages=[{"role": "user", "content": "q"}], fingerprint=f"f{i}")
            for i in range(n)]
    start = time.perf_counter()
    rows = asyncio.run(run_requests(build_runner(model), reqs, None, RunSettings(timeout_s=timeout_s, max_retries=0,
                                                                                   concurrency=concurrency)))
    return [r["status"] for r in rows], [r["error"] for r in rows], time.perf_counter() - start
"""


def test_a_hung_sync_agent_times_out_and_the_process_still_exits(home):
    run = run_script(RUNNER + """
def hangs(task):
    time.sleep(1000)
status, errors, took = run(hangs, 1)
report(status=status, errors=errors, took=took)
""", timeout_s=30)
    assert run.reports, run.output
    assert run.reports[0]["status"] == ["error"] and run.reports[0]["errors"] == ["timeout after 1s"]
    assert run.reports[0]["took"] < 5
    assert run.returncode == 0 and run.exit_after_s < 5, run.output


def test_an_async_agent_that_blocks_its_loop_is_still_bounded_by_timeout_s(home):
    run = run_script(RUNNER + """
async def blocks(task):
    time.sleep(1000)  # a sync call inside an async agent: the agent's loop is blocked
async def fine(task):
    return "ok"
status, errors, took = run(blocks, 1)
report(status=status, errors=errors, took=took)
status, errors, took = run(fine, 5)  # a fresh run (and loop) after the hung one
report(status=status, errors=errors, took=took)
""", timeout_s=30)
    assert len(run.reports) == 2, run.output
    assert run.reports[0]["status"] == ["error"] and run.reports[0]["errors"] == ["timeout after 1s"]
    assert run.reports[0]["took"] < 5 and run.reports[1]["status"] == ["ok"]
    assert run.returncode == 0 and run.exit_after_s < 5, run.output


def test_samples_after_a_hung_async_sample_still_run():
    run = run_script(RUNNER + """
import itertools
count = itertools.count()
async def first_hangs(task):
    if next(count) == 0:
        time.sleep(1000)
    await asyncio.sleep(0.01)
    return "ok"
status, errors, took = run(first_hangs, 2, n=3, concurrency=1)
report(status=status, errors=errors, took=took)
""", timeout_s=30)
    assert run.reports, run.output
    # the first blocks the agents' loop for good; the next ones run on a fresh loop
    assert run.reports[0]["status"] == ["error", "ok", "ok"], run.reports[0]["errors"]
    assert run.reports[0]["took"] < 6
    assert run.returncode == 0 and run.exit_after_s < 5, run.output


def evaluate_script(agent: str, tool: str = "return a + b") -> str:
    return f"""
import evalpipe, time

@evalpipe.tool
def add(a: int, b: int) -> int:
    \"\"\"Add two integers.

    Args:
        a: the first
        b: the second
    \"\"\"
    {tool}

{agent}

start = time.perf_counter()
res = evalpipe.evaluate(agent=solver, dataset={ROWS}, metrics=["exact_match"], tools=[add], name="hangs",
                        timeout_s=3)
report(status=res.samples["status"].tolist(), errors=res.samples["error"].tolist(),
       predictions=res.samples["prediction"].tolist(), took=time.perf_counter() - start)
"""


@pytest.mark.slow
def test_an_async_agent_calling_the_sync_call_tool_works(home):
    run = run_script(evaluate_script("""
async def solver(sample):
    a, _, b = sample.question.split()
    return str(sample.call_tool("add", {"a": int(a), "b": int(b)}))
"""), timeout_s=180)
    assert run.reports, run.output[-3000:]
    got = run.reports[0]
    assert got["status"] == ["ok", "ok"], got["errors"]
    assert sorted(got["predictions"]) == ["5", "8"]
    assert run.returncode == 0 and run.exit_after_s < 10, run.output[-3000:]


@pytest.mark.slow
def test_evaluate_returns_timeout_for_a_hung_sync_agent_and_the_process_exits(home):
    run = run_script(evaluate_script("""
def solver(sample):
    if sample.question == "2 + 3":
        time.sleep(1000)
    return "8"
"""), timeout_s=180)
    assert run.reports, run.output[-3000:]
    got = run.reports[0]
    # (a sample offered tools is one conversation: its timeout is worded as the conversation's)
    assert got["status"] == ["error", "ok"] and "timed out after 3s" in got["errors"][0], got
    assert run.returncode == 0 and run.exit_after_s < 10, run.output[-3000:]


@pytest.mark.slow
def test_a_hung_tool_is_a_tool_timeout_and_the_process_exits(home):
    run = run_script(evaluate_script("""
def solver(sample):
    return str(sample.call_tool("add", {"a": 1, "b": 2}))
""", tool="time.sleep(1000)").replace("@evalpipe.tool\n", "@evalpipe.tool(timeout_s=1)\n"), timeout_s=180)
    assert run.reports, run.output[-3000:]
    got = run.reports[0]
    assert got["status"] == ["ok", "ok"], got["errors"]
    assert "timeout" in got["predictions"][0]
    assert run.returncode == 0 and run.exit_after_s < 10, run.output[-3000:]
