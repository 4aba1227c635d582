import os
from typing import Any, List

from dagster import (AssetSelection, Config, MetadataValue, OpExecutionContext, define_asset_job, in_process_executor,
                     job, op)
from pydantic import Field

from evalpipe.core.errors import ConfigError
from evalpipe.pipeline import stages
from evalpipe.project import Project
from evalpipe.store.forget import ModelPlan, check_forget, forget, plan_forget
from evalpipe.store.warehouse import Warehouse
from partitions import BENCHMARK_SPLIT, MODEL, benchmark_split_partitions, eval_partitions
from resources import EvalConfigResource

# Which engine executes the steps of `evaluate` runs (docs/deployment.md): `in_process` (default, one machine),
# `celery` (dagster-celery: steps go to celery workers through a broker, e.g. Redis; EVALS_CELERY_BROKER and
# EVALS_CELERY_BACKEND, default the broker) or `k8s` (dagster-k8s: a Kubernetes job per step). Every process
# that loads this code location (webserver, daemon, run workers, celery workers) must see the same value.
EXECUTOR_ENV = "EVALS_EXECUTOR"


def _executor():
    kind = (os.environ.get(EXECUTOR_ENV) or "in_process").strip().lower()
    if kind == "celery":
        from dagster_celery import celery_executor

        broker = os.environ.get("EVALS_CELERY_BROKER", "redis://127.0.0.1:6379/0")
        return celery_executor.configured({"broker": broker,
                                           "backend": os.environ.get("EVALS_CELERY_BACKEND", broker)},
                                          name="celery_executor")
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor

        return k8s_job_executor
    if kind != "in_process":
        raise ValueError(f"{EXECUTOR_ENV}={kind!r}: use in_process, celery or k8s")
    # The four steps of a partition run one after another anyway; running them in the run's own process saves
    # a Python start-up and import per step (~5 s each here), which dominates a backfill of many small partitions.
    return in_process_executor


# The per-(benchmark_split, model) chain. `dataset` is per benchmark_split only, so it has its own job.
evaluate_job = define_asset_job(
    "evaluate", selection=AssetSelection.assets("prompts", "rollouts", "judgements", "metrics"),
    partitions_def=eval_partitions, description="prompts -> rollouts -> judgements -> metrics for one partition.",
    tags={"evals/calls_models": "true"},
    executor_def=_executor(),
)
dataset_job = define_asset_job("load_dataset", selection=AssetSelection.assets("dataset"),
                               partitions_def=benchmark_split_partitions)
leaderboard_job = define_asset_job("refresh_leaderboard", selection=AssetSelection.assets("leaderboard"))


# ---- forgetting a model (`evalpipe forget` and the `forget_model` job: evalpipe/store/forget.py does the work) ------
def forget_plans(project: Project, instance: Any, models: list[str], splits: list[str] = (),
                 force: bool = False) -> list[ModelPlan]:
    """What forgetting these model keys removes, in the project's home, warehouse and artifacts; refuses (one
    line) an unknown split or key, and a configured key unless `force`."""
    known_splits = set(project.config.splits) | set(instance.get_dynamic_partitions(BENCHMARK_SPLIT))
    unknown = [s for s in splits if s not in known_splits]
    if unknown:
        raise ConfigError(f"unknown benchmark split(s) {', '.join(unknown)}; known: {', '.join(sorted(known_splits))}")
    plans = plan_forget(models, home=project.home, warehouse=Warehouse(project.warehouse),
                        artifacts_root=project.artifacts_root, instance=instance, splits=splits)
    check_forget(plans, configured=project.config.models, force=force,
                 known=instance.get_dynamic_partitions(MODEL))
    return plans


def forget_models(project: Project, instance: Any, plans: list[ModelPlan]) -> None:
    """Remove what the plans list; the leaderboard is rebuilt from the metrics left, as its asset builds it."""
    forget(plans, warehouse=Warehouse(project.warehouse), instance=instance,
           rebuild_leaderboard=stages.build_leaderboard)


class ForgetModelConfig(Config):
    model: str = Field(description="The model key to forget (the `model` partition key, e.g. adhoc:echo).")
    splits: List[str] = Field(default=[], description="Only these benchmark splits (their results go; the key "
                                                      "stays). Empty: every split, and the key itself.")
    dry_run: bool = Field(default=True, description="List what would go without removing anything. Set false to "
                                                    "remove it: this is the confirmation.")
    force: bool = Field(default=False, description="Also forget a key of the config file (the config sync adds "
                                                   "it back as an empty partition key).")


@op(description="Forget a model: its partition key, warehouse rows, journals, run artifacts, registry entry.")
def forget_model_op(context: OpExecutionContext, config: ForgetModelConfig, eval_config: EvalConfigResource) -> None:
    project = eval_config.project
    plans = forget_plans(project, context.instance, [config.model], config.splits, config.force)
    text = "\n".join(line for plan in plans for line in plan.describe())
    if not config.dry_run:
        forget_models(project, context.instance, plans)
    verb = "dry run, nothing removed (set dry_run: false to remove it)" if config.dry_run else "removed"
    context.log.info(f"{verb}:\n{text}")
    context.add_output_metadata({"dry_run": config.dry_run, "what": MetadataValue.md(f"```\n{text}\n```"),
                                 "rows": MetadataValue.json(plans[0].rows)})


@job(name="forget_model", description="Remove a model key and everything it left (evalpipe forget). Run config: "
                                      "model, splits, dry_run (default true: lists only), force.",
     executor_def=in_process_executor)
def forget_model_job():
    forget_model_op()
