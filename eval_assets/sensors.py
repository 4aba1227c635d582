"""Sensors, built over a project (eval_assets/factory.py). `sync_models_sensor` turns the config's benchmark
splits and models into `benchmark_split` and `model` partitions; `checkpoint_sensor` turns new model checkpoints
into partitions and evaluation runs (docs/operations.md). A project read from a file is re-read each tick (cached
by mtime), so editing evals.yaml adds partitions without reloading the code location."""
from __future__ import annotations

import json

from dagster import (DefaultSensorStatus, RunFailureSensorContext, RunRequest, SensorEvaluationContext, SensorResult,
                     SkipReason, run_failure_sensor, sensor)

from eval_assets.batch import BATCH_JOB, BATCH_TAG, batch_run_config, batch_size, batches, evaluate_batch_job
from eval_assets.jobs import dataset_job, evaluate_job
from evalpipe.project import Project
from partitions import BENCHMARK_SPLIT, MODEL, benchmark_split_partitions, model_partitions


def models_to_add(configured: list[str], existing: list[str]) -> list[str]:
    have = set(existing)
    return [m for m in configured if m not in have]


def config_sync_tick(context: SensorEvaluationContext, project: Project):
    """One tick of the config-sync sensor: the config's splits and models that are not partitions yet."""
    cfg = project.reload().config
    splits = models_to_add(sorted(cfg.splits), context.instance.get_dynamic_partitions(BENCHMARK_SPLIT))
    models = models_to_add(list(cfg.models), context.instance.get_dynamic_partitions(MODEL))
    if not splits and not models:
        return SkipReason("every configured benchmark split and model is already a partition")
    requests = []
    if splits:
        context.log.info(f"adding benchmark_split partitions: {', '.join(splits)}")
        requests.append(benchmark_split_partitions.build_add_request(splits))
    if models:
        context.log.info(f"adding model partitions: {', '.join(models)}")
        requests.append(model_partitions.build_add_request(models))
    return SensorResult(dynamic_partitions_requests=requests)


def sync_models_sensor(project: Project):
    """The config-sync sensor of a project (its name predates benchmark splits being dynamic too)."""

    @sensor(name="sync_models_sensor", minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
            description="Adds every benchmark split and model of the config as a `benchmark_split` / `model` "
                        "partition (the file is re-read each tick).")
    def _sync(context: SensorEvaluationContext):
        return config_sync_tick(context, project)

    return _sync


# ---- checkpoints -----------------------------------------------------------------------------------------------------
def _datasets_in_warehouse(project: Project, split_keys: list[str]) -> set[str]:
    """Splits whose `dataset` partition file exists (what the `evaluate` job reads its input from)."""
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(project.warehouse)
    return {s for s in split_keys if wh.partition_file("datasets", {"benchmark_split": s}).exists()}


def checkpoint_tick(context: SensorEvaluationContext, project: Project):
    """One tick of the checkpoint sensor (a plain function: tests call it with a built sensor context)."""
    from evalpipe.pipeline.checkpoints import checkpoint_settings, plan_tick
    from evalpipe.store.models_registry import register_model
    from partitions import eval_key

    project = project.reload()
    cfg = project.config
    settings = checkpoint_settings(cfg)
    if settings is None:
        return SkipReason("no `checkpoints:` section in the config")
    try:
        cursor = json.loads(context.cursor) if context.cursor else {}
    except ValueError:
        cursor = {}
    plan = plan_tick(cfg, settings, cursor, _datasets_in_warehouse(project, settings.splits))
    for line in plan.logs:
        context.log.info(line)
    plan = _without_try_keys(context, plan)
    for model in plan.register:
        register_model(model)  # before the runs: their processes look the model up in the registry
    new_partitions = models_to_add([m.key for m in plan.register], context.instance.get_dynamic_partitions(MODEL))
    # the runs' splits must be partitions before the runs start (the config-sync sensor may not have ticked yet)
    new_splits = models_to_add(sorted({r.split for r in plan.requests}),
                               context.instance.get_dynamic_partitions(BENCHMARK_SPLIT))
    runs = [RunRequest(job_name="load_dataset", partition_key=r.split, run_key=r.run_key)
            for r in plan.requests if r.job != "evaluate"]
    runs += batched_requests([r for r in plan.requests if r.job == "evaluate"], batch_size(cfg))
    return SensorResult(
        run_requests=runs, cursor=json.dumps(plan.cursor),
        dynamic_partitions_requests=([benchmark_split_partitions.build_add_request(new_splits)] if new_splits else [])
        + ([model_partitions.build_add_request(new_partitions)] if new_partitions else []) or None,
    )


def batched_requests(requests: list, size: int) -> list[RunRequest]:
    """[sweeps] The tick's (checkpoint, split) evaluations as `evaluate_batch` runs of up to `size` partitions
    (eval_assets/batch.py): 100 checkpoints arriving at once are a few Dagster runs, not 100 x splits. Each run's
    key joins its requests' keys, so a tick evaluated again launches nothing twice."""
    from evalpipe.core.fingerprint import fingerprint
    from partitions import eval_key

    out = []
    for part in batches(requests, size):
        if len(part) == 1:  # one partition: the partitioned `evaluate` run, as the asset pages show it
            r = part[0]
            out.append(RunRequest(job_name="evaluate", partition_key=eval_key(r.split, r.model), run_key=r.run_key,
                                  tags={"evals/checkpoint": r.model}))
            continue
        keys = [eval_key(r.split, r.model) for r in part]
        out.append(RunRequest(job_name=BATCH_JOB, run_config=batch_run_config(keys),
                              run_key=f"batch:{fingerprint(sorted(r.run_key for r in part), 16)}",
                              tags={"evals/checkpoint": ",".join(sorted({r.model for r in part}))[:200],
                                    BATCH_TAG: str(len(part))}))
    return out


def _without_try_keys(context: SensorEvaluationContext, plan):
    """The try rule (evalpipe/project/tries.py): a checkpoint is a real model, so a folder whose key reads as a try
    (`step@limit2` would be evaluated on 2 samples and never ranked) is skipped, with a line saying why; the cursor
    keeps it as seen (a renamed folder is a new checkpoint)."""
    from evalpipe.project.tries import refuse_try_key

    refused = {}
    for key in [m.key for m in plan.register] + [r.model for r in plan.requests if r.job == "evaluate"]:
        why = refuse_try_key(key, f"skipping checkpoint {key}")
        if why:
            refused[key] = why
    for key, why in refused.items():
        context.log.warning(why)
    if not refused:
        return plan
    plan.register = [m for m in plan.register if m.key not in refused]
    plan.requests = [r for r in plan.requests if r.job != "evaluate" or r.model not in refused]
    return plan


def checkpoint_sensor(project: Project):
    """The checkpoint sensor of a project."""

    @sensor(name="checkpoint_sensor", jobs=[evaluate_job, dataset_job, evaluate_batch_job], minimum_interval_seconds=60,
            default_status=DefaultSensorStatus.RUNNING,
            description="Turns each new complete checkpoint (config `checkpoints:`) into a `model` partition and "
                        "evaluates it on the configured benchmark splits, once per (checkpoint, split).")
    def _checkpoints(context: SensorEvaluationContext):
        return checkpoint_tick(context, project)

    return _checkpoints


def mlflow_failed_runs_sensor(project: Project):
    """[interop] A failed run launched from the UI or by the daemon (a materialization, the `evaluate` job, a batch
    or a backfill): its failed partitions as FAILED MLflow runs (evalpipe/pipeline/tracking.py; once per Dagster
    run and partition, whoever logs first). Only in a project with `mlflow:` (eval_assets/factory.py)."""
    @run_failure_sensor(name="mlflow_failed_runs_sensor", default_status=DefaultSensorStatus.RUNNING,
                        minimum_interval_seconds=30)
    def _sensor(context: RunFailureSensorContext):
        from evalpipe.pipeline.tracking import report_dagster_run
        from evalpipe.store.warehouse import Warehouse

        for line in report_dagster_run(project.config, Warehouse(project.warehouse), context.instance,
                                       context.dagster_run):
            context.log.warning(line)

    return _sensor
