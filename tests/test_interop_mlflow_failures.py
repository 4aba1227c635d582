"""MLflow: a failed partition is a FAILED run (its error redacted, its error counts) from every entry point: the
Python API, a run launched as the UI launches one (the run failure sensor), a batch op; and the tracker being down
is one line from the API as from the CLI. A real local MLflow store (a SQLite file); the model server is down."""
import pytest

from tests.helpers.configs import smoke_benchmark

DOWN = ("models:\n  down: {runner: litellm, model: openai/m, api_base: 'http://127.0.0.1:9/v1', max_retries: 0, "
        "timeout_s: 2}\n  perfect: {runner: echo, reply: target}\n")
STORE = "mlflow: {tracking_uri: 'sqlite:///mlruns.db', experiment: evals}\n"


def _failed(tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlruns.db'}")
    exp = client.get_experiment_by_name("evals")
    runs = [] if exp is None else client.search_runs([exp.experiment_id])
    return [r for r in runs if r.info.status == "FAILED"], runs


@pytest.mark.slow
def test_evaluate_logs_a_failed_partition_as_a_failed_run(home, write_config, tmp_path):
    import evalpipe

    write_config(smoke_benchmark(limit=2) + DOWN + STORE)
    res = evalpipe.evaluate(benchmarks=["smoke/extra"], models=["down"])
    assert not res.success
    failed, runs = _failed(tmp_path)
    assert len(failed) == 1, [r.info.status for r in runs]
    run = failed[0]
    assert run.data.params["model"] == "down" and run.data.params["benchmark_split"] == "smoke/extra"
    assert "every one of the 2 sample(s) failed" in run.data.tags["evalpipe.error"]
    assert run.data.metrics["n_errors"] == 2 and run.data.metrics["n_samples"] == 2
    assert run.data.tags["evalpipe.dagster_run_id"] == res.partitions[0].run_id


@pytest.mark.slow
def test_evaluate_says_in_one_line_that_the_tracker_is_down(home, write_config, monkeypatch, capfd):
    import evalpipe

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    write_config(smoke_benchmark(limit=2) + DOWN + "mlflow: {tracking_uri: 'http://127.0.0.1:9'}\n")
    evalpipe.evaluate(benchmarks=["smoke/extra"], models=["down"])
    lines = [x for x in capfd.readouterr().err.splitlines() if x.startswith("mlflow:")]
    assert len(lines) == 1, lines
    assert lines[0].startswith("mlflow: 1 partition(s) not logged to http://127.0.0.1:9: ") and \
        lines[0].endswith("(the numbers are in the warehouse; re-run when the tracker is back)")


@pytest.mark.slow
def test_a_run_launched_as_the_ui_launches_it_is_logged_by_the_failure_sensor(home, write_config, instance,
                                                                              tmp_path):
    """A partition materialized as the UI materializes one (Dagster's implicit job, not the CLI): the run failure
    sensor logs it, once however often it sees the run, with the error redacted."""
    from dagster import DagsterEventType, build_run_status_sensor_context

    from eval_assets.launch import run_assets
    from eval_assets.sensors import mlflow_failed_runs_sensor
    from evalpipe.project import Project
    from partitions import eval_key

    key = "sk-proj-PLANTEDmlflow0123456789ab"
    write_config(smoke_benchmark(limit=2) + DOWN.replace("openai/m", f"openai/m-{key}") + STORE)
    project = Project.from_file()
    run_assets(["dataset"], "smoke/extra", instance=instance, project=project)
    result = run_assets(["prompts", "rollouts", "judgements", "metrics"], eval_key("smoke/extra", "down"),
                        instance=instance, project=project)
    assert not result.success
    assert _failed(tmp_path)[0] == []  # nothing logged it yet (no CLI, no API)
    run = instance.get_run_by_id(result.run_id)
    event = next(r.dagster_event for r in instance.all_logs(result.run_id, of_type=DagsterEventType.RUN_FAILURE))
    sensor = mlflow_failed_runs_sensor(project)
    for _ in range(2):  # seen twice (a sensor retried, the daemon restarted): logged once
        sensor(build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=instance, dagster_run=run,
                                               dagster_event=event).for_run_failure())
    failed, _ = _failed(tmp_path)
    assert len(failed) == 1
    tags = failed[0].data.tags
    assert tags["evalpipe.dagster_run_id"] == result.run_id and tags["evalpipe.partition"] == "smoke/extra|down"
    assert tags["evalpipe.error"].startswith("rollouts: ") and key not in str(failed[0].to_dictionary())
    assert failed[0].data.metrics["n_errors"] == 2


def test_failures_of_a_batch_run_are_read_from_its_failure(home, write_config, tmp_path):
    """A batch op's failed partitions ({"<split>|<model>": error}) become one FAILED run each; the counts are the
    kept rollouts' when the failure came after them, and unknown (said so) when nothing says how many failed."""
    from evalpipe.pipeline.tracking import log_failed_keys
    from evalpipe.project import load_config
    from evalpipe.store.warehouse import Warehouse
    import pandas as pd

    write_config(smoke_benchmark(limit=2) + DOWN + STORE)
    cfg = load_config()
    wh = Warehouse(home / "warehouse.duckdb")
    wh.write("rollouts", pd.DataFrame({"sample_id": ["a", "b", "c"], "status": ["ok", "error", "ok"]}),
             {"benchmark_split": "smoke/extra", "model": "perfect"})
    assert log_failed_keys(cfg, wh, "r-1", {"smoke/extra|perfect": "judgements: judge down",
                                            "smoke/extra|down": "prompts: no such file"}) == []
    assert log_failed_keys(cfg, wh, "r-1", {"smoke/extra|perfect": "judgements: judge down"}) == []  # again: once
    failed, _ = _failed(tmp_path)
    by = {r.data.tags["evalpipe.partition"]: r for r in failed}
    assert sorted(by) == ["smoke/extra|down", "smoke/extra|perfect"]
    assert by["smoke/extra|perfect"].data.metrics == {"n_errors": 1.0, "n_samples": 3.0}
    assert by["smoke/extra|down"].data.metrics == {} and \
        by["smoke/extra|down"].data.tags["evalpipe.n_errors"].startswith("unknown")
