"""The project object and the Definitions factory (issue 21): a config built in memory runs on the same graph,
instance and warehouse as the code location's file, under split keys that file never names."""
import pytest

SMOKE = {"adapter": "file", "options": {"path": "data/smoke/test.jsonl", "limit": 3,
                                        "columns": {"prompt": "question", "target": "answer", "id": "id"}},
         "metrics": ["exact_match"]}


def in_memory(**judges):
    cfg = {"benchmarks": {"notebook": {**SMOKE, "splits": ["five"]}}, "models": {"echo_agent": {"runner": "echo"}}}
    if judges:
        cfg["judges"] = judges
    return cfg


def test_from_dict_is_checked_like_a_file(project_from):
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"<in-memory config>.*adapter"):
        project_from({"benchmarks": {"b": {"adaptr": "file"}}})
    p = project_from(in_memory())
    assert p.config_path is None and p.split_keys == ["notebook/five"]
    assert p.config.split("notebook/five").resolve("data/smoke/test.jsonl").exists()  # relative to base_dir


def test_from_file_takes_explicit_locations_over_the_environment(tmp_path, monkeypatch):
    from evalpipe.project import Project

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "env_home"))
    monkeypatch.setenv("EVALS_WAREHOUSE", str(tmp_path / "env.duckdb"))
    env = Project.from_file()
    assert env.home == tmp_path / "env_home" and env.warehouse == tmp_path / "env.duckdb"
    own = Project.from_file(home=tmp_path / "mine")
    assert own.home == tmp_path / "mine" and own.warehouse == tmp_path / "mine" / "warehouse.duckdb"
    assert own.artifacts_root == tmp_path / "mine" / "artifacts"


def test_definitions_bind_the_project(project_from):
    from dagster import AssetKey

    from eval_assets.factory import build_definitions

    from evalpipe.pipeline.fingerprints import split_judging_version

    strict_project = project_from(in_memory(j={"runner": "echo", "model": "a"}))
    cfg = in_memory(j={"runner": "echo", "model": "a"})
    cfg["benchmarks"]["notebook"]["metrics"] = [{"name": "exact_match", "case_sensitive": True}]
    other_project = project_from(cfg)
    strict = build_definitions(strict_project)
    assert AssetKey("metric_settings") in strict.resolve_asset_graph().get_all_asset_keys()
    # what decides the verdicts is the project's (per split, the data version of `metric_settings`), not the file's
    assert (split_judging_version(strict_project.config, "notebook/five")
            != split_judging_version(other_project.config, "notebook/five"))
    res = strict.resources
    assert res["eval_config"].project.split_keys == ["notebook/five"]
    assert {s.name for s in strict.sensors} >= {"sync_models_sensor", "checkpoint_sensor"}


@pytest.mark.slow
def test_in_memory_project_runs_splits_the_file_never_named(project_from, home):
    from dagster import DagsterInstance

    from eval_assets.launch import evaluate
    from evalpipe.store.warehouse import Warehouse
    from partitions import BENCHMARK_SPLIT, MODEL

    project = project_from(in_memory())
    with DagsterInstance.get() as instance:
        result = evaluate(project, ["notebook/five"], ["echo_agent"], instance=instance)
        assert result.success, result
        # the UI lists them: the keys are dynamic partitions of the shared instance
        assert "notebook/five" in instance.get_dynamic_partitions(BENCHMARK_SPLIT)
        assert "echo_agent" in instance.get_dynamic_partitions(MODEL)
    metrics = Warehouse(project.warehouse).query("SELECT * FROM metrics WHERE metric = 'exact_match'")
    assert set(metrics["benchmark_split"]) == {"notebook/five"} and project.warehouse.parent == home


def test_config_sync_sensor_adds_the_files_splits_and_models(instance, write_config):
    from dagster import build_sensor_context

    from eval_assets.sensors import sync_models_sensor
    from evalpipe.project import Project

    path = write_config("""
benchmarks:
  smoke:
    adapter: file
    splits: {extra: {path: {repo}/data/smoke/test.jsonl}}
    options: {columns: {prompt: question, target: answer, id: id}}
models:
  good: {runner: echo}
""")
    sensor = sync_models_sensor(Project.from_file(path))
    with build_sensor_context(instance=instance) as ctx:
        result = sensor(ctx)
    added = {(r.partitions_def_name, tuple(r.partition_keys)) for r in result.dynamic_partitions_requests}
    assert added == {("benchmark_split", ("smoke/extra",)), ("model", ("good",))}
