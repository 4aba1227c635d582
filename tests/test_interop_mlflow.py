"""MLflow: each metrics partition of a run logged as an MLflow run in a local (SQLite-file) tracking store."""
import math

import pandas as pd
import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

MODELS = """models:
  perfect: {runner: echo, reply: target}
  parrot: {runner: echo}
"""


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _runs(uri, experiment="evals"):
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id])


@pytest.fixture
def cli(home, write_config, monkeypatch, tmp_path):
    # a relative SQLite file resolves against the config's folder (tmp_path), whatever the working folder
    write_config(smoke_benchmark(limit=3) + MODELS + "mlflow: {tracking_uri: 'sqlite:///mlruns.db', experiment: evals}\n")
    return cli_in_process(monkeypatch)


@pytest.mark.slow
def test_each_metrics_partition_becomes_one_mlflow_run_with_its_numbers(cli, home, tmp_path):
    from evalpipe.store.warehouse import Warehouse

    r = cli("run", "--split", "smoke/extra", "--model", "perfect", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    runs = {run.data.params["model"]: run for run in _runs(uri)}
    assert sorted(runs) == ["parrot", "perfect"]
    metrics = Warehouse(home / "warehouse.duckdb").read_table("metrics")
    for model, run in runs.items():
        row = metrics[(metrics["model"] == model) & (metrics["metric"] == "exact_match") & (metrics["slice"] == "all")].iloc[0]
        m = run.data.metrics
        assert m["exact_match"] == pytest.approx(row["value"])
        assert m["exact_match.n"] == row["n"] == 3
        for part in ("ci_low", "ci_high", "stderr"):  # the interval travels with the value, or is left out
            assert (m.get(f"exact_match.{part}") is None) == (not math.isfinite(row[part]))
            if math.isfinite(row[part]):
                assert m[f"exact_match.{part}"] == pytest.approx(row[part])
        assert run.data.params["benchmark_split"] == "smoke/extra"
        fps = Warehouse(home / "warehouse.duckdb").read("fingerprints", {"benchmark_split": "smoke/extra", "model": model})
        for name in ("dataset_sha256", "runner_fingerprint", "model_fingerprint"):  # what can change a number
            assert run.data.params[f"fingerprint.{name}"] == fps.iloc[-1][name]
        assert run.data.params["decoding_params"] == fps.iloc[-1]["params"]
        assert run.data.tags["evalpipe.higher_is_better.exact_match"] == "true"
        assert "smoke" in run.data.tags["evalpipe.viewer"] and model in run.data.tags["evalpipe.viewer"]
        assert run.info.run_name == f"smoke/extra x {model}" and run.info.status == "FINISHED"
    assert runs["perfect"].data.metrics["exact_match"] == 1.0

    # the per-sample table (as mlflow.evaluate's) and the split as the run's dataset input
    for model, run in runs.items():
        client = _client(uri)
        path = client.download_artifacts(run.info.run_id, "eval_results_table.json", str(tmp_path / model))
        table = pd.read_json(path, orient="split")
        judged = Warehouse(home / "warehouse.duckdb").read(
            "judgements", {"benchmark_split": "smoke/extra", "model": model})
        assert sorted(table["sample_id"]) == sorted(judged["sample_id"].unique()) and len(table) == 3
        by = judged[judged["metric"] == "exact_match"].set_index("sample_id")
        for row in table.itertuples(index=False):
            assert row.exact_match == by.loc[row.sample_id, "score"] and row.target == by.loc[row.sample_id, "target"]
        (ds,) = run.inputs.dataset_inputs
        assert ds.dataset.name == "smoke/extra" and ds.dataset.source_type
        assert {t.key: t.value for t in ds.tags}["mlflow.data.context"] == "evaluation"
    assert (tmp_path / "mlartifacts").is_dir()  # a SQLite store's artifacts beside its file

    # a cached re-run changes no number: the partitions' runs are found, not logged again
    r = cli("run", "--split", "smoke/extra", "--model", "perfect", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    assert len(_runs(uri)) == 2

    # a try (--limit) is never a result: not logged unless include_tries
    r = cli("run", "--split", "smoke/extra", "--model", "perfect", "--limit", "1", "--no-progress")
    assert r.exit_code == 0, r.output
    assert len(_runs(uri)) == 2


@pytest.mark.slow
def test_a_tracker_that_is_down_warns_and_keeps_the_metrics(home, write_config, monkeypatch, instance):
    from dagster import AssetKey

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    write_config(smoke_benchmark(limit=2) + MODELS + "mlflow: {tracking_uri: 'http://127.0.0.1:9'}\n")
    r = cli_in_process(monkeypatch)("run", "--split", "smoke/extra", "--model", "perfect", "--no-progress")
    assert r.exit_code == 0, r.output
    meta = instance.get_latest_materialization_event(AssetKey("metrics")).asset_materialization.metadata
    assert meta["mlflow"].value.startswith("not logged:")
    assert "exact_match" in meta
    # the CLI says so, in one line
    (line,) = [x for x in r.output.splitlines() if x.startswith("mlflow:")]
    assert line.startswith("mlflow: 1 partition(s) not logged to http://127.0.0.1:9: ") and \
        line.endswith("(the numbers are in the warehouse; re-run when the tracker is back)")


@pytest.mark.slow
def test_a_failed_partition_is_logged_as_a_failed_run(home, write_config, monkeypatch, tmp_path):
    write_config(smoke_benchmark(limit=2) + "models:\n  down: {runner: litellm, model: openai/m, api_base: "
                 "'http://127.0.0.1:9/v1', max_retries: 0, timeout_s: 2}\n"
                 "mlflow: {tracking_uri: 'sqlite:///mlruns.db', experiment: evals}\n")
    r = cli_in_process(monkeypatch)("run", "--split", "smoke/extra", "--model", "down", "--no-progress")
    runs = _runs(f"sqlite:///{tmp_path / 'mlruns.db'}")
    failed = [x for x in runs if x.info.status == "FAILED"]
    assert r.exit_code == 1 and len(failed) == 1, (r.output, [x.info.status for x in runs])
    assert failed[0].data.params["model"] == "down" and failed[0].data.params["benchmark_split"] == "smoke/extra"
    assert "every one of the 2 sample(s) failed" in failed[0].data.tags["evalpipe.error"]


def test_metric_values_leave_missing_numbers_out_and_clean_names():
    from evalpipe.interop.mlflow_runs import metric_key, metric_values

    frame = pd.DataFrame([
        {"metric": "accuracy", "slice": "all", "value": 0.5, "n": 4, "stderr": 0.25, "ci_low": 0.1, "ci_high": 0.9,
         "n_errors": 2},
        {"metric": "accuracy", "slice": "category=math (hard)", "value": 1.0, "n": 1, "stderr": float("nan"),
         "ci_low": None, "ci_high": None},
        {"metric": "cost_usd", "slice": "all", "value": float("nan"), "n": 0, "stderr": None, "ci_low": None,
         "ci_high": None},
    ])
    values = metric_values(frame)
    assert values["accuracy"] == 0.5 and values["accuracy.ci_high"] == 0.9 and values["accuracy.n"] == 4
    assert values["accuracy.n_errors"] == 2  # the error count travels with the value
    assert values["accuracy/category_math _hard_"] == 1.0
    assert "accuracy/category_math _hard_.stderr" not in values  # NaN is left out, never logged as 0
    assert "cost_usd" not in values and values["cost_usd.n"] == 0
    assert metric_key("a" * 300) == "a" * 250


@pytest.mark.parametrize("block, message", [
    ("mlflow: {experiment: ''}", "experiment"),
    ("mlflow: {tracking_url: 'sqlite:///x.db'}", "tracking_url"),
])
def test_bad_mlflow_settings_are_refused_at_load(tmp_path, block, message):
    from evalpipe.core.errors import ConfigError
    from evalpipe.project import Project

    p = tmp_path / "evals.yaml"
    p.write_text(smoke_benchmark(limit=1) + MODELS + block + "\n")
    with pytest.raises(ConfigError, match=message):
        Project.from_file(p, home=tmp_path / "home")
