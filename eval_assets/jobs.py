import os

from dagster import AssetSelection, define_asset_job, in_process_executor

from partitions import benchmark_split_partitions, eval_partitions

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
