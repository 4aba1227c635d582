"""Tools and multi-turn conversations: the broker's normalization, the loop's traces and stops, the shipped
tooluse benchmark end to end through a scripted model (echo `reply: script`), and the trace columns/tables."""
import asyncio
import json
from pathlib import Path

import pytest

from evalpipe.pipeline import stages as pipeline
from evalpipe.project import load_config
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.runners import RunSettings, build_runner
from evalpipe.tools import ToolBroker, ToolEnv, normalize_arguments, normalized_key
from evalpipe.tools.replay import Fixture, read_fixtures
from evalpipe.tools.schema import function_schema, wire_names
from evalpipe.core.types import RolloutRequest

ROOT = Path(__file__).resolve().parents[1]
TOOLUSE = ROOT / "data" / "tooluse"


def broker_with(*entries, allowlist=None):
    return ToolBroker([Fixture(n, normalized_key(n, k), r, f"t:{i}", k) for i, (n, k, r) in enumerate(entries)],
                      allowlist)


# ---- normalization ------------------------------------------------------------------------------------------------
def test_every_normalization_example_of_the_issue_resolves_to_one_fixture():
    b = broker_with(("web.search", {"q": "rope precision"}, {"ok": True, "results": ["x"]}))
    examples = [{"q": "  ROPE  Precision  "}, {"q": "rope precision", "top_k": None}, {"q": "rope precision", "top_k": 3}]
    keys = {normalized_key("web.search", e) for e in examples}
    assert keys == {'{"q":"rope precision","top_k":3}'}
    for e in examples:
        assert b.lookup("web.search", normalized_key("web.search", e)) == (True, {"ok": True, "results": ["x"]})
    assert b.hits == 3 and b.misses == 0


def test_normalization_rules_one_by_one():
    assert normalize_arguments("web.search", {"query": " A\tB\n  C "}) == {"query": "a b c", "top_k": 3}
    assert normalize_arguments("web.search_news", {"q": "x"}) == {"q": "x", "top_k": 3}  # prefix match
    assert normalize_arguments("web.search", {"q": "x", "top_k": 5}) == {"q": "x", "top_k": 5}
    assert normalize_arguments("kb.search", {"q": "X"}) == {"q": "x"}  # top_k only for web.search*
    assert normalize_arguments("math.add", {"a": 1, "b": None}) == {"a": 1}  # nulls dropped
    assert normalize_arguments("math.add", {"name": "KEEP Case"}) == {"name": "KEEP Case"}  # only q/query lowered
    assert normalized_key("f", {"b": 1, "a": {"y": 2, "x": 1}}) == normalized_key("f", {"a": {"x": 1, "y": 2}, "b": 1})


def test_misses_and_disallowed_are_answered_and_counted():
    env = ToolEnv({"fixtures": str(TOOLUSE / "fixtures"), "allowlist": str(TOOLUSE / "allowlist.txt")})
    s = env.session("s1", ["web.search"])

    async def go():
        miss = await s.call("web.search", '{"q": "nothing recorded"}', 0)
        denied = await s.call("shell.exec", '{"command": "ls"}', 0)
        bad = await s.call("web.search", '["not", "an", "object"]', 0)
        broken = await s.call("web.search", '{"q": ', 0)
        hit = await s.call("web.search", {"q": "Capital of AUSTRALIA"}, 1)
        return miss, denied, bad, broken, hit

    miss, denied, bad, broken, hit = asyncio.run(go())
    assert json.loads(miss[1]) == {"ok": False, "error": "fixture_miss"} and miss[0]["fixture_hit"] is False
    assert json.loads(denied[1]) == {"ok": False, "error": "tool_not_allowed"} and denied[0]["error"] == "tool_not_allowed"
    assert bad[0]["arguments_valid"] is False and bad[0]["error"] == "invalid_arguments"
    assert bad[0]["arguments"] == '["not", "an", "object"]' and json.loads(bad[1])["error"] == "invalid_arguments"
    assert broken[0]["arguments_valid"] is False and broken[0]["arguments"] == '{"q": '
    assert hit[0]["fixture_hit"] is True and hit[0]["normalized_key"] == '{"q":"capital of australia","top_k":3}'
    assert [r["call_index"] for r in s.records] == [0, 1, 2, 3, 4]
    assert env.broker.misses == 1 and env.counts["disallowed"] == 1 and env.counts["misses"] == 1


def test_fixture_files_errors_name_the_line(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"name": "f", "key": {"x": 1}, "result": 1}\nnot json\n')
    with pytest.raises(DataError, match=r"a.jsonl:2: not valid JSON"):
        read_fixtures(tmp_path)
    (tmp_path / "a.jsonl").write_text('{"name": "web.search", "key": {"q": "A"}, "result": 1}\n'
                                      '{"name": "web.search", "key": {"q": " a ", "top_k": 3}, "result": 2}\n')
    with pytest.raises(DataError, match=r"a.jsonl:2: .*differs from the one at .*a.jsonl:1"):
        ToolBroker(read_fixtures(tmp_path))


def test_registry_sha256_covers_allowlist_and_normalized_fixtures(tmp_path):
    one = broker_with(("web.search", {"q": "A B"}, 1), ("f", {"x": 1, "y": 2}, 2))
    same = broker_with(("f", {"y": 2, "x": 1}, 2), ("web.search", {"q": " a  b", "top_k": 3}, 1))
    assert one.sha256() == same.sha256()
    assert broker_with(("f", {"x": 1}, 3)).sha256() != broker_with(("f", {"x": 1}, 4)).sha256()
    assert broker_with(allowlist=["f"]).sha256() != broker_with(allowlist=["g"]).sha256()


def test_broker_smoke_check_on_the_shipped_fixtures():
    env = ToolEnv({"fixtures": str(TOOLUSE / "fixtures"), "allowlist": str(TOOLUSE / "allowlist.txt")})
    report = env.broker.check()
    assert report["fixtures"] == 22 and report["variants"] > 100
    assert report["hit_rate"] == 1.0, report["failures"]


# ---- schemas and names --------------------------------------------------------------------------------------------
def lookup(city: str, unit: str = "c", days: list[int] | None = None) -> dict:
    """Look up the weather.

    Args:
        city: The city name.
        unit: c or f.
        days: Which days ahead.
    """
    return {"city": city}


def test_schema_from_signature_and_docstring():
    s = function_schema(lookup, "weather.lookup")["function"]
    assert s["name"] == "weather.lookup" and s["description"] == "Look up the weather."
    p = s["parameters"]
    assert p["required"] == ["city"] and p["additionalProperties"] is False
    assert p["properties"]["city"] == {"type": "string", "description": "The city name."}
    assert p["properties"]["days"]["anyOf"][0] == {"type": "array", "items": {"type": "integer"}}

    def undocumented(x: int):
        return x

    with pytest.raises(ConfigError, match="no docstring"):
        function_schema(undocumented)


def test_wire_names_are_provider_safe_unique_and_reversible():
    m = wire_names(["math.factorial", "math_factorial", "web.search", "ok-name"])
    assert m["math_factorial"] == "math_factorial" and m["math.factorial"] != "math_factorial"
    assert m["web.search"] == "web_search" and m["ok-name"] == "ok-name"
    assert len(set(m.values())) == 4


# ---- the shipped benchmark through the scripted model ---------------------------------------------------------------
def tooluse_config(tmp_path, model_yaml, options=""):
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(f"""
benchmarks:
  tooluse:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}, slice_by: [category]{options}}}
    tools: {{fixtures: {TOOLUSE}/fixtures, allowlist: {TOOLUSE}/allowlist.txt, schemas: {TOOLUSE}/tools.json}}
    metrics: [exact_match]
models:
  m:
{model_yaml}
""")
    return cfg


SCRIPTED = f"    runner: echo\n    reply: script\n    script: {TOOLUSE}/script.jsonl\n"


def run_tooluse(cfg_path, journal, concurrency=4, timeout_s=10.0):
    cfg = load_config(cfg_path)
    split, model = cfg.split("tooluse/test"), cfg.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    df = pipeline.run_rollouts(split, model, prompts, build_runner(model),
                               RunSettings(concurrency=concurrency, timeout_s=timeout_s), journal_file=journal)
    return split, prompts, df


def check_tooluse_traces(prompts, df):
    """What the scripted conversations of data/tooluse must produce, whichever runner replayed them."""
    assert (df["status"] == "ok").all(), df[["sample_id", "error"]]
    by = df.set_index("sample_id")
    expected = {json.loads(l)["id"]: json.loads(l)["answer"] for l in (TOOLUSE / "test.jsonl").read_text().splitlines()}
    assert dict(zip(df["sample_id"], df["prediction"])) == expected
    assert by.loc["t01", "turns"] == 2 and by.loc["t11", "turns"] == 3 and by.loc["t29", "turns"] == 1
    assert set(df["stop_reason"]) == {"final"}
    assert by.loc["t29", "tool_calls"] == 0  # a control: no tools used
    calls = pipeline.tool_calls_frame(df)
    assert len(calls) == 43
    t18 = calls[calls["sample_id"] == "t18"]  # three parallel calls in one reply, run in order
    assert list(t18["turn"]) == [0, 0, 0] and list(t18["call_index"]) == [0, 1, 2]
    assert [json.loads(a)["city"] for a in t18["arguments"]] == ["Paris", "Oslo", "Lima"]
    assert [json.loads(r)["temp_c"] for r in t18["result"]] == [14, 3, 19]
    assert set(calls["name"]) == {"web.search", "weather.current", "math.factorial", "stocks.quote", "shell.exec"}
    misses = calls[calls["error"] == "fixture_miss"]
    assert sorted(misses["sample_id"]) == ["t23", "t24"] and not misses["fixture_hit"].any()
    assert list(calls.loc[calls["error"] == "tool_not_allowed", "sample_id"]) == ["t25"]
    assert by.loc["t23", "fixture_misses"] == 1 and int(df["fixture_misses"].sum()) == 2
    bad = calls[calls["arguments_valid"] == False]  # noqa: E712
    assert list(bad["sample_id"]) == ["t28"] and bad["arguments"].item() == '{"n": 7'
    assert by.loc["t28", "invalid_args"] == 1
    t26 = calls[calls["sample_id"] == "t26"]  # a recorded tool error, then the recovery
    assert list(t26["error"]) == ["upstream_unavailable", None] and list(t26["turn"]) == [0, 1]
    t02 = calls[calls["sample_id"] == "t02"].iloc[0]
    assert json.loads(t02["arguments"]) == {"q": "  TALLEST mountain in   Africa "}  # as the model sent it
    assert t02["normalized_key"] == '{"q":"tallest mountain in africa","top_k":3}' and t02["fixture_hit"]
    traj = json.loads(by.loc["t17", "trajectory"])
    assert [m["role"] for m in traj] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c["function"]["name"] for c in traj[1]["tool_calls"]] == ["weather.current", "weather.current"]
    assert traj[2]["tool_call_id"] == traj[1]["tool_calls"][0]["id"] and traj[2]["name"] == "weather.current"
    assert traj[-1] == {"role": "assistant", "content": "Nairobi"}
    assert json.loads(prompts.set_index("sample_id").loc["t01", "tools"])[0]["function"]["name"] == "web.search"
    return calls


def test_tooluse_benchmark_through_the_scripted_model(tmp_path, home):
    split, prompts, df = run_tooluse(tooluse_config(tmp_path, SCRIPTED), tmp_path / "j.sqlite")
    check_tooluse_traces(prompts, df)
    assert df.attrs["tool_registry_sha256"] == ToolEnv.for_split(split).tool_registry_sha256()
    judged = pipeline.judge(split, prompts, df)
    assert judged["score"].mean() == 1.0
    # a second run comes from the journal, traces included
    _, _, again = run_tooluse(tooluse_config(tmp_path, SCRIPTED), tmp_path / "j.sqlite")
    assert again["cached"].all()
    assert list(again["tool_trace"]) == list(df["tool_trace"])


def test_judge_receives_the_traces(tmp_path, home):
    from evalpipe.metrics.base import JudgeInput, Metric
    from evalpipe.core.types import Score

    seen: dict[str, JudgeInput] = {}

    class Spy(Metric):
        name = "spy"

        def score(self, item):
            seen[item.sample_id] = item
            return Score(value=1.0)

    split, prompts, df = run_tooluse(tooluse_config(tmp_path, SCRIPTED), tmp_path / "j.sqlite")
    from evalpipe.metrics import base as mbase

    mbase.register_metric("spy_tools_test", lambda **kw: Spy(), replace=True)
    pipeline.judge(split, prompts, df, metrics=["spy_tools_test"])
    item = seen["t26"]
    assert [c["name"] for c in item.tool_calls] == ["stocks.quote", "web.search"]
    assert item.stop_reason == "final" and item.trajectory[-1]["content"] == "41.20"
    assert [t["function"]["name"] for t in item.tools] == ["web.search", "weather.current", "math.factorial",
                                                          "stocks.quote"]


def test_loop_limits_stop_the_conversation(tmp_path, home):
    script = tmp_path / "loop.jsonl"
    forever = [{"content": None, "tool_calls": [{"name": "math.factorial", "arguments": {"n": 5}},
                                                 {"name": "math.factorial", "arguments": {"n": 7}}]}] * 20
    script.write_text("".join(json.dumps({"sample_id": f"t{i:02d}", "turns": forever}) + "\n" for i in range(1, 32)))
    model = f"    runner: echo\n    reply: script\n    script: {script}\n"
    _, _, df = run_tooluse(tooluse_config(tmp_path, model, ", max_turns: 3"), tmp_path / "a.sqlite")
    assert set(df["stop_reason"]) == {"max_turns"} and set(df["turns"]) == {3} and set(df["tool_calls"]) == {6}
    assert df["prediction"].isna().all() and (df["status"] == "ok").all()
    _, _, df = run_tooluse(tooluse_config(tmp_path, model, ", max_tool_calls: 3"), tmp_path / "b.sqlite")
    assert set(df["stop_reason"]) == {"max_tool_calls"} and set(df["tool_calls"]) == {3} and set(df["turns"]) == {2}


def test_time_budget_ends_a_conversation_as_a_retryable_error_with_its_traces(tmp_path, home):
    from evalpipe.runners.driver import run_requests
    from evalpipe.tools.base import ChatTurn, ToolCall

    class Slow:
        name, model = "slow", None

        async def chat(self, messages, tools, request):
            await asyncio.sleep(0.3)
            return ChatTurn(None, [ToolCall("f", "{}", "c")])

        async def start(self):
            pass

        async def aclose(self):
            pass

    class R(Slow):
        default_concurrency = 1
        retry_timeouts = True

    env = ToolEnv({})
    req = RolloutRequest("s", [{"role": "user", "content": "hi"}], "fp", tools=[
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    rows = asyncio.run(run_requests(R(), [req], None, RunSettings(timeout_s=1.0), tools=env))
    row = rows[0]
    assert row["status"] == "error" and row["error"].startswith("conversation timed out after 1s")
    assert row["stop_reason"] == "timeout" and row["turns"] >= 2 and row["tool_calls"] >= 2


def test_one_shot_samples_keep_their_fingerprints(tmp_path, home):
    """Samples without tools: no trace columns filled, and the fingerprint is the one from before tools existed."""
    from evalpipe.core.fingerprint import fingerprint

    cfg_path = tmp_path / "evals.yaml"
    cfg_path.write_text(f"""
benchmarks:
  smoke:
    adapter: file
    splits: {{test: {{path: {ROOT}/data/smoke/test.jsonl}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
models:
  perfect: {{runner: echo, reply: target}}
""")
    cfg = load_config(cfg_path)
    split, model = cfg.split("smoke/test"), cfg.model("perfect")
    prompts = pipeline.build_prompts(split, "perfect", pipeline.build_dataset(split))
    assert prompts["tools"].isna().all()
    runner = build_runner(model)
    reqs = pipeline.rollout_requests(runner, prompts)
    r = prompts.iloc[0]
    assert reqs[0].tools is None
    assert reqs[0].fingerprint == fingerprint({"runner": runner.identity(), "prompt": r.prompt_fingerprint,
                                               "sample": r.sample_id})


def test_fingerprints_cover_fixtures_schemas_and_loop_limits(tmp_path, home):
    import shutil

    fixtures = tmp_path / "fixtures"
    shutil.copytree(TOOLUSE / "fixtures", fixtures)

    def config(options="", schemas=TOOLUSE / "tools.json"):
        cfg = tooluse_config(tmp_path, SCRIPTED, options)
        cfg.write_text(cfg.read_text().replace(f"fixtures: {TOOLUSE}/fixtures", f"fixtures: {fixtures}")
                       .replace(f"schemas: {TOOLUSE}/tools.json", f"schemas: {schemas}"))
        return cfg

    journal = tmp_path / "j.sqlite"
    _, _, df = run_tooluse(config(), journal)
    assert not df["cached"].any()
    _, _, df = run_tooluse(config(), journal)
    assert df["cached"].all()  # nothing changed: nothing re-runs
    _, _, df = run_tooluse(config(", max_turns: 5"), journal)
    assert not df["cached"].any()  # a loop limit changed: every conversation re-runs
    _, _, df = run_tooluse(config(", max_turns: 5"), journal)
    assert df["cached"].all()
    path = fixtures / "tools.jsonl"
    path.write_text(path.read_text().replace('"temp_c": 3,', '"temp_c": 4,'))
    _, _, df = run_tooluse(config(", max_turns: 5"), journal)
    assert not df["cached"].any()  # a fixture changed (tool_registry_sha256): conversations re-run
    assert df.set_index("sample_id").loc["t11", "prediction"] == "28"  # the script does not read results
    schemas = json.loads((TOOLUSE / "tools.json").read_text())
    schemas[0]["function"]["description"] = "Search the web (edited)."
    (tmp_path / "tools.json").write_text(json.dumps(schemas))
    _, _, df = run_tooluse(config(", max_turns: 5", tmp_path / "tools.json"), journal)
    assert not df["cached"].any()  # the schemas are part of the prompt fingerprint


def test_every_model_turn_of_a_conversation_takes_its_rate_limit_share(tmp_path, home):
    from evalpipe.runners.driver import attempt

    class CountingLimiter:
        def __init__(self):
            self.acquired, self.settled = [], []

        async def acquire(self, estimate):
            self.acquired.append(estimate)

        def settle(self, estimate, used):
            self.settled.append((estimate, used))

    cfg = load_config(tooluse_config(tmp_path, SCRIPTED))
    split, model = cfg.split("tooluse/test"), cfg.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    env = ToolEnv.for_split(split)
    runner = build_runner(model)
    req = [r for r in pipeline.rollout_requests(runner, prompts, env) if r.sample_id == "t11"][0]
    lim = CountingLimiter()
    row = asyncio.run(attempt(runner, req, RunSettings(timeout_s=10), lim, 16, env))
    assert row["status"] == "ok" and row["turns"] == 3
    assert len(lim.acquired) == 3 and len(lim.settled) == 3  # one per model turn, not one per conversation
    assert lim.acquired[1] > lim.acquired[0]  # later turns carry the growing conversation


def test_tool_output_is_capped_with_a_note(tmp_path):
    (tmp_path / "f.jsonl").write_text(json.dumps({"name": "big", "key": {}, "result": {"text": "x" * 500}}) + "\n")
    env = ToolEnv({"fixtures": str(tmp_path)}, {"tool_output_cap": 100})
    rec, content = asyncio.run(env.session("s", ["big"]).call("big", "", 0))
    assert content.startswith('{"text": "xxx') and len(content) < 160
    assert content.endswith("[output truncated: 412 more characters]") and rec["result"] == content
    assert rec["arguments"] == "" and rec["arguments_valid"] and rec["fixture_hit"]  # "" means no arguments
