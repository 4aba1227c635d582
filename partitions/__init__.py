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
    return {BENCHMARK_SPLIT: str(partition_key)}


__all__ = ["BENCHMARK_SPLIT", "MODEL", "benchmark_split_partitions", "eval_key", "eval_partitions",
           "model_partitions", "partition_dims"]
