"""The shipped tooluse benchmark against a loopback OpenAI-compatible mock that answers with tool calls: through
the fast path and through litellm (same traces), through the Dagster assets (the `tool_calls` table in the
warehouse, counts in the UI metadata), and kill -9 in the middle of a multi-turn run."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from evalpipe.tools.schema import wire_names
from tests.test_tools import TOOLUSE, check_tooluse_traces, run_tooluse, tooluse_config

ROOT = Path(__file__).resolve().parents[1]


def scripted_mock(latency: float = 0.0) -> MockLLM:
    """The scripted conversations of data/tooluse, keyed by question, in the names a provider sees."""
    offered = [t["function"]["name"] for t in json.loads((TOOLUSE / "tools.json").read_text())]
    to_wire = wire_names(offered)
    questions = {json.loads(l)["id"]: json.loads(l)["question"] for l in (TOOLUSE / "test.jsonl").read_text().splitlines()}
    mock = MockLLM(latency=latency)
    for line in (TOOLUSE / "script.jsonl").read_text().splitlines():
        item = json.loads(line)
        turns = [{"content": t.get("content"), "tool_calls": [{**c, "name": to_wire.get(c["name"], c["name"])}
                                                               for c in t.get("tool_calls") or []]}
                 for t in item["turns"]]
        mock.tool_script[questions[item["sample_id"]]] = turns
    return mock


def api_model(url: str, fast: bool) -> str:
    return (f"    runner: litellm\n    model: hosted_vllm/mock\n    api_base: {url}\n"
            f"    params: {{temperature: 0}}\n    fast_path: {'true' if fast else 'false'}\n")


@pytest.mark.parametrize("fast", [True, False], ids=["fast_path", "litellm"])
def test_tooluse_against_a_mock_that_answers_with_tool_calls(tmp_path, home, fast):
    with serve_in_thread(scripted_mock()) as (mock, url):
        split, prompts, df = run_tooluse(tooluse_config(tmp_path, api_model(url, fast)), tmp_path / "j.sqlite")
    check_tooluse_traces(prompts, df)
    # the provider only ever saw safe names; the traces only the dataset's
    sent = {t["function"]["name"] for body in mock.bodies for t in body.get("tools") or []}
    assert sent == {"web_search", "weather_current", "math_factorial", "stocks_quote"}
    follow_up = [b for b in mock.bodies if b["messages"][-1]["role"] == "tool"]
    assert follow_up and all("." not in c["function"]["name"] for b in follow_up for m in b["messages"]
                             if m.get("tool_calls") for c in m["tool_calls"] if c["function"]["name"] != "shell.exec")
    scripted_turns = sum(len(json.loads(l)["turns"]) for l in (TOOLUSE / "script.jsonl").read_text().splitlines())
    assert len(mock.bodies) == int(df["turns"].sum()) == scripted_turns == 67  # one request per model turn
    assert df["input_tokens"].notna().all() and (df["input_tokens"] > 0).all()


@pytest.mark.slow
def test_the_tool_calls_table_and_ui_counts_through_the_assets(tmp_path, home, instance, write_config):
    from dagster import AssetKey

    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from evalpipe.store.warehouse import Warehouse

    write_config(f"""
benchmarks:
  tooluse:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
    tools: {{fixtures: {TOOLUSE}/fixtures, allowlist: {TOOLUSE}/allowlist.txt, schemas: {TOOLUSE}/tools.json}}
    metrics: [exact_match]
models:
  scripted: {{runner: echo, reply: script, script: {TOOLUSE}/script.jsonl}}
""")
    result = evaluate(load_config(), ["tooluse/test"], ["scripted"], instance=instance)
    assert all(p.success for p in result.partitions), result
    wh = Warehouse(home / "warehouse.duckdb")
    calls = wh.query("SELECT * FROM tool_calls WHERE benchmark_split = 'tooluse/test' ORDER BY sample_id, call_index")
    assert len(calls) == 43 and set(calls["model"]) == {"scripted"}
    per = wh.query("SELECT name, count(*) n, sum(CASE WHEN fixture_hit THEN 1 ELSE 0 END) hits FROM tool_calls "
                   "GROUP BY name ORDER BY name")
    assert per.set_index("name")["n"].to_dict() == {"math.factorial": 12, "shell.exec": 1, "stocks.quote": 3,
                                                    "weather.current": 15, "web.search": 12}
    roll = wh.query("SELECT sample_id, turns, tool_calls, fixture_misses, stop_reason FROM rollouts "
                    "WHERE sample_id = 't23'")
    assert roll.iloc[0].to_dict() == {"sample_id": "t23", "turns": 2, "tool_calls": 1, "fixture_misses": 1,
                                      "stop_reason": "final"}
    mat = instance.get_latest_materialization_event(AssetKey("rollouts")).asset_materialization
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["tool_calls"] == 43 and meta["fixture_misses"] == 2 and meta["tools_not_allowed"] == 1
    assert meta["invalid_tool_args"] == 1 and meta["stop_reasons"] == {"final": 31}
    metrics = wh.query("SELECT value FROM metrics WHERE benchmark_split = 'tooluse/test' AND metric = 'exact_match' "
                       "AND slice = 'all'")
    assert metrics["value"].item() == 1.0
    # the broker smoke check ran with the dataset
    from dagster import DagsterEventType, EventRecordsFilter

    evals = [r.event_log_entry.dagster_event.event_specific_data
             for r in instance.get_event_records(EventRecordsFilter(DagsterEventType.ASSET_CHECK_EVALUATION))]
    check = [e for e in evals if e.check_name == "tool_fixtures"]
    assert check and check[-1].passed and check[-1].metadata["hit_rate"].value == 1.0
    # the run artifacts' events.jsonl carries every model turn and tool call
    folder = instance.get_latest_materialization_event(AssetKey("metrics")).asset_materialization.metadata["artifacts"].value
    events = [json.loads(l) for l in (Path(folder) / "events.jsonl").read_text().splitlines()]
    t17 = [(e["type"], e.get("role"), e.get("name")) for e in events if e["sample_id"] == "t17"]
    assert t17 == [("message", "user", None), ("message", "assistant", None),
                   ("tool_call", None, "weather.current"), ("message", "tool", "weather.current"),
                   ("tool_call", None, "weather.current"), ("message", "tool", "weather.current"),
                   ("message", "assistant", None)]
    call = [e for e in events if e["sample_id"] == "t17" and e["type"] == "tool_call"][1]
    assert json.loads(call["arguments"]) == {"city": "Tokyo"} and call["fixture_hit"] is True and call["turn"] == 0


CHILD = """
import sys
sys.path.insert(0, {root!r})
from tests.test_tools import run_tooluse
run_tooluse({cfg!r}, {journal!r}, concurrency=2)
"""


def journaled(journal: Path) -> set[str]:
    if not journal.exists():
        return set()
    con = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in con.execute("SELECT sample_id FROM done")}
    except sqlite3.OperationalError:
        return set()
    finally:
        con.close()


@pytest.mark.slow
def test_kill_9_mid_run_reruns_only_unfinished_conversations(tmp_path, home):
    with serve_in_thread(scripted_mock(latency=0.05)) as (mock, url):
        cfg = tooluse_config(tmp_path, api_model(url, True))
        journal = tmp_path / "journal.sqlite"
        child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), cfg=str(cfg), journal=str(journal))],
                                 env={**os.environ, "DAGSTER_HOME": str(home)})
        deadline = time.time() + 60
        while len(journaled(journal)) < 8:
            assert child.poll() is None, "the run ended before it could be killed"
            assert time.time() < deadline, "the run made no progress"
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
        child.wait()
        done_before = journaled(journal)
        log_before = list(mock.log)
        assert 8 <= len(done_before) < 31, "killed midway"
        split, prompts, df = run_tooluse(cfg, journal)
        log_after = mock.log[len(log_before):]
    check_tooluse_traces(prompts, df)
    questions = dict(zip(prompts["sample_id"], prompts["prompt_text"].str.split("\n", n=1).str[1]))
    rerun = {q for q, _ in log_after}
    for sid, q in questions.items():
        if sid in done_before:
            assert q not in rerun, f"{sid} finished before the kill but was sent again"
            assert df.set_index("sample_id").loc[sid, "cached"]
        else:  # a conversation cut in the middle starts again from its first turn, and runs to the end
            turns = [t for p, t in log_after if p == q]
            assert turns == list(range(len(turns))) and turns, f"{sid}: {turns}"
    interrupted = {p for p, _ in log_before} - {questions[s] for s in done_before}
    assert interrupted, "some conversation was cut in the middle"
    assert set(df.loc[~df["cached"], "sample_id"]) == set(questions) - done_before


@pytest.mark.slow
def test_the_tools_resource_switches_a_run_to_live_tools(tmp_path, home, instance, write_config):
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from evalpipe.store.warehouse import Warehouse
    from resources import ToolsResource

    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps({"sample_id": f"t{i:02d}", "turns": [
        {"tool_calls": [{"name": "math.add", "arguments": {"a": i, "b": 1}}]}, {"content": str(i + 1)}]}) + "\n"
        for i in range(1, 32)))
    write_config(f"""
benchmarks:
  tooluse:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl, limit: 3}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
    tools:
      fixtures: {TOOLUSE}/fixtures
      live: [{{function: 'tests.test_tools_live:add_numbers', name: math.add}}]
models:
  scripted: {{runner: echo, reply: script, script: {script}}}
""")
    result = evaluate(load_config(), ["tooluse/test"], ["scripted"], instance=instance,
                      resources={"tools": ToolsResource(mode="live")})
    assert all(p.success for p in result.partitions), result
    calls = Warehouse(home / "warehouse.duckdb").query("SELECT sample_id, result, fixture_hit FROM tool_calls ORDER BY 1")
    assert [json.loads(r) for r in calls["result"]] == [{"sum": 2}, {"sum": 3}, {"sum": 4}]
    assert calls["fixture_hit"].isna().all()
