from dagster import AssetSelection, define_asset_job, in_process_executor

from partitions import benchmark_split_partitions, eval_partitions

# The per-(benchmark_split, model) chain. `dataset` is per benchmark_split only, so it has its own job.
evaluate_job = define_asset_job(
    "evaluate", selection=AssetSelection.assets("prompts", "rollouts", "judgements", "metrics"),
    partitions_def=eval_partitions, description="prompts -> rollouts -> judgements -> metrics for one partition.",
    tags={"evals/calls_models": "true"},
    # The four steps of a partition run one after another anyway; running them in the run's own process saves
    # a Python start-up and import per step (~5 s each here), which dominates a backfill of many small partitions.
    executor_def=in_process_executor,
)
dataset_job = define_asset_job("load_dataset", selection=AssetSelection.assets("dataset"),
                               partitions_def=benchmark_split_partitions)
leaderboard_job = define_asset_job("refresh_leaderboard", selection=AssetSelection.assets("leaderboard"))
