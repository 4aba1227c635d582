"""Stable-hash sharding: which shard a sample belongs to, and merging shards back into one partition.

The shard of a sample is `int.from_bytes(sha256(sample_id).digest()[:8], "little") % num_shards`: it depends on
the sample's id only, so it is the same on every machine, in every process (no PYTHONHASHSEED), and when the
dataset is reordered. A row without an id gets one from the SHA-256 of its canonical JSON (the file adapter does
this; `stable_row_id` here is the same rule for other callers).

Split options that select a shard (what `evalpipe run --num-shards N --shard-index i` sets):
`num_shards: N`, `shard_index: i` (0-based). See docs/reproducibility.md.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import pandas as pd

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.fingerprint import canonical_json

T = TypeVar("T")
NUM_SHARDS, SHARD_INDEX = "num_shards", "shard_index"


def shard_of(sample_id: str, num_shards: int) -> int:
    digest = hashlib.sha256(str(sample_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") % int(num_shards)


def stable_row_id(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(row)).encode("utf-8")).hexdigest()[:16]


def shard_spec(options: Mapping[str, Any]) -> tuple[int, int] | None:
    """(num_shards, shard_index) from split options, or None when the run is not sharded. Bad values: ConfigError."""
    n, i = options.get(NUM_SHARDS), options.get(SHARD_INDEX)
    if n in (None, "", 1) and i in (None, "", 0):
        return None
    try:
        n, i = int(n), int(i if i is not None else -1)
    except (TypeError, ValueError):
        raise ConfigError(f"num_shards/shard_index must be integers, got {n!r}/{i!r}") from None
    if n < 1 or not 0 <= i < n:
        raise ConfigError(f"--shard-index must be in 0..{n - 1} for --num-shards {n}, got {i}")
    return n, i


def select(items: Iterable[T], num_shards: int, shard_index: int, key=lambda s: s.id) -> list[T]:
    """The items of one shard, in their original order."""
    return [s for s in items if shard_of(key(s), num_shards) == shard_index]


def assignment(sample_ids: Iterable[str], num_shards: int) -> dict[str, int]:
    return {sid: shard_of(sid, num_shards) for sid in sample_ids}


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


# ---- a partition's rollouts as N processes ---------------------------------------------------------------------------
def _run_shard(model: Any, requests: list[Any], settings: Any, journal_file: str) -> list[dict[str, Any]]:
    """In a worker process: build the runner from the model config and run this shard's requests."""
    import asyncio

    from evalpipe.store.journal import Journal
    from evalpipe.runners import build_runner, run_requests

    try:
        from evalpipe.project.plugins import load_plugins

        load_plugins()  # runners from plugins must exist in the worker too
    except Exception:
        pass
    runner = build_runner(model)
    with Journal(journal_file) as journal:
        return asyncio.run(run_requests(runner, requests, journal, settings))


def run_sharded(model: Any, requests: Sequence[Any], settings: Any, num_shards: int, journal_file: Any,
                progress: Any = None) -> list[dict[str, Any]]:
    """Rows for every request, in request order, computed by `num_shards` worker processes (spawned; each takes the
    requests of one stable-hash shard and shares the partition's resume journal). The rows are exactly those one
    process would give: the same requests, fingerprints and journal."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    groups: dict[int, list[Any]] = {}
    for r in requests:
        groups.setdefault(shard_of(r.sample_id, num_shards), []).append(r)
    by_id: dict[str, dict[str, Any]] = {}
    done = 0
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(groups), mp_context=ctx) as pool:
        futures = [pool.submit(_run_shard, model, reqs, settings, str(journal_file)) for reqs in groups.values()]
        for f in futures:
            rows = f.result()
            for row in rows:
                if row["sample_id"] in by_id:
                    raise DataError(f"sharded rollouts: sample {row['sample_id']!r} came back from two shards")
                by_id[row["sample_id"]] = row
            done += len(rows)
            if progress:
                progress(done, len(requests))
    missing = [r.sample_id for r in requests if r.sample_id not in by_id]
    if missing:
        raise DataError(f"sharded rollouts: {len(missing)} sample(s) missing after the merge, e.g. {missing[:3]}")
    return [by_id[r.sample_id] for r in requests]


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
