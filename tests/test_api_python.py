"""The Python-first API end to end: a function on a list of dicts with a Python metric, no config file, on the
same Dagster instance and warehouse as the CLI (issue 21's first "Done when")."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import evalpipe

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "python_api" / "evaluate_function.py"

# run the example, then report what a reader of the instance needs (partitions, staleness before any re-run)
DRIVER = """
import json, sys
sys.path.insert(0, {folder!r})
import evaluate_function as ex
import evalpipe

mode = sys.argv[1]
call = dict(agent=ex.calculator, dataset=ex.QUESTIONS, metrics=[ex.same_number], name="arithmetic",
            slice_by=["level"])
if mode == "stale":
    print("STATUS " + json.dumps(evalpipe.stale_status(**call)))
else:
    res = ex.evalpipe.evaluate(**call)
    print("RESULT " + json.dumps({{"success": res.success, "keys": res.partition_keys, "viewer": res.viewer_url,
                                  "score": res.score("same_number"), "partitions": res.partitions,
                                  "samples": res.samples[["sample_id", "prediction", "same_number_correct"]]
                                  .to_dict("records")}}))
"""


def _run(folder: Path, home: Path, calls: Path, mode: str = "run") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVALS_", "DAGSTER_"))}  # no config file
    env.update(DAGSTER_HOME=str(home), EVALPIPE_EXAMPLE_CALLS=str(calls), PYTHONPATH=str(REPO))
    driver = folder / "driver.py"
    driver.write_text(DRIVER.format(folder=str(folder)))
    p = subprocess.run([sys.executable, str(driver), mode], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Warning" not in p.stderr, p.stderr[-3000:]  # no Dagster preview/beta notice reaches the user
    tag = "STATUS " if mode == "stale" else "RESULT "
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith(tag))
    return json.loads(line[len(tag):])


def _calls(calls: Path) -> int:
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.mark.slow
def test_a_function_on_five_dicts_in_a_fresh_process_resumes_and_goes_stale(tmp_path):
    folder, home, calls = tmp_path / "script", tmp_path / "home", tmp_path / "calls.txt"
    folder.mkdir()
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # (else Dagster's welcome banner)
    (folder / "evaluate_function.py").write_text(EXAMPLE.read_text())
    first = _run(folder, home, calls)
    assert first["success"] and first["score"] == 0.8 and _calls(calls) == 5
    assert [tuple(p) for p in first["partitions"]] == [("arithmetic/test", "calculator")]
    assert {s["sample_id"]: s["same_number_correct"] for s in first["samples"]}["q5"] is False
    assert "split=arithmetic%2Ftest" in first["viewer"] and "model=calculator" in first["viewer"]

    # the warehouse the CLI reads
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(home / "warehouse.duckdb")
    m = wh.query("select metric, slice, value, ci_low, ci_high from metrics where model = 'calculator'")
    overall = m[(m["metric"] == "same_number") & (m["slice"] == "all")].iloc[0]
    assert overall["value"] == 0.8 and overall["ci_low"] <= 0.8 <= overall["ci_high"]
    assert {"level=1", "level=2"} <= set(m["slice"])
    # the viewer: its app lists the partition and serves its samples
    from evalpipe.viewer import queries

    con = wh.connect()
    try:
        parts = queries.partitions(con)
        assert ("arithmetic/test", "calculator") in {(p["benchmark_split"], p["model"]) for p in parts}
        page = queries.samples(con, queries.SampleFilter(split="arithmetic/test", model="calculator"))
        assert page.total == 5
    finally:
        con.close()
    # the Dagster instance: a materialization of every asset for the partition
    from dagster import AssetKey, AssetRecordsFilter, DagsterInstance, MultiPartitionKey

    key = str(MultiPartitionKey({"benchmark_split": "arithmetic/test", "model": "calculator"}))
    assert first["keys"] == [key]
    with DagsterInstance.from_config(str(home)) as instance:
        assert "arithmetic/test" in instance.get_dynamic_partitions("benchmark_split")
        assert "calculator" in instance.get_dynamic_partitions("model")
        for asset, part in [("dataset", "arithmetic/test"), *((a, key) for a in ("prompts", "rollouts", "judgements",
                                                                                  "metrics"))]:
            recs = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset),
                                                                      asset_partitions=[part]), limit=1).records
            assert recs, asset
        assert instance.fetch_materializations(AssetKey("leaderboard"), limit=1).records

    # again, in another fresh process: everything from the journal, no agent call, the same numbers
    assert _run(folder, home, calls)["score"] == 0.8 and _calls(calls) == 5
    assert set(_run(folder, home, calls, "stale")[key].values()) == {"FRESH"}

    # an edited agent: its partition is stale in Dagster before anything runs again
    src = (folder / "evaluate_function.py").read_text()
    (folder / "evaluate_function.py").write_text(src.replace("return str(int(value))", "return str(round(value))"))
    status = _run(folder, home, calls, "stale")[key]
    assert status["rollouts"] == "STALE" and status["prompts"] == "FRESH", status
    assert _calls(calls) == 5


def test_unknown_options_and_mixed_forms_are_one_line_errors():
    def f(sample):
        return "x"

    with pytest.raises(evalpipe.ConfigError, match="unknown option 'colums'; did you mean 'columns'"):
        evalpipe.evaluate(agent=f, dataset=[{"input": "a", "target": "b"}], colums={})
    with pytest.raises(evalpipe.ConfigError, match="not both"):
        evalpipe.evaluate(agent=f, dataset=[{"input": "a", "target": "b"}], models=["echo"])
    with pytest.raises(evalpipe.ConfigError, match="needs both agent= and dataset="):
        evalpipe.evaluate(agent=f)
