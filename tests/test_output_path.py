"""`evalpipe run --output-path FILE`: one portable results file per run (docs/interop.md "One portable results
file"): metrics with intervals and directions, the resolved config with secrets masked, versions, fingerprints,
counts, and where the samples are."""
import json
import sys

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

SECRET = "sk-PLANTEDoutput0123456789abcdef"


def test_run_output_path_writes_one_results_file(home, write_config, monkeypatch, tmp_path):
    write_config(smoke_benchmark(limit=3, options="slice_by: [category]")
                 + "models:\n  perfect: {runner: echo, options: {reply: target}}\n"
                 + "  paris: {runner: echo, options: {reply: fixed, text: Paris}}\n"
                 + f"  leaky: {{runner: echo, options: {{reply: fixed, text: Paris}}, "
                   f"params: {{api_key: {SECRET}}}}}\n")
    out_file = tmp_path / "results" / "run.json"
    result = cli_in_process(monkeypatch)("run", "--no-progress", "--model", "perfect", "--model", "paris",
                                         "--model", "leaky", "--run-id", "r1", "--output-path", str(out_file))
    assert result.exit_code == 0, result.output
    assert f"results file: {out_file}" in result.output
    text = out_file.read_text()
    assert SECRET not in text
    doc = json.loads(text)
    assert doc["format"] == "evalpipe.results" and doc["format_version"] == 1
    assert doc["run"]["run_id"] == "r1" and doc["run"]["success"] is True
    assert doc["run"]["command"].startswith("evalpipe")
    parts = {(p["benchmark_split"], p["model"]): p for p in doc["partitions"]}
    assert set(parts) == {("smoke/extra", "perfect"), ("smoke/extra", "paris"), ("smoke/extra", "leaky")}
    paris = parts[("smoke/extra", "paris")]
    em = paris["metrics"]["exact_match"]
    assert em["value"] == pytest.approx(1 / 3) and em["n"] == 3 and em["higher_is_better"] is True
    assert em["ci_low"] < 1 / 3 < em["ci_high"] and em["stderr"] > 0 and em["kind"] == "score"
    assert paris["slices"]["category=geography"]["exact_match"]["value"] == 1.0
    assert parts[("smoke/extra", "perfect")]["metrics"]["exact_match"]["value"] == 1.0
    assert paris["counts"]["samples"] == 3 and paris["counts"]["ok"] == 3 and paris["counts"]["errors"] == 0
    assert paris["status"] == "ok" and paris["dagster_run_id"]
    assert len(paris["fingerprints"]["dataset_sha256"]) == 64 and paris["fingerprints"]["runner_fingerprint"]
    # the samples: in the warehouse, and exported beside the file (redacted like the run artifacts)
    assert paris["samples"]["warehouse"] == str(home / "warehouse.duckdb")
    lines = [json.loads(x) for x in open(paris["samples"]["samples_jsonl"])]
    assert [x["sample_id"] for x in lines] == ["s1", "s2", "s3"] and lines[0]["scores"]["exact_match"]["score"] == 1.0
    assert str(tmp_path / "results" / "run_samples") in paris["samples"]["samples_jsonl"]
    # the resolved config of what ran, and the versions
    cfg = doc["config"]
    assert cfg["benchmark_splits"]["smoke/extra"]["options"]["limit"] == 3
    assert cfg["models"]["paris"]["runner"] == "echo" and cfg["models"]["paris"]["options"]["text"] == "Paris"
    assert cfg["models"]["leaky"]["params"]["api_key"] != SECRET and len(cfg["file_sha256"]) == 64
    assert doc["versions"]["python"] == sys.version.split()[0] and doc["versions"]["evalpipe"]
    assert doc["versions"]["dagster"] and doc["versions"]["duckdb"]


def test_a_failed_partition_is_listed_as_failed(home, write_config, monkeypatch, tmp_path):
    write_config(smoke_benchmark(limit=2) + f"models:\n  gone: {{runner: replay, path: {tmp_path / 'none.jsonl'}}}\n")
    out_file = tmp_path / "run.json"
    result = cli_in_process(monkeypatch)("run", "--no-progress", "--model", "gone", "--output-path", str(out_file))
    assert result.exit_code == 1
    part, = json.loads(out_file.read_text())["partitions"]
    assert part["status"] == "failed" and "none.jsonl not found" in part["error"] and part["metrics"] == {}
    assert "samples_jsonl" not in part["samples"]


def test_evaluate_output_path(home, write_config, tmp_path):
    import evalpipe

    write_config(smoke_benchmark(limit=2) + "models:\n  perfect: {runner: echo, options: {reply: target}}\n")
    out_file = tmp_path / "api.json"
    result = evalpipe.evaluate(models="perfect", output_path=str(out_file))
    assert result.success
    doc = json.loads(out_file.read_text())
    assert doc["run"]["command"] == "evalpipe.evaluate()"
    part, = doc["partitions"]
    assert part["model"] == "perfect" and part["metrics"]["exact_match"]["value"] == 1.0
