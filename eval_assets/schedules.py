"""Keeping things current: the leaderboard follows `metrics` by declarative automation (the asset's
`automation_condition`, evaluated by `leaderboard_automation_sensor`), and an opt-in schedule retries
partitions whose latest run failed."""
from __future__ import annotations

from dagster import (AssetSelection, AutomationConditionSensorDefinition, DagsterRunStatus, DefaultScheduleStatus,
                     DefaultSensorStatus, RunRequest, RunsFilter, ScheduleEvaluationContext, SkipReason, schedule)

from eval_assets.jobs import evaluate_job
from partitions import BENCHMARK_SPLIT, MODEL, eval_key

# Runs that evaluate one (benchmark_split, model) partition: the `evaluate` job (UI, sensors, backfills) and
# the CLI's in-process runs.
EVAL_JOBS = ("evaluate", "__ephemeral_asset_job__")
SPLIT_TAG, MODEL_TAG = f"dagster/partition/{BENCHMARK_SPLIT}", f"dagster/partition/{MODEL}"


# Evaluates the leaderboard's automation condition (any metrics partition updated since the last rebuild) every
# 30 s under the daemon (`make dev`), so runs launched from the UI, backfills and the sensors keep it current.
leaderboard_automation_sensor = AutomationConditionSensorDefinition(
    "leaderboard_automation_sensor", target=AssetSelection.assets("leaderboard"),
    default_status=DefaultSensorStatus.RUNNING, minimum_interval_seconds=30,
    description="Rebuilds the leaderboard when a metrics partition changes (declarative automation).")


def failed_partitions(instance, limit: int = 1000) -> list[tuple[str, str, str]]:
    """(benchmark_split, model, failed run id) for each partition whose most recent evaluation run failed.
    A partition with a run still queued or in progress is left alone."""
    latest: dict[tuple[str, str], object] = {}
    records = instance.get_run_records(RunsFilter(job_name=None), limit=limit)  # newest first
    for rec in records:
        run = rec.dagster_run
        if run.job_name not in EVAL_JOBS or SPLIT_TAG not in run.tags or MODEL_TAG not in run.tags:
            continue
        key = (run.tags[SPLIT_TAG], run.tags[MODEL_TAG])
        latest.setdefault(key, run)
    models = set(instance.get_dynamic_partitions(MODEL))  # (a model that produced nothing is removed: launch.py)
    return [(s, m, run.run_id) for (s, m), run in sorted(latest.items())
            if run.status == DagsterRunStatus.FAILURE and m in models]


@schedule(name="retry_failed_partitions_schedule", job=evaluate_job, cron_schedule="30 3 * * *",
          default_status=DefaultScheduleStatus.STOPPED,
          description="Nightly: re-runs each partition whose latest evaluation failed (once per failed run). "
                      "Off by default; turn it on in the UI.")
def retry_failed_partitions_schedule(context: ScheduleEvaluationContext):
    todo = failed_partitions(context.instance)
    if not todo:
        return SkipReason("no partition's latest run failed")
    return [RunRequest(partition_key=eval_key(s, m), run_key=f"retry:{run_id}", tags={"evals/retry_of": run_id})
            for s, m, run_id in todo]
