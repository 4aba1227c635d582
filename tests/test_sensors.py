"""The checkpoint sensor on a real (temp) instance: new checkpoint, duplicates, half-written folders, registry file."""
import json
import os

import pytest
from dagster import build_sensor_context

from tests.helpers.configs import smoke_benchmark

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      test: {{path: {repo}/data/smoke/test.jsonl}}
      extra: {{path: {repo}/data/smoke/test.jsonl, limit: 4}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
    metrics: [exact_match]
models:
  perfect: {{runner: echo, reply: target}}
checkpoints:
  dir: {ckpts}
  registry_file: {registry}
  runner: echo               # the local runner in real use; echo keeps the test fast and offline
  options: {{reply: target}}
  benchmarks: [smoke/extra]
"""


def _hf_checkpoint(path, config="{}", weights=b"\0" * 64):
    path.mkdir(parents=True)
    (path / "config.json").write_text(config)
    (path / "model.safetensors").write_bytes(weights)


@pytest.fixture
def setup(tmp_path, write_config, instance):
    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    registry = tmp_path / "models.yaml"
    write_config(CONFIG.format(repo="{repo}", ckpts=ckpts, registry=registry))
    return ckpts, registry, instance


def _tick(instance, cursor=None):
    from eval_assets.sensors import checkpoint_sensor
    from evalpipe.project import Project

    with build_sensor_context(instance=instance, cursor=cursor) as ctx:
        result = checkpoint_sensor(Project.from_file())(ctx)
    return result


def _apply(instance, result):
    """What the daemon does with a SensorResult: add the partitions (the runs are checked by the caller)."""
    for req in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
    return result.cursor


def test_new_checkpoint_becomes_a_partition_and_runs_once(setup, capfd):
    from dagster import AssetKey

    from eval_assets.launch import CHAIN, run_assets
    from evalpipe.project import load_config
    from evalpipe.store.models_registry import discovered_models
    from partitions import MODEL

    ckpts, registry, instance = setup
    _hf_checkpoint(ckpts / "run1-step[100]")
    (ckpts / "half").mkdir()
    (ckpts / "half" / "config.json").write_text('{"hidden_size": ')  # being written
    (ckpts / "copying").mkdir()
    (ckpts / "copying" / "config.json").write_text("{}")
    (ckpts / "copying" / "model.safetensors.tmp").write_bytes(b"\0" * 10)

    # tick 1: everything is new; nothing is requested before its files were seen unchanged for a tick
    r1 = _tick(instance)
    assert not r1.run_requests and not r1.dynamic_partitions_requests
    cursor = _apply(instance, r1)

    # tick 2: the stable HF folder is a model; its split's dataset doesn't exist yet, so that is loaded first
    capfd.readouterr()
    r2 = _tick(instance, cursor)
    logs = capfd.readouterr().err  # the sensor's log lines (Dagster's console logger writes to stderr)
    assert "skipping checkpoint half: config.json is not valid JSON" in logs
    assert "skipping checkpoint copying: still being written (model.safetensors.tmp)" in logs
    key = "run1-step-100"  # sanitised: '[', ']' are not allowed in partition keys
    # the split becomes a partition too (benchmark_split is dynamic: the runs need it before the sync sensor ticks)
    assert [(r.partitions_def_name, list(r.partition_keys)) for r in r2.dynamic_partitions_requests] == [
        ("benchmark_split", ["smoke/extra"]), ("model", [key])]
    assert [(r.job_name, r.partition_key, r.run_key) for r in r2.run_requests] == [
        ("load_dataset", "smoke/extra", "checkpoint-dataset:smoke/extra")]
    model = discovered_models()[key]
    assert model.runner == "echo" and model.model == str((ckpts / "run1-step[100]").resolve())
    assert load_config().model(key) == model  # any process can resolve it now
    cursor = _apply(instance, r2)
    assert key in instance.get_dynamic_partitions(MODEL)

    # the daemon would run load_dataset; do it here, then the evaluation is requested exactly once
    assert run_assets(["dataset"], "smoke/extra", instance).success
    r3 = _tick(instance, cursor)
    assert [(r.job_name, r.run_key) for r in r3.run_requests] == [("evaluate", f"checkpoint:{key}|smoke/extra")]
    req = r3.run_requests[0]
    assert req.partition_key == "smoke/extra|run1-step-100" and req.tags["evals/checkpoint"] == key
    cursor = _apply(instance, r3)
    # and the requested partition really evaluates, with the discovered model's runner settings
    run = run_assets(CHAIN, req.partition_key, instance)
    assert run.success
    ev = instance.get_latest_materialization_event(AssetKey("metrics"))
    assert ev.asset_materialization.metadata["exact_match"].value == 1.0

    # duplicates: later ticks request nothing for it again, even with the folder touched
    r4 = _tick(instance, cursor)
    assert not r4.run_requests and not r4.dynamic_partitions_requests
    cursor = _apply(instance, r4)

    # the half-written folders complete: picked up after one stable tick
    (ckpts / "half" / "config.json").write_text('{"hidden_size": 8}')
    (ckpts / "half" / "model.safetensors").write_bytes(b"\0" * 8)
    os.rename(ckpts / "copying" / "model.safetensors.tmp", ckpts / "copying" / "model.safetensors")
    r5 = _tick(instance, cursor)
    assert not r5.run_requests
    cursor = _apply(instance, r5)
    r6 = _tick(instance, cursor)
    # [sweeps] two evaluations in one tick: one `evaluate_batch` run that carries both (eval_assets/batch.py)
    assert [r.job_name for r in r6.run_requests] == ["evaluate_batch"]
    assert sorted(r6.run_requests[0].run_config["ops"]["evaluate_partitions"]["config"]["partitions"]) == [
        "smoke/extra|copying", "smoke/extra|half"]
    assert sorted(k for r in r6.dynamic_partitions_requests for k in r.partition_keys) == ["copying", "half"]


def test_marker_gguf_and_registry_file(setup, capfd):
    from evalpipe.store.models_registry import discovered_models

    ckpts, registry, instance = setup
    (ckpts / "marked").mkdir()
    (ckpts / "marked" / "COMPLETE").write_text("")  # the writer says it's done: no stability wait
    (ckpts / "tiny.gguf").write_bytes(b"GGUF" + b"\0" * 32)
    (ckpts / ".staging").mkdir()  # hidden folders are a writer's business
    (ckpts / "notes.txt").write_text("not a checkpoint")
    registry.write_text("- name: served-ckpt\n  runner: echo\n  model: my-org/served\n  api_base: http://127.0.0.1:9/v1\n")
    r1 = _tick(instance)
    keys = sorted(k for r in r1.dynamic_partitions_requests if r.partitions_def_name == "model" for k in r.partition_keys)
    assert keys == ["marked", "served-ckpt"]  # tiny.gguf waits one tick for a stable size
    assert discovered_models()["served-ckpt"].api_base == "http://127.0.0.1:9/v1"
    cursor = _apply(instance, r1)
    # a broken registry file is skipped (logged) and doesn't lose what was found before
    registry.write_text("- name: [unclosed\n")
    capfd.readouterr()
    r2 = _tick(instance, cursor)
    assert "skipping the models registry this tick" in capfd.readouterr().err
    assert [k for r in r2.dynamic_partitions_requests if r.partitions_def_name == "model"
            for k in r.partition_keys] == ["tiny.gguf"]
    state = json.loads(r2.cursor)
    assert set(state["models"]) == {"marked", "served-ckpt", "tiny.gguf"}


def test_no_checkpoints_section_skips(write_config, instance):
    from dagster import SkipReason

    write_config("benchmarks: {}\nmodels: {m: {runner: echo}}\n")
    assert isinstance(_tick(instance), SkipReason)


def test_bad_checkpoints_section_is_a_config_error(write_config):
    from evalpipe.pipeline.checkpoints import checkpoint_settings
    from evalpipe.project import load_config
    from evalpipe.core.errors import ConfigError

    write_config("benchmarks: {}\nmodels: {}\ncheckpoints: {dir: /x, benchmarks: [nope]}\n")
    with pytest.raises(ConfigError, match="neither a benchmark"):
        checkpoint_settings(load_config())
    write_config("benchmarks: {}\nmodels: {}\ncheckpoints: {folder: /x}\n")
    with pytest.raises(ConfigError, match="checkpoints.folder: unknown key"):  # found when the config loads
        checkpoint_settings(load_config())


def test_schedules_refresh_and_retry_failed(instance, write_config):
    from dagster import build_schedule_context

    from eval_assets.launch import CHAIN, run_assets, sync_model_partitions
    from eval_assets.schedules import failed_partitions, retry_failed_partitions_schedule

    write_config(smoke_benchmark(limit=2) + """models:
  good: {runner: echo}
  bad: {runner: test-sensors-broken}   # can't start: its partition fails (an unknown runner is a config error)
""")
    from evalpipe.runners import register_runner

    def broken(model):
        raise RuntimeError("cannot start the model server")

    register_runner("test-sensors-broken", broken, replace=True)
    sync_model_partitions(instance, ["good", "bad"])
    assert run_assets(["dataset"], "smoke/extra", instance).success
    assert run_assets(CHAIN, "smoke/extra|good", instance).success
    failed = run_assets(CHAIN, "smoke/extra|bad", instance)
    assert not failed.success
    assert failed_partitions(instance) == [("smoke/extra", "bad", failed.run_id)]
    with build_schedule_context(instance=instance) as ctx:
        reqs = retry_failed_partitions_schedule(ctx)
    assert [(r.partition_key, r.run_key) for r in reqs] == [("smoke/extra|bad", f"retry:{failed.run_id}")]
    # the leaderboard follows metrics by declarative automation now: tests/test_cli_ux_dagster.py


@pytest.mark.slow
def test_a_hundred_checkpoints_at_once_are_evaluated_in_batched_runs(setup):
    """[sweeps] 100 checkpoints arriving in one tick: `evaluate_batch` runs of up to `sweep_batch_partitions` (64)
    partitions each, 2 runs, not 100; run as the daemon would, every checkpoint is materialized on its own."""
    from dagster import AssetKey, AssetRecordsFilter

    from eval_assets.batch import BATCH_JOB, parse_key
    from eval_assets.launch import run_assets, run_batch
    from evalpipe.project import Project

    ckpts, registry, instance = setup
    for i in range(100):
        _hf_checkpoint(ckpts / f"step-{i:03d}")
    cursor = _apply(instance, _tick(instance))  # tick 1: seen once
    cursor = _apply(instance, _tick(instance, cursor))  # tick 2: registered; the split's dataset is requested
    assert run_assets(["dataset"], "smoke/extra", instance).success
    r = _tick(instance, cursor)
    assert [q.job_name for q in r.run_requests] == [BATCH_JOB, BATCH_JOB]
    keys = [q.run_config["ops"]["evaluate_partitions"]["config"]["partitions"] for q in r.run_requests]
    assert sorted(map(len, keys)) == [36, 64]
    assert sorted(k for part in keys for k in part) == [f"smoke/extra|step-{i:03d}" for i in range(100)]
    project = Project.from_file()
    for part in keys:
        assert run_batch([parse_key(k) for k in part], instance, {}, None, project).success
    recs = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("metrics")), limit=1000).records
    assert {x.asset_materialization.partition for x in recs} == {k for part in keys for k in part}
    assert len({x.run_id for x in recs}) == 2
