"""Sensors. `sync_models_sensor` turns the config file's models into `model` partitions; `checkpoint_sensor`
turns new model checkpoints into partitions and evaluation runs (docs/operations.md)."""
from __future__ import annotations

import json

from dagster import DefaultSensorStatus, RunRequest, SensorEvaluationContext, SensorResult, SkipReason, sensor

from eval_assets.jobs import dataset_job, evaluate_job
from evalpipe.project import load_config
from partitions import MODEL, model_partitions


def models_to_add(configured: list[str], existing: list[str]) -> list[str]:
    have = set(existing)
    return [m for m in configured if m not in have]


@sensor(name="sync_models_sensor", minimum_interval_seconds=30, default_status=DefaultSensorStatus.RUNNING,
        description="Adds every model of the config file as a `model` partition (the file is re-read each tick).")
def sync_models_sensor(context: SensorEvaluationContext):
    new = models_to_add(list(load_config().models), context.instance.get_dynamic_partitions(MODEL))
    if not new:
        return SkipReason("every configured model is already a partition")
    context.log.info(f"adding model partitions: {', '.join(new)}")
    return SensorResult(dynamic_partitions_requests=[model_partitions.build_add_request(new)])


# ---- checkpoints -----------------------------------------------------------------------------------------------------
def _datasets_in_warehouse(split_keys: list[str]) -> set[str]:
    """Splits whose `dataset` partition file exists (what the `evaluate` job reads its input from)."""
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path())
    return {s for s in split_keys if wh.partition_file("datasets", {"benchmark_split": s}).exists()}


def checkpoint_tick(context: SensorEvaluationContext, cfg=None):
    """One tick of the checkpoint sensor (a plain function: tests call it with a built sensor context)."""
    from evalpipe.pipeline.checkpoints import checkpoint_settings, plan_tick
    from evalpipe.store.models_registry import register_model
    from partitions import eval_key

    cfg = cfg or load_config()
    settings = checkpoint_settings(cfg)
    if settings is None:
        return SkipReason("no `checkpoints:` section in the config")
    try:
        cursor = json.loads(context.cursor) if context.cursor else {}
    except ValueError:
        cursor = {}
    plan = plan_tick(cfg, settings, cursor, _datasets_in_warehouse(settings.splits))
    for line in plan.logs:
        context.log.info(line)
    for model in plan.register:
        register_model(model)  # before the runs: their processes look the model up in the registry
    new_partitions = models_to_add([m.key for m in plan.register], context.instance.get_dynamic_partitions(MODEL))
    runs = [
        RunRequest(job_name="evaluate", partition_key=eval_key(r.split, r.model), run_key=r.run_key,
                   tags={"evals/checkpoint": r.model})
        if r.job == "evaluate" else
        RunRequest(job_name="load_dataset", partition_key=r.split, run_key=r.run_key)
        for r in plan.requests
    ]
    return SensorResult(
        run_requests=runs, cursor=json.dumps(plan.cursor),
        dynamic_partitions_requests=[model_partitions.build_add_request(new_partitions)] if new_partitions else None,
    )


@sensor(name="checkpoint_sensor", jobs=[evaluate_job, dataset_job], minimum_interval_seconds=60,
        default_status=DefaultSensorStatus.RUNNING,
        description="Turns each new complete checkpoint (config `checkpoints:`) into a `model` partition and "
                    "evaluates it on the configured benchmark splits, once per (checkpoint, split).")
def checkpoint_sensor(context: SensorEvaluationContext):
    return checkpoint_tick(context)
