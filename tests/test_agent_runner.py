"""The agent runner: a user's callable per sample, isolated (own working dir, own timeout), events captured."""
import asyncio
import json
import time

import pytest

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.core.types import RolloutRequest


def agent(name, **options):
    return build_runner(ModelConfig(key="a", runner="agent", model=f"tests.agents.example_agent:{name}",
                                    options=options))


def req(i, question, files=()):
    return RolloutRequest(sample_id=f"s{i}", messages=[{"role": "system", "content": "be brief"},
                                                       {"role": "user", "content": question}],
                          fingerprint=f"f{i}", files=list(files), metadata={"i": i})


def run(runner, requests, **kw):
    return asyncio.run(run_requests(runner, requests, None, RunSettings(**{"max_retries": 0, **kw})))


def test_each_sample_gets_its_own_workdir_with_copies_of_its_files(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("alpha\n")
    b.write_text("beta\n")
    rows = run(agent("file_agent"), [req(0, "what is in a?", [a]), req(1, "what is in b?", [b]), req(2, "none")],
               concurrency=3)
    assert [r["raw_output"] for r in rows] == ["ALPHA", "BETA", "none"]
    assert a.read_text() == "alpha\n" and b.read_text() == "beta\n"  # the agent changed only its copies
    traj = json.loads(rows[0]["trajectory"])
    kinds = [t["type"] for t in traj]
    assert kinds.count("message") == 4 and "tool_call" in kinds and kinds[-3:] == ["start", "tool", "seen"]
    seen = [t for t in traj if t["type"] == "seen"][0]["files"]
    assert seen == ["a.txt"]  # nothing from the other samples' runs leaked into this directory
    assert (rows[0]["input_tokens"], rows[0]["output_tokens"], rows[0]["cost"]) == (10, 2, 0.001)


def test_async_agent():
    rows = run(agent("async_agent"), [req(0, "abc"), req(1, "xyz")])
    assert [r["raw_output"] for r in rows] == ["cba", "zyx"]


def test_timeout_fails_only_the_slow_sample():
    start = time.perf_counter()
    rows = run(agent("slow_agent"), [req(0, "slow one"), req(1, "fast one")], concurrency=2, timeout_s=0.5,
               max_retries=3)
    assert time.perf_counter() - start < 3
    assert rows[0]["status"] == "error" and rows[0]["error"] == "timeout after 0.5s" and rows[0]["attempts"] == 1
    assert rows[1]["status"] == "ok" and rows[1]["raw_output"] == "done"


def test_agent_exceptions_are_recorded():
    rows = run(agent("broken_agent"), [req(0, "q")])
    assert rows[0]["status"] == "error" and rows[0]["error"] == "agent raised ValueError: cannot handle s0"


@pytest.mark.slow
def test_process_isolation_sets_cwd_and_kills_at_timeout(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("x")
    start = time.perf_counter()
    rows = run(agent("cwd_agent", isolation="process"), [req(0, "q", [a]), req(1, "slow")],
               concurrency=2, timeout_s=6)
    assert rows[0]["status"] == "ok" and rows[0]["raw_output"] == str(["a.txt", "out.txt"])
    assert rows[1]["error"] == "timeout after 6s" and time.perf_counter() - start < 15


def test_bad_agent_spec_is_a_config_error():
    with pytest.raises(ConfigError, match="package.module:callable"):
        build_runner(ModelConfig(key="a", runner="agent", model="no_colon"))
    with pytest.raises(ConfigError, match="cannot import"):
        build_runner(ModelConfig(key="a", runner="agent", model="nope.nothing:here"))


def test_the_sync_call_tool_on_the_runs_own_loop_is_a_clear_error_not_a_hang():
    from evalpipe.runners.agent import ToolHandle

    import threading

    raised = []

    async def on_the_loop():
        handle = ToolHandle(session=None, loop=asyncio.get_running_loop())
        try:
            handle.call_sync("add", {"a": 1})
        except RuntimeError as exc:
            raised.append(str(exc))

    # in a daemon thread: a regression blocks that thread's loop for good, not the suite
    t = threading.Thread(target=lambda: asyncio.run(on_the_loop()), daemon=True)
    t.start()
    t.join(10)
    assert raised and "await task.acall_tool(...)" in raised[0]


def test_async_agents_run_off_the_runs_loop_and_sync_agents_on_daemon_threads():
    import threading

    seen = {}

    def sync_agent(task):
        seen["sync"] = threading.current_thread().daemon
        return "s"

    async def async_agent(task):
        seen["async"] = (threading.current_thread().daemon, asyncio.get_running_loop())
        return "a"

    from evalpipe.runners.function import register_function

    for fn in (sync_agent, async_agent):
        runner = build_runner(ModelConfig(key="f", runner="function", model="f",
                                          options={"function": register_function(fn)}))

        async def go():
            rows = await run_requests(runner, [req(0, "q")], None, RunSettings(max_retries=0))
            return rows, asyncio.get_running_loop()

        rows, loop = asyncio.run(go())
        assert rows[0]["status"] == "ok"
    assert seen["sync"] is True
    daemon, agent_loop = seen["async"]
    assert daemon is True and agent_loop is not loop


def test_an_agent_that_raises_cancelled_error_fails_its_sample_only():
    from evalpipe.runners.function import register_function

    async def gives_up(task):
        if task.id == "s0":
            raise asyncio.CancelledError()
        return "fine"

    runner = build_runner(ModelConfig(key="f", runner="function", model="f",
                                      options={"function": register_function(gives_up)}))
    rows = run(runner, [req(0, "q"), req(1, "q")], concurrency=1)
    assert [r["status"] for r in rows] == ["error", "ok"] and rows[0]["error"] == "agent raised CancelledError"
