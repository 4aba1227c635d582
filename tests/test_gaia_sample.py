"""examples/gaia_sample.py (issue 22, the GAIA lab's sample): offline on the shipped GAIA-format sample with a
loopback model, a custom evaluator beside the GAIA scorer, JSONL telemetry, one agent reused by every sample, and
each sample's usage the delta of that agent's running totals."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]


@pytest.mark.slow
def test_the_gaia_sample_script_runs_offline(home, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop("EVALS_TRACING", None)
    r = subprocess.run([sys.executable, str(REPO / "examples" / "gaia_sample.py"), "--out", str(out), "--level", "1",
                        "--max-n", "4"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "agent calls: 4;" in r.stdout  # one agent object, called once per task
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    # the loopback model knows every other task: the GAIA scorer and the custom evaluator see 2 of 4 right
    metrics = {(m["metric"], m["slice"]): m["value"] for m in json.loads((out / "metrics.json").read_text())}
    assert metrics[("gaia", "all")] == 0.5 and metrics[("contains_answer", "all")] == 0.5
    # usage deltas: each sample's tokens are its own share of the agent's running totals
    assert all(s["usage"]["input_tokens"] > 0 and s["usage"]["output_tokens"] > 0 for s in samples)
    assert sum(s["usage"]["input_tokens"] for s in samples) == metrics[("input_tokens_total", "usage")]
    # samples.jsonl is the file `evalpipe view` reads: each metric's verdict and the GAIA level on every line
    assert all({"gaia", "contains_answer"} <= set(s["scores"]) and s["metadata"]["Level"] for s in samples)
    spans = [json.loads(line) for line in (out / "gaia_traces.jsonl").read_text().splitlines()]
    calls = [s for s in spans if s["name"] == "model_call"]
    assert sorted(s["attributes"]["evals.sample_id"] for s in calls) == sorted(s["sample_id"] for s in samples)
