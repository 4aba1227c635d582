"""The Definitions factory: the whole Dagster code location of one project.

    defs = build_definitions(Project.from_file())          # the code location (eval_assets/definitions.py)
    defs = build_definitions(Project.from_dict({...}))      # the Python API: a config built in memory

Assets, checks, jobs and schedules are the same for every project; what depends on the project is bound here:
the resources (its config, its warehouse), the `judgements` code version (its judges and metrics), the asset checks
that apply to it (`tool_integration_gates` only with a tool_integration metric) and the sensors
(its file's splits, models and checkpoints). Partitions are dynamic (partitions/__init__.py), so two projects on
one instance share the graph and the warehouse.
"""
from __future__ import annotations

import warnings

from dagster import Definitions, PreviewWarning

from eval_assets.assets import eval_assets
from eval_assets.batch import evaluate_batch_job
from eval_assets.checks import eval_checks
from eval_assets.reviews import pairwise, reviews
from eval_assets.jobs import dataset_job, evaluate_job, forget_model_job, leaderboard_job
from eval_assets.schedules import leaderboard_automation_sensor, retry_failed_partitions_schedule
from eval_assets.sensors import checkpoint_sensor, mlflow_failed_runs_sensor, sync_models_sensor
from evalpipe.project import Project
from resources import project_resources

# partitioned asset checks are a Dagster preview feature we rely on on purpose: no notice in every process's log
warnings.filterwarnings("ignore", category=PreviewWarning)


def build_definitions(project: Project) -> Definitions:
    """Everything Dagster loads for `project`: assets, asset checks, jobs, sensors, schedules, resources."""
    return Definitions(
        assets=[*eval_assets(project), pairwise, reviews],  # eval_assets/reviews.py
        asset_checks=eval_checks(project),  # each declared only where it applies (tool gates: tool splits)
        jobs=[evaluate_job, dataset_job, leaderboard_job, forget_model_job, evaluate_batch_job],  # [sweeps] batch.py
        sensors=[sync_models_sensor(project), checkpoint_sensor(project), leaderboard_automation_sensor,
                 *([mlflow_failed_runs_sensor(project)] if project.config.mlflow else [])],  # [interop] MLflow
        schedules=[retry_failed_partitions_schedule],
        resources=project_resources(project),
        # Selections made in the UI (Materialize, backfills) run in Dagster's implicit asset job, whose default is
        # the multiprocess executor: a fresh Python process and a full import of this code location per step
        # (~3-5 s each here, x5 steps). The `evaluate` job's executor instead (in_process by default, or
        # EVALS_EXECUTOR's celery/k8s): a partition's steps run one after another anyway, so nothing is lost.
        executor=evaluate_job.executor_def,
    )
