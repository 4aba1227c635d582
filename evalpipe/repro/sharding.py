"""Merging the shard runs of `evalpipe run --num-shards N --shard-index i` back into one partition.

Which shard a sample belongs to, and a partition's rollouts as N processes, are plain pipeline code
(evalpipe/pipeline/shards.py); what is here launches Dagster runs (metrics and leaderboard of the merged
partition), so it sits above the Dagster layer. See docs/reproducibility.md.
"""
from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from evalpipe.core.errors import DataError


def merge_frames(frames: Sequence[pd.DataFrame], keys: Sequence[str] = ("sample_id",), what: str = "rows") -> pd.DataFrame:
    """The union of shard frames sorted by `keys`; a key present in two shards is an error (one line)."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames, ignore_index=True)
    dup = df.duplicated(list(keys), keep=False)
    if dup.any():
        first = df.loc[dup, list(keys)].iloc[0].tolist()
        raise DataError(f"merging shards: {int(dup.sum())} duplicated {what} (e.g. {first}); each sample must be "
                        "in exactly one shard: were the shards run with the same --num-shards?")
    return df.sort_values(list(keys), kind="stable").reset_index(drop=True)


# ---- shard runs of `evalpipe run --num-shards N --shard-index i` -----------------------------------------------------
MERGED_TABLES = {"datasets": ("sample_id",), "prompts": ("sample_id",), "rollouts": ("sample_id",),
                 "judgements": ("sample_id", "metric"), "tool_calls": ("sample_id", "call_index")}


def shard_warehouse_path(num_shards: int, shard_index: int):
    """Where shard i of N writes (its own warehouse, beside the main one): `$DAGSTER_HOME/shards/<N>-<i>/`."""
    from evalpipe.core.config import dagster_home

    return dagster_home() / "shards" / f"{int(num_shards)}-{int(shard_index)}" / "warehouse.duckdb"


def merge_shard_partitions(cfg: Any, splits: list[str], models: list[str], num_shards: int, instance: Any,
                           tags: dict[str, str] | None = None) -> list[str]:
    """For each (split, model) whose N shard runs are all in their shard warehouses: union them (sorted by
    sample_id; a sample in two shards is an error) into the main warehouse, check that every shard recorded the
    same fingerprints, then materialize `metrics` (from the merged judgements) and the `leaderboard` in Dagster.
    Returns one line per partition saying what happened."""
    from evalpipe.core.config import warehouse_path
    from evalpipe.pipeline.fingerprints import NAMES
    from evalpipe.store.warehouse import Warehouse

    main = Warehouse(warehouse_path())
    shard_whs = [Warehouse(shard_warehouse_path(num_shards, i)) for i in range(num_shards)]
    lines, merged_keys = [], []
    merged_datasets: set[str] = set()
    for split in splits:
        for model in models:
            part = {"benchmark_split": split, "model": model}
            waiting = [i for i, wh in enumerate(shard_whs) if not wh.partition_file("judgements", part).exists()]
            if waiting:
                lines.append(f"{split} x {model}: shard(s) {waiting} of {num_shards} not done yet; the partition is "
                             "merged when the last shard finishes")
                continue
            fps = [wh.read("fingerprints", part) for wh in shard_whs
                   if wh.partition_file("fingerprints", part).exists()]
            rows = [{n: f.iloc[-1].get(n) for n in NAMES} for f in fps if len(f)]
            differ = [n for n in NAMES if len({str(r.get(n)) for r in rows}) > 1]
            if differ:
                raise DataError(f"{split} x {model}: the shards disagree on {', '.join(differ)}; re-run the shards "
                                "with the same config, model and data before merging")
            if split not in merged_datasets:
                main.write("datasets", merge_frames([wh.read("datasets", {"benchmark_split": split}) for wh in shard_whs],
                                                    what="dataset rows"), {"benchmark_split": split})
                merged_datasets.add(split)
            for table, keys in MERGED_TABLES.items():
                if table == "datasets":
                    continue
                frames = [wh.read(table, part) for wh in shard_whs if wh.partition_file(table, part).exists()]
                if frames:
                    main.write(table, merge_frames(frames, keys, what=f"{table} rows"), part)
            if fps:
                main.write("fingerprints", fps[0].tail(1).reset_index(drop=True), part)
            merged_keys.append((split, model))
            lines.append(f"{split} x {model}: merged {num_shards} shards into the partition")
    if merged_keys:
        from eval_assets.launch import run_assets
        from partitions import eval_key

        for split, model in merged_keys:
            r = run_assets(["metrics"], eval_key(split, model), instance, None, tags)
            if not r.success:
                lines.append(f"{split} x {model}: metrics of the merged partition FAILED")
        run_assets(["leaderboard"], None, instance, None, tags)
    return lines
