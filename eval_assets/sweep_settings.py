"""[sweeps] How many partitions a Dagster run carries and evaluates at once (docs/scale.md "Sweeps"): read by the
assets (their BackfillPolicy) and by the batch machinery (eval_assets/batch.py)."""
import os
from typing import Any

DEFAULT_BATCH_PARTITIONS = 64  # partitions per Dagster run (config `sweep_batch_partitions`)
# worker processes of one `evalpipe run` by default (config `sweep_processes`): the cores, up to this many (each
# worker is an interpreter with Dagster, pandas and DuckDB loaded, ~250 MB)
DEFAULT_MAX_PROCESSES = 4


def batch_size(cfg: Any, override: int | None = None) -> int:
    """Partitions per Dagster run: the argument, else the config's `sweep_batch_partitions`, else 64."""
    value = override or cfg.raw.get("sweep_batch_partitions") or DEFAULT_BATCH_PARTITIONS
    return _positive("sweep_batch_partitions", value)


def batch_concurrency(cfg: Any, override: int | None = None) -> int:
    """Partitions evaluated at once in one batch run: the argument, else `max_concurrent_partitions`, else all of
    the batch's (`sweep_batch_partitions`): every partition's rollouts go at once, each model within its own
    `concurrency`, so a sweep keeps as many requests in flight as its models allow."""
    value = override or cfg.raw.get("max_concurrent_partitions") or batch_size(cfg)
    return _positive("max_concurrent_partitions", value)


def sweep_processes(cfg: Any, batches: int) -> int:
    """Worker processes that run an `evalpipe run`'s batches at once (eval_assets/sweep_workers.py): the config's
    `sweep_processes`, else the machine's cores (at most DEFAULT_MAX_PROCESSES), never more than the batches."""
    value = cfg.raw.get("sweep_processes")
    n = _positive("sweep_processes", value) if value is not None else min(os.cpu_count() or 1, DEFAULT_MAX_PROCESSES)
    return max(1, min(n, batches))


def _positive(name: str, value: Any) -> int:
    from evalpipe.core.errors import ConfigError

    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or str(value).strip() != str(n):
        raise ConfigError(f"{name}: {value!r} is not a positive whole number; set e.g. `{name}: 32` in the config")
    return n
