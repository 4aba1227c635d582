"""Partition definitions: every asset is per `benchmark_split`, or per `benchmark_split` x `model`.

`benchmark_split` keys come from the config file (read, never written, when the code location loads);
`model` is dynamic: the config-sync sensor, the checkpoint sensor and the `run` command add its keys.
"""
from dagster import DynamicPartitionsDefinition, MultiPartitionKey, MultiPartitionsDefinition, StaticPartitionsDefinition

from evalpipe.project import load_config

BENCHMARK_SPLIT = "benchmark_split"
MODEL = "model"

benchmark_split_partitions = DynamicPartitionsDefinition(name=BENCHMARK_SPLIT)
model_partitions = DynamicPartitionsDefinition(name=MODEL)
eval_partitions = MultiPartitionsDefinition({BENCHMARK_SPLIT: benchmark_split_partitions, MODEL: model_partitions})


def eval_key(split_key: str, model_key: str) -> MultiPartitionKey:
    return MultiPartitionKey({BENCHMARK_SPLIT: split_key, MODEL: model_key})


def partition_dims(partition_key) -> dict[str, str]:
    """{dimension: key} for a multi-partition key, or for a plain `benchmark_split` key, in a fixed order."""
    if isinstance(partition_key, MultiPartitionKey):
        dims = partition_key.keys_by_dimension
        return {BENCHMARK_SPLIT: dims[BENCHMARK_SPLIT], MODEL: dims[MODEL]}
    text = str(partition_key)
    if "|" in text:  # a multi key as Dagster prints it (`split|model`); no key of either dimension holds a '|'
        split, model = text.split("|", 1)
        return {BENCHMARK_SPLIT: split, MODEL: model}
    return {BENCHMARK_SPLIT: text}


TRY_TAG = "evals/try"


def try_kind(model_key: str) -> str | None:
    """What kind of throw-away key `model_key` is: "adhoc" (`adhoc:*`), "ids" (`@ids-<h>`), "limit" (`@limit<N>`),
    "subset" (`@subset-<h>`, a Python call's own split),
    "experiment" (any other `<model>@<name>`), or None for a configured model's key."""
    from evalpipe.core.run_marks import is_adhoc, is_limited, is_subset, limit_of

    key = str(model_key)
    if is_adhoc(key):
        return "adhoc"
    if "@" not in key:
        return None
    if limit_of(key):
        return "limit"
    if is_subset(key):
        return "subset"
    return "ids" if is_limited(key) else "experiment"  # is_limited: a limit or a sample selection


def mark_try_run(context) -> None:
    """Tag the run of a throw-away partition `evals/try=<kind>` (the Runs page filters on it, each run shows it),
    whichever way it was launched: the CLI, the API, the launchpad, a backfill. Dynamic partition keys carry no
    description in Dagster, so the run tag (and the key's own `@`/`adhoc:` mark) is what the UI can show."""
    from dagster import DagsterError

    kind = try_kind(partition_dims(context.partition_key).get(MODEL, ""))
    if not kind:
        return
    try:
        tags = context.run.tags
    except DagsterError:  # an asset called directly (build_asset_context): no run to tag
        return
    if tags.get(TRY_TAG) != kind:
        context.instance.add_run_tags(context.run.run_id, {TRY_TAG: kind})


__all__ = ["TRY_TAG", "mark_try_run", "try_kind", "BENCHMARK_SPLIT", "MODEL", "benchmark_split_partitions", "eval_key", "eval_partitions",
           "model_partitions", "partition_dims"]
