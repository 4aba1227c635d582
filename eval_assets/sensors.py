"""Sensors. `sync_models_sensor` turns the config file's models into `model` partitions."""
from __future__ import annotations

from dagster import DefaultSensorStatus, SensorEvaluationContext, SensorResult, SkipReason, sensor

from evalpipe.config import load_config
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
