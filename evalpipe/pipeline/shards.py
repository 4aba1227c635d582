"""Stable-hash sharding: which shard a sample belongs to, and a partition's rollouts as N worker processes.

The shard of a sample is `int.from_bytes(sha256(sample_id).digest()[:8], "little") % num_shards`: it depends on
the sample's id only, so it is the same on every machine, in every process (no PYTHONHASHSEED), and when the
dataset is reordered. A row without an id gets one from the SHA-256 of its canonical JSON (the file adapter does
this; `stable_row_id` here is the same rule for other callers).

Split options that select a shard (what `evalpipe run --num-shards N --shard-index i` sets):
`num_shards: N`, `shard_index: i` (0-based). See docs/reproducibility.md. Merging shard runs back into one
partition is evalpipe/repro/sharding.py (it launches Dagster runs, so it sits above the Dagster layer).
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.turns import waiting
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


# ---- a partition's rollouts as N processes ---------------------------------------------------------------------------
def _run_shard(model: Any, requests: list[Any], settings: Any, journal_file: str,
               worker_init: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """In a worker process: build the runner from the model config and run this shard's requests."""
    import asyncio

    from evalpipe.store.journal import Journal
    from evalpipe.runners import build_runner, run_requests

    if worker_init is not None:
        try:
            worker_init()  # e.g. load plugins: runners from plugins must exist in the worker too
        except Exception:
            pass
    runner = build_runner(model)
    with Journal(journal_file) as journal:
        return asyncio.run(run_requests(runner, requests, journal, settings))


def run_sharded(model: Any, requests: Sequence[Any], settings: Any, num_shards: int, journal_file: Any,
                progress: Any = None, worker_init: Callable[[], Any] | None = None) -> list[dict[str, Any]]:
    """Rows for every request, in request order, computed by `num_shards` worker processes (spawned; each takes the
    requests of one stable-hash shard and shares the partition's resume journal). The rows are exactly those one
    process would give: the same requests, fingerprints and journal. `worker_init` (a picklable module-level
    function) runs first in each worker: the caller hands in the plugin loading (evalpipe.project, a floor above)
    so that runners from plugins exist there too; without it, the runner registry loads plugins on a miss."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    groups: dict[int, list[Any]] = {}
    for r in requests:
        groups.setdefault(shard_of(r.sample_id, num_shards), []).append(r)
    by_id: dict[str, dict[str, Any]] = {}
    done = 0
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(groups), mp_context=ctx) as pool:
        futures = [pool.submit(_run_shard, model, reqs, settings, str(journal_file), worker_init)
                   for reqs in groups.values()]
        for f in futures:
            with waiting():  # [sweeps] a batch's other partitions compute meanwhile (core/turns.py)
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
