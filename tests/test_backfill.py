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
