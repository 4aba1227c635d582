"""Live tools: Python functions (`module:function`), the stateful `python` tool and the opt-in `bash` tool in
the code sandbox; replay vs live mode; tool schemas from a dataset column; JSON tool blocks of text models."""
import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.pipeline import stages as pipeline
from evalpipe.project import load_config
from evalpipe.core.errors import ConfigError
from evalpipe.runners import RunSettings, build_runner
from evalpipe.tools import ToolEnv
from evalpipe.tools.textcalls import parse_tool_blocks, render_for_text_model

ROOT = Path(__file__).resolve().parents[1]


def add_numbers(a: int, b: int = 0) -> dict:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return {"sum": a + b}


async def explode(reason: str) -> str:
    """Fail on purpose.

    Args:
        reason: What to say.
    """
    raise ValueError(reason)


def setup(tmp_path, rows, script, tools_yaml, extra_cols=""):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sc = tmp_path / "script.jsonl"
    sc.write_text("".join(json.dumps({"sample_id": k, "turns": v}) + "\n" for k, v in script.items()))
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(f"""
benchmarks:
  b:
    adapter: file
    splits: {{test: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id{extra_cols}}}}}
{tools_yaml}
models:
  m: {{runner: echo, reply: script, script: {sc}}}
""")
    return cfg


def run(cfg, tmp_path, mode=None, name="j"):
    c = load_config(cfg)
    split, model = c.split("b/test"), c.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    df = pipeline.run_rollouts(split, model, prompts, build_runner(model), RunSettings(timeout_s=60),
                               journal_file=tmp_path / f"{name}.sqlite", tools_mode=mode)
    return prompts, df, pipeline.tool_calls_frame(df)


def call(name, **args):
    return {"name": name, "arguments": args}


def test_python_function_tools_live_and_replayed(tmp_path, home):
    fixtures = tmp_path / "fx"
    fixtures.mkdir()
    (fixtures / "f.jsonl").write_text(json.dumps({"name": "math.add", "key": {"a": 2, "b": 3},
                                                  "result": {"sum": 5, "from": "fixture"}}) + "\n")
    tools = (f"    tools:\n      fixtures: {fixtures}\n      live:\n"
             f"        - {{function: 'tests.test_tools_live:add_numbers', name: math.add}}\n"
             f"        - tests.test_tools_live:explode\n")
    script = {"s1": [{"tool_calls": [call("math.add", a=2, b=3), call("math.add", a=1), call("math.add", a="x"),
                                     call("explode", reason="boom")]}, {"content": "5"}]}
    cfg = setup(tmp_path, [{"id": "s1", "q": "add", "a": "5"}], script, tools)
    prompts, df, calls = run(cfg, tmp_path, mode="live")
    offered = {t["function"]["name"]: t["function"] for t in json.loads(prompts["tools"].item())}
    assert offered["math.add"]["parameters"]["required"] == ["a"]
    assert offered["math.add"]["description"] == "Add two integers."
    assert [json.loads(r) for r in calls["result"][:2]] == [{"sum": 5}, {"sum": 1}]
    assert calls["fixture_hit"].isna().all()  # live tools: no fixture
    assert calls["error"].tolist()[2:] == ["invalid_arguments", "ValueError: boom"]
    assert json.loads(calls["result"].iloc[3]) == {"ok": False, "error": "ValueError: boom"}
    assert df["prediction"].item() == "5"
    # replay mode (the default): the same calls answered from fixtures only
    _, df2, calls2 = run(cfg, tmp_path, name="k")
    assert json.loads(calls2["result"].iloc[0]) == {"sum": 5, "from": "fixture"}
    assert calls2["fixture_hit"].tolist()[:2] == [True, False] and calls2["error"].tolist()[1] == "fixture_miss"
    assert df2["fingerprint"].item() != df["fingerprint"].item()  # the mode is part of the fingerprint


def test_stateful_python_tool_in_the_sandbox(tmp_path, home):
    script = {"s1": [{"tool_calls": [call("python", code="x = 6 * 7\nprint('set')")]},
                     {"tool_calls": [call("python", code="x + 1")]},
                     {"tool_calls": [call("python", code="1/0")]},
                     {"content": "43"}]}
    cfg = setup(tmp_path, [{"id": "s1", "q": "compute", "a": "43"}], script, "    tools: {python: true}")
    prompts, df, calls = run(cfg, tmp_path)
    assert [t["function"]["name"] for t in json.loads(prompts["tools"].item())] == ["python"]
    results = [json.loads(r) for r in calls["result"]]
    assert results[0]["stdout"].strip() == "set"
    assert str(results[1]["value"]) == "43", results  # state kept across calls
    assert "ZeroDivisionError" in results[2]["error"] and "ZeroDivisionError" in calls["error"].iloc[2]
    assert calls["fixture_hit"].isna().all() and df["prediction"].item() == "43"


def test_bash_is_off_unless_enabled(tmp_path, home):
    from evalpipe.sandbox import resolve_backend

    script = {"s1": [{"tool_calls": [call("bash", command="echo hi from bash")]}, {"content": "done"}]}
    cfg = setup(tmp_path, [{"id": "s1", "q": "shell", "a": "done"}], script, "    tools: {python: true}")
    _, _, calls = run(cfg, tmp_path)
    assert calls["error"].item() == "tool_not_allowed"
    if resolve_backend() == "process":
        pytest.skip("bash needs an OS-level sandbox (bwrap or docker)")
    cfg = setup(tmp_path, [{"id": "s1", "q": "shell", "a": "done"}], script, "    tools: {bash: true}")
    _, _, calls = run(cfg, tmp_path, name="k")
    assert json.loads(calls["result"].item())["stdout"].strip() == "hi from bash"


def test_tool_schemas_from_a_dataset_column(tmp_path, home):
    rows = [{"id": "s1", "q": "fact", "a": "120", "fns": [{"name": "math.factorial", "description": "n!",
                                                            "parameters": {"type": "object"}}]},
            {"id": "s2", "q": "plain", "a": "x", "fns": None}]
    fixtures = tmp_path / "fx"
    fixtures.mkdir()
    (fixtures / "f.jsonl").write_text(json.dumps({"name": "math.factorial", "key": {"n": 5}, "result": 120}) + "\n")
    script = {"s1": [{"tool_calls": [call("math.factorial", n=5)]}, {"content": "120"}], "s2": [{"content": "x"}]}
    cfg = setup(tmp_path, rows, script, f"    tools: {{fixtures: {fixtures}}}", extra_cols=", tools: fns")
    prompts, df, calls = run(cfg, tmp_path)
    by = prompts.set_index("sample_id")
    assert json.loads(by.loc["s1", "tools"]) == [{"type": "function", "function": rows[0]["fns"][0]}]
    assert by.loc["s2", "tools"] is None or by.loc["s2", "tools"] != by.loc["s2", "tools"]  # no tools: one-shot
    assert calls["sample_id"].tolist() == ["s1"] and calls["fixture_hit"].item()
    rby = df.set_index("sample_id")
    assert pd.isna(rby.loc["s2", "stop_reason"]) and rby.loc["s2", "prediction"] == "x"
    assert "fns" not in json.loads(by.loc["s1", "metadata"])


def test_unknown_tools_keys_and_modes_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown keys \['fixture'\] under 'tools'"):
        ToolEnv({"fixture": "x"})
    with pytest.raises(ConfigError, match="tools mode 'record' must be one of replay, live"):
        ToolEnv({"mode": "record"})
    with pytest.raises(ConfigError, match="cannot import 'no_such_module'"):
        ToolEnv({"live": ["no_such_module:f"]})


# ---- text models: tool calls as JSON blocks -------------------------------------------------------------------------
def test_json_tool_blocks_are_parsed_and_broken_ones_recorded_never_raised():
    text = ('Let me look.\n<tool_call>{"name": "web.search", "arguments": {"q": "rope"}}</tool_call>\n'
            '<tool_call>{"name": "math.factorial", "arguments": {"n": 5}</tool_call>')
    content, calls, invalid = parse_tool_blocks(text)
    assert content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("web.search", {"q": "rope"})]
    assert [(c.name, c.arguments) for c in invalid] == [("math.factorial", '{"name": "math.factorial", "arguments": {"n": 5}')]
    fenced = '```json\n{"name": "weather.current", "arguments": {"city": "Oslo"}}\n```'
    assert [c.name for c in parse_tool_blocks(fenced)[1]] == ["weather.current"]
    assert parse_tool_blocks("The answer is 42.") == ("The answer is 42.", [], [])
    assert parse_tool_blocks("<tool_call>not json at all") [2][0].name == ""


def test_a_text_model_conversation_runs_through_the_loop(tmp_path, home):
    """The local runner's chat step with canned model text (the real model is exercised in docs/tools.md)."""
    from evalpipe.runners.local import LocalRunner
    from evalpipe.tools.loop import run_conversation
    from evalpipe.core.types import Generation, RolloutRequest

    replies = iter(['<tool_call>{"name": "web.search", "arguments": {"q": "Capital of Australia"}}</tool_call>',
                    '<tool_call>{"name": "web.search", "arguments": {"q": </tool_call>',
                    "Canberra"])
    seen = []

    class Canned(LocalRunner):
        def __init__(self):
            self.model = None

        async def generate(self, request):
            seen.append(request.messages)
            return Generation(text=next(replies), finish_reason="stop", input_tokens=1, output_tokens=1)

    tooluse = ROOT / "data" / "tooluse"
    env = ToolEnv({"fixtures": str(tooluse / "fixtures"), "schemas": str(tooluse / "tools.json")})
    req = RolloutRequest("s", [{"role": "user", "content": "What is the capital of Australia?"}], "fp",
                         tools=env.schemas())
    gen = asyncio.run(run_conversation(Canned(), req, env, 30))
    assert gen.text == "Canberra" and gen.stop_reason == "final" and gen.turns == 3
    assert [r["arguments_valid"] for r in gen.tool_calls] == [True, False]
    assert gen.tool_calls[0]["fixture_hit"] and gen.tool_calls[1]["error"] == "invalid_arguments"
    assert "<tool_call>" in seen[0][0]["content"] and '"name": "web_search"' in seen[0][0]["content"]  # tools in the prompt
    assert seen[1][-1]["role"] == "user" and seen[1][-1]["content"].startswith("Tool result (web_search):")
    assert "Canberra is the capital" in seen[1][-1]["content"]


# ---- agents: the same tool layer ------------------------------------------------------------------------------------
def tool_agent(task):
    oslo = task.call_tool("weather.current", {"city": "Oslo"})
    task.call_tool("web.search", {"q": "  Nothing RECORDED "})
    task.call_tool("shell.exec", {"command": "ls"})
    return {"prediction": str(oslo["temp_c"])}


async def async_tool_agent(task):
    r = await task.acall_tool("math.factorial", '{"n": 5}')
    return str(r["value"])


@pytest.mark.parametrize("agent", ["tool_agent", "async_tool_agent"])
def test_user_agents_call_tools_through_the_same_layer(tmp_path, home, agent):
    from tests.test_tools import TOOLUSE

    cfg = tmp_path / "evals.yaml"
    cfg.write_text(f"""
benchmarks:
  b:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl, limit: 2}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
    tools: {{fixtures: {TOOLUSE}/fixtures, allowlist: {TOOLUSE}/allowlist.txt, schemas: {TOOLUSE}/tools.json}}
models:
  m: {{runner: agent, model: 'tests.test_tools_live:{agent}'}}
""")
    c = load_config(cfg)
    split, model = c.split("b/test"), c.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    df = pipeline.run_rollouts(split, model, prompts, build_runner(model), RunSettings(timeout_s=30),
                               journal_file=tmp_path / "j.sqlite")
    calls = pipeline.tool_calls_frame(df)
    assert (df["status"] == "ok").all(), df["error"].tolist()
    assert set(df["stop_reason"]) == {"final"}
    if agent == "tool_agent":
        assert set(df["prediction"]) == {"3"}
        first = calls[calls["sample_id"] == "t01"]
        assert first["name"].tolist() == ["weather.current", "web.search", "shell.exec"]
        assert first["error"].tolist() == [None, "fixture_miss", "tool_not_allowed"]
        assert first["call_index"].tolist() == [0, 1, 2]
        assert df["fixture_misses"].tolist() == [1, 1]
    else:
        assert set(df["prediction"]) == {"120"} and calls["fixture_hit"].all()


def test_the_python_tool_sees_the_sample_files_in_its_working_folder(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("region,amount\nnorth,3\nsouth,4\n")
    env = ToolEnv({"python": True})
    session = env.session("s1", ["python"], files=[str(data)])

    async def go():
        try:
            first = await session.call("python", {"code": "import csv\nrows = list(csv.DictReader(open('sales.csv')))"}, 0)
            second = await session.call("python", {"code": "sum(int(r['amount']) for r in rows)"}, 1)
            return first, second
        finally:
            await session.aclose()

    first, second = asyncio.run(go())
    assert first[0]["error"] is None, first
    assert str(json.loads(second[1])["value"]) == "7"


def test_a_python_call_past_its_timeout_is_the_timeout_error_and_the_session_goes_on(tmp_path):
    env = ToolEnv({"python": True}, {"tool_timeout_s": 2})
    session = env.session("s1", ["python"])

    async def go():
        try:
            slow = await session.call("python", {"code": "import time\ntime.sleep(30)"}, 0)
            after = await session.call("python", {"code": "1 + 1"}, 1)
            return slow, after
        finally:
            await session.aclose()

    import time

    t0 = time.monotonic()
    slow, after = asyncio.run(go())
    assert slow[0]["error"] == "timeout" and json.loads(slow[1]) == {"ok": False, "error": "timeout"}
    assert time.monotonic() - t0 < 25
    assert after[0]["error"] is None and str(json.loads(after[1])["value"]) == "2"  # a fresh interpreter answers
