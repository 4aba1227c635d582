"""Registering many keys of a dynamic partition dimension (`model`, `benchmark_split`) on a Dagster instance.

`DagsterInstance.add_dynamic_partitions` first looks the keys up with one `WHERE partition IN (?, ?, ...)`: one
SQL variable per key. SQLite refuses a statement with more variables than its build allows (32,766 by default
since SQLite 3.32; 250,000 in Debian's build), so on the default SQLite instance one call with ~33k new keys fails
with "too many SQL variables" (dagster#16260). `add_in_chunks` adds only the keys the instance lacks, a chunk of
keys per call, which any storage (SQLite, Postgres) takes. It refuses a key that is not a partition key the
product would make (`evalpipe.core.keys.sanitize_key`): Dagster accepts `|`, `[` or `]` in a dynamic key
silently, and a multi-partition key `split|model` holding one can't be read back.
"""
from __future__ import annotations

from typing import Any, Iterable

from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key

DEFAULT_CHUNK = 1000
# SQLite's default SQLITE_MAX_VARIABLE_NUMBER (3.32 on) less a few for the statement's other parameters
MAX_CHUNK = 32_000


def _is_key(key: Any) -> bool:
    try:
        return isinstance(key, str) and sanitize_key(key) == key
    except ValueError:  # nothing usable in it
        return False


def add_in_chunks(instance: Any, dimension: str, keys: Iterable[str], chunk: int = DEFAULT_CHUNK) -> list[str]:
    """Add the keys of the dynamic partition dimension `dimension` that `instance` does not have yet, at most
    `chunk` keys per `add_dynamic_partitions` call; returns the keys added, in the order given (duplicates once)."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or not 1 <= chunk <= MAX_CHUNK:
        raise ConfigError(f"partition key chunk must be a whole number from 1 to {MAX_CHUNK} (SQLite's default "
                          f"limit of SQL variables per statement), got {chunk!r}")
    wanted = list(dict.fromkeys(keys))
    for key in wanted:
        if not _is_key(key):
            raise ConfigError(f"{dimension} partition key {key!r} is not a valid key (letters, digits and ._-/@:+= "
                              "only): make it with evalpipe.core.keys.sanitize_key")
    have = set(instance.get_dynamic_partitions(dimension))  # one query, no variable per key
    new = [k for k in wanted if k not in have]
    for start in range(0, len(new), chunk):
        instance.add_dynamic_partitions(dimension, new[start:start + chunk])
    return new
