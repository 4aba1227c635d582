"""Run artifacts: the folder each materialized partition leaves behind, and `export` writing the same."""
import json
import re

import pytest

from evalpipe.runners import register_runner
from evalpipe.runners.base import Runner
from evalpipe.types import Generation

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {path: {repo}/data/smoke/test.jsonl, limit: 4}
    options:
      columns: {prompt: question, target: answer, id: id}
      slice_by: [category]
    metrics: [exact_match]
models:
  agent: {runner: test-agent, params: {temperature: 0}}
"""


@register_runner("test-agent", replace=True)
class AgentRunner(Runner):
    """Answers with the ground truth after one tool call; sample s2 fails."""

    name = "test-agent"

    async def generate(self, request):
        if request.sample_id == "s2":
            raise ValueError("the tool server said no")
        return Generation(text=request.target, input_tokens=10, output_tokens=2, cost=0.001, trajectory=[
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
            {"role": "assistant", "content": request.target},
        ])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def evaluated(home, write_config, instance, monkeypatch):
    monkeypatch.setenv("ACME_SERVICE_TOKEN", "tok-0123456789abcdef")  # must not show in the manifest's env
    monkeypatch.setenv("EVALS_SOMETHING", "kept")
    write_config(CONFIG)
    from eval_assets.launch import evaluate
    from evalpipe.config import load_config

    result = evaluate(load_config(), ["smoke/extra"], ["agent"], instance=instance)
    assert result.success, result
    return result.partitions[0].run_id


def test_each_partition_leaves_an_auditable_folder(evaluated, home, instance, tmp_path):
    from dagster import AssetKey

    from evalpipe.warehouse import Warehouse

    run_id = evaluated
    folder = home / "artifacts" / "smoke" / "extra" / "agent" / run_id  # one folder per run (`latest` -> newest)
    assert (folder.parent / "latest").resolve() == folder
    ev = instance.get_latest_materialization_event(AssetKey("metrics"))
    assert ev.asset_materialization.metadata["artifacts"].value == str(folder)  # recorded for the UI
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["manifest.json", "samples.jsonl", "events.jsonl", "errors.jsonl", "summary.json", "summary.md"])

    m = json.loads((folder / "manifest.json").read_text())
    assert m["run_id"] == run_id and m["benchmark_split"] == "smoke/extra" and m["model"] == "agent"
    assert m["duration_s"] is not None and m["duration_s"] >= 0 and m["started_at"] < m["finished_at"]
    assert m["config"]["model"]["runner"] == "test-agent" and m["config"]["model"]["params"] == {"temperature": 0}
    assert m["config"]["benchmark_split"]["options"]["limit"] == 4
    assert m["git"]["sha"] is None or re.fullmatch(r"[0-9a-f]{40}", m["git"]["sha"])
    assert m["packages"]["dagster"] and m["packages"]["duckdb"]
    assert m["env"]["EVALS_SOMETHING"] == "kept" and "ACME_SERVICE_TOKEN" not in m["env"]  # not an allowed prefix
    fps = m["fingerprints"]
    assert all(fps[k] for k in ("dataset", "prompts", "prompt_template", "runner", "model", "rollouts"))
    assert m["counts"] == {"samples": 4, "ok": 3, "errors": 1, "from_journal": 0, "input_tokens": 30,
                           "output_tokens": 6, "cost_usd": 0.003}

    samples = _jsonl(folder / "samples.jsonl")
    assert [s["sample_id"] for s in samples] == ["s1", "s2", "s3", "s4"]
    s1 = samples[0]
    assert s1["prompt"] == [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
    assert s1["target"] == "Paris" and s1["prediction"] == "Paris" and s1["metadata"] == {"category": "geography"}
    assert s1["scores"]["exact_match"]["correct"] is True and s1["usage"]["input_tokens"] == 10
    assert samples[1]["status"] == "error" and "the tool server said no" in samples[1]["error"]
    assert samples[1]["scores"]["exact_match"]["score"] == 0.0

    errors = _jsonl(folder / "errors.jsonl")
    assert [e["sample_id"] for e in errors] == ["s2"] and "the tool server said no" in errors[0]["error"]

    events = _jsonl(folder / "events.jsonl")
    e1 = [e for e in events if e["sample_id"] == "s1"]
    assert [e["event_index"] for e in e1] == [0, 1, 2] and e1[0]["type"] == "tool_calls"
    assert e1[1] == {"sample_id": "s1", "event_index": 1, "source": "trajectory", "role": "tool",
                     "tool_call_id": "c1", "content": "found it"}
    e2 = [e for e in events if e["sample_id"] == "s2"]  # no trajectory: the prompt and the error
    assert [e["type"] for e in e2] == ["message", "error"]

    summary = json.loads((folder / "summary.json").read_text())
    wh = Warehouse(home / "warehouse.duckdb").query(
        "select slice, value, n from metrics where metric = 'exact_match' order by slice")
    got = sorted((r["slice"], r["value"], r["n"]) for r in summary["metrics"] if r["metric"] == "exact_match")
    assert got == [tuple(r) for r in wh.itertuples(index=False)]
    md = (folder / "summary.md").read_text()
    assert "# smoke/extra x agent" in md and "## exact_match" in md and "| all | 0.7500 | 4 |" in md
    assert "| category=geography |" in md

    # export (the CLI's `evalpipe export`) writes the same folder anywhere, from the warehouse
    from evalpipe.artifacts import write_artifacts
    from evalpipe.config import load_config, warehouse_path

    out = write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config(), out_dir=tmp_path / "x")
    src = home / "artifacts" / "smoke" / "extra" / "agent" / "latest"
    for name in ("samples.jsonl", "events.jsonl", "errors.jsonl"):
        assert (out / name).read_text() == (src / name).read_text()
    # exporting again replaces the folder whole (no stale files survive)
    (out / "stale.txt").write_text("x")
    write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config(), out_dir=out)
    assert not (out / "stale.txt").exists()


def test_export_of_a_partition_never_run_is_a_one_line_error(home, write_config):
    from evalpipe.artifacts import write_artifacts
    from evalpipe.config import load_config, warehouse_path
    from evalpipe.errors import WarehouseError
    from evalpipe.warehouse import Warehouse

    write_config(CONFIG)
    with pytest.raises(WarehouseError, match="materialize the partition first"):
        write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config())


def test_artifacts_dir_from_config_and_env(tmp_path, write_config, monkeypatch):
    from evalpipe.artifacts import artifacts_enabled, artifacts_root
    from evalpipe.config import load_config

    cfg_path = write_config(CONFIG + "artifacts: {dir: runs/out}\n")
    assert artifacts_root(load_config()) == cfg_path.parent / "runs" / "out"
    monkeypatch.setenv("EVALS_ARTIFACTS", str(tmp_path / "elsewhere"))
    assert artifacts_root(load_config()) == tmp_path / "elsewhere"
    write_config(CONFIG + "artifacts: {enabled: false}\n")
    assert artifacts_enabled(load_config()) is False
