"""`runner: replay`: predictions made elsewhere, scored without a model; with tools, replayed through the loop."""
import json
from pathlib import Path

import pytest

from evalpipe.pipeline import stages as pipeline
from evalpipe.project import load_config
from evalpipe.core.errors import DataError
from evalpipe.runners import RunSettings, build_runner

ROOT = Path(__file__).resolve().parents[1]
TOOLUSE = ROOT / "data" / "tooluse"


def config(tmp_path, preds: Path, tools: bool = True) -> Path:
    cfg = tmp_path / "evals.yaml"
    tools_yaml = (f"    tools: {{fixtures: {TOOLUSE}/fixtures, allowlist: {TOOLUSE}/allowlist.txt, "
                  f"schemas: {TOOLUSE}/tools.json}}\n") if tools else ""
    cfg.write_text(f"""
benchmarks:
  tooluse:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
{tools_yaml}    metrics: [exact_match]
models:
  theirs:
    runner: replay
    path: {preds}
""")
    return cfg


def run(cfg_path, tmp_path):
    cfg = load_config(cfg_path)
    split, model = cfg.split("tooluse/test"), cfg.model("theirs")
    prompts = pipeline.build_prompts(split, "theirs", pipeline.build_dataset(split))
    df = pipeline.run_rollouts(split, model, prompts, build_runner(model), RunSettings(timeout_s=10),
                               journal_file=tmp_path / "j.sqlite")
    return split, prompts, df


def lines(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def test_missing_predictions_are_error_rows_never_skipped(tmp_path, home):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(lines({"sample_id": "t03", "output": "3628800",
                            "tool_calls": [{"name": "math.factorial", "arguments": {"n": 10}}]},
                           {"sample_id": "t29", "output": "4"}))
    split, prompts, df = run(config(tmp_path, preds, tools=False), tmp_path)
    assert len(df) == 31
    by = df.set_index("sample_id")
    assert by.loc["t03", "status"] == "ok" and by.loc["t03", "prediction"] == "3628800"
    assert by.loc["t01", "status"] == "error"
    assert by.loc["t01", "error"] == f"no prediction for sample t01 in {preds}"
    calls = pipeline.tool_calls_frame(df)  # without tools: recorded as given, not executed
    assert calls[["sample_id", "turn", "call_index", "name"]].values.tolist() == [["t03", 0, 0, "math.factorial"]]
    assert calls["result"].isna().all() and calls["normalized_key"].item() == '{"n":10}'
    judged = pipeline.judge(split, prompts, df)
    assert judged["score"].sum() == 2 and (judged["status"] == "error").sum() == 29


def test_with_tools_the_replayed_calls_run_through_the_tool_layer(tmp_path, home):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(lines(*[{"sample_id": f"t{i:02d}", "output": None} for i in range(1, 32) if i not in (17, 23)],
                           {"sample_id": "t17", "output": "Nairobi", "tool_calls": [
                               {"name": "weather.current", "arguments": {"city": "Nairobi"}},
                               {"name": "weather.current", "arguments": {"city": "Tokyo"}}]},
                           {"sample_id": "t23", "output": "unknown", "tool_calls": [
                               {"name": "web.search", "arguments": {"q": "Population of  Atlantis", "top_k": None}}]}))
    _, _, df = run(config(tmp_path, preds), tmp_path)
    assert (df["status"] == "ok").all()
    calls = pipeline.tool_calls_frame(df)
    assert calls[["sample_id", "name", "fixture_hit", "error"]].values.tolist() == [
        ["t17", "weather.current", True, None], ["t17", "weather.current", True, None],
        ["t23", "web.search", False, "fixture_miss"]]
    assert json.loads(calls["result"].iloc[1]) == {"ok": True, "city": "Tokyo", "temp_c": 22, "conditions": "clear"}
    by = df.set_index("sample_id")
    assert by.loc["t17", "prediction"] == "Nairobi" and by.loc["t17", "turns"] == 2
    assert by.loc["t01", "turns"] == 1 and by.loc["t01", "stop_reason"] == "final"


def test_duplicate_ids_name_both_lines(tmp_path, home):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(lines({"sample_id": "t01", "output": "a"}, {"sample_id": "t02", "output": "b"},
                           {"sample_id": "t01", "output": "c"}))
    with pytest.raises(DataError, match=r"sample_id 't01' appears twice, on line 1 and line 3"):
        run(config(tmp_path, preds), tmp_path)


def test_a_bad_json_line_names_its_line_number(tmp_path, home):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(lines({"sample_id": "t01", "output": "a"}, "", '{"sample_id": "t02", "output": '))
    with pytest.raises(DataError, match=r"preds.jsonl line 3: not valid JSON"):
        run(config(tmp_path, preds), tmp_path)


def test_a_changed_file_reruns(tmp_path, home):
    preds = tmp_path / "preds.jsonl"
    preds.write_text(lines({"sample_id": "t29", "output": "5"}))
    _, _, df = run(config(tmp_path, preds, tools=False), tmp_path)
    assert df.set_index("sample_id").loc["t29", "prediction"] == "5"
    preds.write_text(lines({"sample_id": "t29", "output": "4"}))
    _, _, df = run(config(tmp_path, preds, tools=False), tmp_path)
    assert df.set_index("sample_id").loc["t29", "prediction"] == "4" and not df["cached"].any()
