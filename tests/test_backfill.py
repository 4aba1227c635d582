"""A backfill over 3 model partitions launched from the command line (no UI), run by the real daemon through
the run queue of the project's own `dagster_home/dagster.yaml`."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
BIN = Path(sys.executable).parent


def test_project_instance_config_loads_a_run_queue_with_a_model_call_limit(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with DagsterInstance.get() as inst:
        assert type(inst.run_coordinator).__name__ == "QueuedRunCoordinator"
        # what the daemon's queue reads (`concurrency.runs` merged over the coordinator's defaults)
        queue = inst.get_concurrency_config().run_queue_config
        limits = {(lim["key"], lim.get("value")): lim["limit"] for lim in queue.tag_concurrency_limits}
        assert limits[("evals/calls_models", "true")] == 2
        assert queue.max_concurrent_runs == 4
    from eval_assets.jobs import evaluate_job

    assert evaluate_job.tags["evals/calls_models"] == "true"  # the tag the limit keys on


@pytest.mark.slow
def test_cli_backfill_over_three_models_runs_through_the_queue(tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from eval_assets.launch import run_assets, sync_model_partitions
    from evalpipe.store.warehouse import Warehouse

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(REPO / "tests/fixtures/evals.test.yaml")}
    models = ["perfect", "parrot", "fixed"]
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    if True:  # (one block: the same steps a user types)
        with DagsterInstance.get() as inst:
            sync_model_partitions(inst, models)  # what sync_models_sensor does under the daemon
            assert run_assets(["dataset"], "smoke/extra", inst).success

        keys = ",".join(f"smoke/extra|{m}" for m in models)
        out = subprocess.run([str(BIN / "dagster"), "job", "backfill", "-w", "workspace.yaml", "-j", "evaluate",
                              "--partitions", keys, "--noprompt"], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert "Launched backfill" in out.stdout
        with DagsterInstance.get() as inst:
            runs = [r for r in inst.get_runs() if r.job_name == "evaluate"]
            assert len(runs) == 3 and {r.status.value for r in runs} == {"QUEUED"}  # waiting for the daemon

        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"], cwd=REPO, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wh = Warehouse(home / "warehouse.duckdb")
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:
                with DagsterInstance.get() as inst:
                    runs = [r for r in inst.get_runs() if r.job_name == "evaluate"]
                    if all(r.is_finished for r in runs):
                        break
                time.sleep(1.0)
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(timeout=30)

        with DagsterInstance.get() as inst:
            runs = [r for r in inst.get_runs() if r.job_name == "evaluate"]
            assert [r.status.value for r in runs] == ["SUCCESS"] * 3
            # the queue honoured the tag limit: never more than 2 model-calling runs at once
            spans = []
            for r in runs:
                stats = inst.get_run_stats(r.run_id)
                spans.append((stats.start_time, stats.end_time))
            for t, _ in spans:
                assert sum(1 for s, e in spans if s <= t < e) <= 2
        got = wh.query("select model, value from metrics where slice = 'all' order by model")
        assert got.to_dict("records") == [{"model": "fixed", "value": 0.25}, {"model": "parrot", "value": 0.0},
                                          {"model": "perfect", "value": 1.0}]


UI_RUNS = """query { runsOrError { ... on Runs { results { id status tags { key value } } } } }"""
PARTITION_STATUS = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  assetPartitionStatuses { ... on MultiPartitionStatuses { ranges { secondaryDim { ... on DefaultPartitionStatuses {
  materializedPartitions failedPartitions } } } } } } } }"""


@pytest.mark.slow
def test_a_ui_backfill_over_many_partitions_runs_them_in_batches(tmp_path, monkeypatch):
    """[sweeps] The UI's "Launch backfill" (GraphQL launchPartitionBackfill) over 2 splits x 4 models, one of them
    failing, on a webserver and daemon as `make dev` starts them: one run for the batch (not one per partition),
    each partition materialized with its checks, or failed on its own (docs/scale.md "Sweeps")."""
    from dagster import AssetKey, DagsterEventType, DagsterInstance

    from benchmarks.bench_sweep import keys_of, prepare, sweep_config
    from benchmarks.bench_ui import CHAIN, DagsterDev, gql, launch_backfill, make_home, wait_backfill
    from tests.helpers.services import free_port

    config = sweep_config(tmp_path, 8, samples=2, splits=2).replace(
        "  echo3: {runner: echo}",  # every sample fails (its script has no turns for them): the partition fails
        '  echo3: {runner: echo, reply: script, script: [{sample_id: nope, turns: ["x"]}]}')
    env = make_home(tmp_path, config)
    splits, models = keys_of(config)
    keys = [f"{s}|{m}" for s in splits for m in models]
    prepare(env, splits, models)  # the partitions registered and the datasets loaded (sensor, `dataset` backfill)
    with DagsterDev(env, free_port(), log=tmp_path / "dev.log") as dev:
        backfill = launch_backfill(dev.url, keys, CHAIN)
        wait_backfill(dev.url, backfill, timeout=300)
        runs = [r for r in gql(dev.url, UI_RUNS)["runsOrError"]["results"]
                if {"key": "dagster/backfill", "value": backfill} in r["tags"]]
        # 8 partitions, one run per split (Dagster cuts a multi-partition backfill into ranges along its primary
        # dimension; each range is a run of up to `sweep_batch_partitions` partitions): 2 runs, not 8
        assert len(runs) == len(splits) == 2, runs
        status = gql(dev.url, PARTITION_STATUS, {"key": {"path": ["metrics"]}})["assetNodeOrError"]
        ranges = [r["secondaryDim"] for r in status["assetPartitionStatuses"]["ranges"]]
        # the asset's partitions page: each partition's own status
        assert {m for r in ranges for m in r["materializedPartitions"]} == {m for m in models if m != "echo3"}
        assert {m for r in ranges for m in r["failedPartitions"]} == {"echo3"}
        # a selection that is not a split x model rectangle (dagster#18852): still one run per split
        odd = launch_backfill(dev.url, [keys[0], keys[1], keys[len(models)]], CHAIN)
        wait_backfill(dev.url, odd, timeout=300)
        odd_runs = [r for r in gql(dev.url, UI_RUNS)["runsOrError"]["results"]
                    if {"key": "dagster/backfill", "value": odd} in r["tags"]]
        assert len(odd_runs) == 2, odd_runs
        assert [r["status"] for r in odd_runs] == ["SUCCESS", "SUCCESS"]  # nothing failed: the runs succeed
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    with DagsterInstance.get() as inst:
        done = {str(k) for k in inst.get_materialized_partitions(AssetKey("metrics"))}
        assert done == {k for k in keys if not k.endswith("|echo3")}
        assert inst.get_materialized_partitions(AssetKey("rollouts")) >= done
        checks = [e.dagster_event.event_specific_data for r in runs for e in
                  inst.all_logs(r["id"], of_type=DagsterEventType.ASSET_CHECK_EVALUATION)]
        assert {(c.check_name, c.partition) for c in checks} >= {("samples_accounted", k) for k in done}
        failed = {str(e.dagster_event.partition) for r in runs for e in
                  inst.all_logs(r["id"], of_type=DagsterEventType.ASSET_FAILED_TO_MATERIALIZE)}
        assert failed == {k for k in keys if k.endswith("|echo3")} or not failed  # (SQLite keeps none)
        # each run holds a failed partition (echo3 of its split) and fails, as that partition's own run would
        assert sorted(r["status"] for r in runs) == ["FAILURE", "FAILURE"]

