"""Issue 11 end to end: the shipped DAEval / QRData / DiscoveryBench samples in both protocols, with a scripted model
that writes pandas code and runs it through the `python` tool (in the real sandbox), then answers; metrics checked
against values computed by hand."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

# The `benchmark_split` partitions are read from the config when Dagster code is first imported: import them now,
# while EVALS_CONFIG is the test config (conftest.py), not later under a test's own config.
import partitions  # noqa: F401,E402

REPO = Path(__file__).parents[1]


def py(code):
    return {"name": "python", "arguments": {"code": code}}


READ_SALES = "import pandas as pd\ndf = pd.read_csv('sales.csv')\n"
READ_STUDENTS = "import pandas as pd\ndf = pd.read_csv('students.csv')\n"
# Sample 4 gets mean_male wrong on purpose (61.0 instead of 63.6).
DAEVAL_SCRIPT = [
    {"sample_id": "0", "turns": [{"tool_calls": [py(READ_SALES + "print(round(df.units.mean(), 2))")]},
                                 {"content": "The mean is @mean_units[112.92]"}]},
    {"sample_id": "1", "turns": [{"tool_calls": [py(READ_SALES + "t = df.groupby('region').units.sum()\nprint(t.idxmax(), t.max())")]},
                                 {"content": "@top_region[north] @top_units[410]"}]},
    {"sample_id": "2", "turns": [{"tool_calls": [py(READ_SALES + "df['rev'] = df.units * df.price")]},
                                 {"tool_calls": [py("print(round(df[df.month == 2].rev.sum(), 1))")]},  # state kept
                                 {"content": "@revenue_month2[4540.0]"}]},
    {"sample_id": "3", "turns": [{"tool_calls": [py(READ_STUDENTS + "print(round(df.hours.corr(df.score), 2))")]},
                                 {"content": "@correlation[0.98]"}]},
    {"sample_id": "4", "turns": [{"tool_calls": [py(READ_STUDENTS + "print(df.groupby('gender').score.mean().round(1))")]},
                                 {"content": "@mean_female[79.8] @mean_male[61.0] @higher[female]"}]},
]


@pytest.fixture
def cli(home, write_config, monkeypatch):
    for var in ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL"):
        monkeypatch.setenv(var, "")
    write_config("""
benchmarks:
  daeval:
    adapter: daeval
    splits:
      validation: {}
      validation_single: {protocol: single_turn}
    options: {path: "{repo}/data/daeval_sample"}
models:
  scripted: {runner: echo, reply: script, script: %s}
default_models: [scripted]
""" % json.dumps(DAEVAL_SCRIPT))
    from evalpipe.cli.main import main

    return lambda *args: CliRunner().invoke(main, list(args), catch_exceptions=False)


def _metrics(cli, split):
    rows = json.loads(cli("summarize", "--split", split, "--slices", "--json").output)
    return {(r["metric"], r["slice"]): r for r in rows}


@pytest.mark.slow
def test_daeval_both_protocols_end_to_end(cli, home):
    r = cli("run", "--benchmark", "daeval", "--model", "scripted", "--no-progress")
    assert r.exit_code == 0, r.output
    m = _metrics(cli, "daeval/validation")
    # by question 4/5; proportional (1+1+1+1+2/3)/5; by sub-question 7/8
    assert m[("list_match", "all")]["value"] == pytest.approx(0.8) and m[("list_match", "all")]["n"] == 5
    assert m[("list_match_proportional", "all")]["value"] == pytest.approx((4 + 2 / 3) / 5)
    assert m[("list_match_by_subquestion", "all")]["value"] == pytest.approx(7 / 8)
    assert m[("list_match", "level=hard")]["value"] == 0.0 and m[("list_match", "level=easy")]["value"] == 1.0
    # a question counts in every concept it has: Summary Statistics = questions 0, 1, 4 -> 2/3
    assert m[("list_match", "concept=Summary Statistics")]["value"] == pytest.approx(2 / 3)
    assert m[("list_match", "concepts=2")]["value"] == pytest.approx(0.5)
    # the pandas code really ran in the sandbox on the copied data file, state kept across calls
    q = cli("sql", "select sample_id, result from tool_calls where benchmark_split = 'daeval/validation' "
                   "order by sample_id, call_index")
    assert q.exit_code == 0 and "112.92" in q.output and "4540.0" in q.output and "north" in q.output
    t = cli("sql", "select turns || '/' || stop_reason as t from rollouts where benchmark_split = 'daeval/validation' "
                   "and sample_id = '2'")
    assert "3/final" in t.output  # two tool-calling turns, then the answer
    # the run artifacts keep each sample's final answer, trajectory (with the executions) and data files
    found = [f for f in home.rglob("samples.jsonl") if "validation_single" not in str(f) and "daeval" in str(f)]
    assert found, list(home.rglob("samples.jsonl"))
    rows = {r["sample_id"]: r for r in map(json.loads, found[0].read_text().splitlines())}
    assert rows["0"]["final_answer"] == "The mean is @mean_units[112.92]"
    assert rows["0"]["files"] == [str(REPO / "data/daeval_sample/da-dev-tables/sales.csv")]
    assert any(m.get("role") == "tool" and "112.92" in str(m.get("content")) for m in rows["0"]["trajectory"])
    assert rows["2"]["tool_calls"][1]["name"] == "python" and "4540.0" in rows["2"]["tool_calls"][1]["result"]
    # single_turn: one reply (the script's last content), no tools; same answers, same scores
    s = _metrics(cli, "daeval/validation_single")
    assert s[("list_match", "all")]["value"] == pytest.approx(0.8)
    n = cli("sql", "select 'calls=' || count(*) as n from tool_calls where benchmark_split = 'daeval/validation_single'")
    assert "calls=0" in n.output  # no code block in these replies: nothing run


# ---- pipeline level: qrdata and discoverybench (and the scripted judge on loopback-free runner) -----------------
def _run_split(key, script, home, judge_metrics=None):
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.core.config import ModelConfig
    from evalpipe.project import load_config
    from evalpipe.runners import build_runner, run_settings_for

    cfg = load_config()
    split = cfg.split(key)
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": script})
    ds = pipeline.build_dataset(split)
    prompts = pipeline.build_prompts(split, model.key, ds)
    runner = build_runner(model)
    roll = pipeline.run_rollouts(split, model, prompts, runner, run_settings_for(model),
                                 journal_file=home / f"{key.replace('/', '_')}.sqlite")
    j = pipeline.judge(split, prompts, roll, metrics=judge_metrics)
    m = pipeline.compute_metrics(split.key, model.key, j)
    return roll, j, {(r.metric, r.slice): r.value for r in m.itertuples()}


QRDATA_SCRIPT = [
    {"sample_id": "0", "turns": [{"tool_calls": [py("import pandas as pd\nprint(pd.read_csv('heights.csv').height_cm.mean())")]},
                                 {"content": "```python\nimport pandas as pd\nprint(pd.read_csv('heights.csv').height_cm.mean())\n```\n"
                                             "The mean is 171.7 cm.\nFINAL ANSWER: 171.7"}]},
    {"sample_id": "1", "turns": [{"content": "FINAL ANSWER: yes"}]},
    {"sample_id": "2", "turns": [{"tool_calls": [py("import pandas as pd\nd = pd.read_csv('trial.csv')\n"
                                                    "g = d.groupby('group').days.mean()\nprint(g['treatment'] - g['control'])")]},
                                 {"content": "FINAL ANSWER: -3.60"}]},  # within 3% of -3.67
    {"sample_id": "3", "turns": [{"content": "FINAL ANSWER: control group"}]},
]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["qrdata/test", "qrdata/test_single"])
def test_qrdata_end_to_end(home, key):
    roll, j, m = _run_split(key, QRDATA_SCRIPT, home)
    assert m[("qrdata", "all")] == pytest.approx(0.75) and m[("exact_match", "all")] == pytest.approx(0.75)
    assert m[("qrdata", "question_type=statistical")] == 1.0 and m[("qrdata", "question_type=causal")] == 0.5
    assert m[("qrdata", "answer_kind=numerical")] == 1.0 and m[("qrdata", "answer_kind=multiple_choice")] == 0.5
    if key == "qrdata/test":
        traces = "".join(str(t) for t in roll["tool_trace"].dropna())
        assert "171.7" in traces and "-3.66" in traces  # the printed difference of means
    else:  # single_turn: the reply's code ran once in the sandbox, recorded as a python call; the answer is the reply
        traced = roll.set_index("sample_id")
        rec = json.loads(traced.loc["0", "tool_trace"])
        assert len(rec) == 1 and rec[0]["name"] == "python" and "171.7" in json.loads(rec[0]["result"])["stdout"]
        assert json.loads(traced.loc["0", "trajectory"])[-1]["role"] == "tool" and traced.loc["0", "tool_calls"] == 1
        assert traced["tool_trace"].drop("0").isna().all()  # no code in the other replies: nothing run
        from evalpipe.pipeline.stages import tool_calls_frame

        assert len(tool_calls_frame(roll)) == 1


@pytest.mark.slow
def test_daeval_multi_turn_through_litellm_against_a_loopback_server(home):
    """The same analyses, served over real HTTP by an OpenAI-compatible mock: the litellm runner's chat step sends the
    python tool's schema, parses the tool calls, the loop runs the code in the sandbox and sends the output back."""
    from benchmarks.mock_server import MockLLM, serve_in_thread
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.core.config import ModelConfig
    from evalpipe.project import load_config
    from evalpipe.runners import build_runner, run_settings_for

    split = load_config().split("daeval/validation")
    ds = pipeline.build_dataset(split)
    mock = MockLLM()
    by_id = {e["sample_id"]: e["turns"] for e in DAEVAL_SCRIPT}
    for sid, prompt in zip(ds["sample_id"], ds["input"]):
        turns = by_id[sid]
        mock.tool_script[prompt] = [t for t in turns if t.get("tool_calls")]
        mock.answers[prompt] = turns[-1]["content"]
    with serve_in_thread(mock) as (_, url):
        model = ModelConfig(key="loopback", runner="litellm", model="openai/mock", api_base=url,
                            options={"max_retries": 0})
        prompts = pipeline.build_prompts(split, model.key, ds)
        roll = pipeline.run_rollouts(split, model, prompts, build_runner(model), run_settings_for(model),
                                     journal_file=home / "loop.sqlite")
    assert (roll["status"] == "ok").all(), roll["error"].tolist()
    sent = [b for b in mock.bodies if b.get("tools")]
    assert sent and sent[0]["tools"][0]["function"]["name"] == "python"
    assert any(m.get("role") == "tool" and "112.92" in str(m.get("content")) for b in mock.bodies for m in b["messages"])
    j = pipeline.judge(split, prompts, roll)
    m = {(r.metric, r.slice): r.value for r in pipeline.compute_metrics(split.key, model.key, j).itertuples()}
    assert m[("list_match", "all")] == pytest.approx(0.8) and m[("list_match_by_subquestion", "all")] == pytest.approx(7 / 8)


def judge_reply(prompt):
    """A deterministic judge for the DiscoveryBench sample (llm_score and hms_score prompts)."""
    import re

    if "## The final answer is" in prompt:
        pred = prompt.split("Predicted answer:\n", 1)[1].split("\n\nGold answer", 1)[0]
        return "Thoughts: checked.\n\n## The final answer is: " + ("True" if "0.03" in pred else "False")
    if "Split the hypothesis" in prompt:
        hyp = re.search(r"Hypothesis: (.*)\n", prompt).group(1)
        if "no clear relation" in hyp:
            return '{"sub_hypo": []}'
        ctx = "all plots" if "ertilizer" in hyp else "all workers"
        return json.dumps({"sub_hypo": [{"text": hyp, "context": ctx, "variables": ["a", "b"], "relations": "+"}]})
    if "Count the variables" in prompt:
        return '{"sizeA": 2, "sizeB": 3, "intersection": 2, "explanation": "one extra"}'  # F1 = 0.8
    if "Options: A) very similar" in prompt:
        return '{"answer": "B) similar but general than HypoA", "explanation": "less specific"}'  # 0.5
    return None


class Computed(dict):
    """`answers` of the mock computed from the prompt: the model's final replies, else the judge's."""

    def __init__(self, fixed):
        super().__init__(fixed)

    def get(self, key, default=None):
        return dict.get(self, key) if key in self else (judge_reply(key) or default)


CROP_FINAL = ("```python\nimport pandas as pd\nimport numpy as np\nd = pd.read_csv('crop_yield.csv')\n"
              "print(round(np.polyfit(d.fertilizer_kg, d.yield_t, 1)[0], 3))\n```\n"
              "HYPOTHESIS: Yield increases linearly with fertilizer, about 0.03 t/ha per kg.\nWORKFLOW: OLS fit.")


@pytest.mark.slow
def test_discoverybench_both_protocols_cli_with_model_and_judge_on_loopback(home, write_config, monkeypatch):
    from benchmarks.mock_server import MockLLM, serve_in_thread
    from evalpipe.benchmarks import adapter_for
    from evalpipe.project import load_config

    for var in ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL"):
        monkeypatch.setenv(var, "")
    mock = MockLLM()
    with serve_in_thread(mock) as (_, url):
        write_config("""
benchmarks:
  discoverybench:
    adapter: discoverybench
    splits:
      test: {}
      test_single: {hf_split: test, protocol: single_turn}
    options: {path: "{repo}/data/discoverybench_sample"}
models:
  loop: {runner: litellm, model: openai/analyst, api_base: "%s", max_retries: 0}
judges:
  judge: {runner: litellm, model: openai/judge, api_base: "%s"}
default_models: [loop]
""" % (url, url))
        answers = {}
        for key in ("discoverybench/test", "discoverybench/test_single"):
            for s in adapter_for(load_config().split(key)).load():
                if s.id.startswith("crop_yield"):
                    answers[s.input] = CROP_FINAL
                    mock.tool_script[s.input] = [{"tool_calls": [{"name": "python", "arguments": {"code": (
                        "import pandas as pd, numpy as np\nd = pd.read_csv('crop_yield.csv')\n"
                        "print(round(np.polyfit(d.fertilizer_kg, d.yield_t, 1)[0], 3))")}}]}]
                else:
                    answers[s.input] = "HYPOTHESIS: There is no clear relation between schooling and wages."
        mock.answers = Computed(answers)
        from evalpipe.cli.main import main

        cli = lambda *a: CliRunner().invoke(main, list(a), catch_exceptions=False)  # noqa: E731
        r = cli("run", "--benchmark", "discoverybench", "--model", "loop", "--no-progress")
        assert r.exit_code == 0, r.output
        for split in ("discoverybench/test", "discoverybench/test_single"):
            m = _metrics(cli, split)
            assert m[("llm_score", "all")]["value"] == 0.5 and m[("llm_score", "domain=agriculture")]["value"] == 1.0
            # crop: matched (same context), F1 0.8 x relation 0.5 = 0.4; wages: no match, 0 -> mean 0.2
            assert m[("hms_score", "all")]["value"] == pytest.approx(0.2)
            assert m[("hms_score", "domain=agriculture")]["value"] == pytest.approx(0.4)
        q = cli("sql", "select benchmark_split || ':' || substr(result, 1, 40) as r from tool_calls "
                       "where benchmark_split like 'discoverybench/%' order by 1")
        assert "discoverybench/test:" in q.output and "0.03" in q.output  # multi_turn: pandas via the python tool
        assert "discoverybench/test_single:" in q.output  # single_turn: the reply's code run once in the sandbox
