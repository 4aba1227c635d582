"""10,000 partitions and more on the default SQLite instance (issue 31): `add_in_chunks` registers 40,000 keys of one
dynamic dimension where one `add_dynamic_partitions` call fails with "too many SQL variables" (dagster#16260), and
the same on Postgres.

This machine's SQLite (Debian's build) allows 250,000 variables per statement; the default build (SQLite >= 3.32,
e.g. python.org's and most wheels') allows 32,766. The SQLite tests hold every connection to that default, so they
show what most installs do."""
from __future__ import annotations

import sqlite3
import time

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.store.partition_keys import add_in_chunks

SQLITE_DEFAULT_MAX_VARIABLES = 32_766
N_KEYS = 40_000


def _keys(n: int, prefix: str = "org/model-") -> list[str]:
    return [f"{prefix}{i:05d}" for i in range(n)]


@pytest.fixture
def sqlite_default_limits():
    """Every SQLite connection opened meanwhile limited to SQLite's default number of SQL variables."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def limit(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, SQLITE_DEFAULT_MAX_VARIABLES)

    event.listen(Engine, "connect", limit)
    yield
    event.remove(Engine, "connect", limit)


@pytest.fixture
def sqlite_instance(tmp_path, sqlite_default_limits):
    """The product's default instance: Dagster's SQLite storages under a fresh DAGSTER_HOME."""
    from evalpipe.store.instance_storage import open_instance

    home = tmp_path / "dagster_home"
    home.mkdir()
    return open_instance(str(home), capture_compute_logs=False)


def test_one_call_with_40000_keys_fails_on_default_sqlite(sqlite_instance):
    """The control: Dagster's own call with all the keys at once (what eval_assets/launch.py does today)."""
    with pytest.raises(Exception, match="too many SQL variables"):
        sqlite_instance.add_dynamic_partitions("model", _keys(N_KEYS))


def test_40000_keys_in_chunks_on_default_sqlite(sqlite_instance):
    keys = _keys(N_KEYS)
    t0 = time.perf_counter()
    added = add_in_chunks(sqlite_instance, "model", keys)
    elapsed = time.perf_counter() - t0
    print(f"\n{N_KEYS:,} model keys registered on SQLite in {elapsed:.2f} s")
    assert added == keys
    assert sorted(sqlite_instance.get_dynamic_partitions("model")) == keys
    # again, with 10 new keys among them (a sweep that grew): only those are added, nothing twice
    more = _keys(N_KEYS + 10)
    assert add_in_chunks(sqlite_instance, "model", more + keys[:5]) == more[N_KEYS:]
    assert len(sqlite_instance.get_dynamic_partitions("model")) == N_KEYS + 10
    assert elapsed < 60


def test_10000_partitions_of_100_models_x_100_splits(sqlite_instance):
    """The issue's scale target: 100 models x 100 splits, both dimensions dynamic, as the product declares them."""
    from partitions import BENCHMARK_SPLIT, MODEL, eval_partitions

    assert add_in_chunks(sqlite_instance, MODEL, _keys(100)) == _keys(100)
    assert add_in_chunks(sqlite_instance, BENCHMARK_SPLIT, _keys(100, "bench/split-"), chunk=7) == _keys(100, "bench/split-")
    from dagster import partition_loading_context

    with partition_loading_context(dynamic_partitions_store=sqlite_instance):
        assert len(eval_partitions.get_partition_keys()) == 10_000


def test_a_key_or_chunk_that_cannot_be_honoured_is_refused_first(sqlite_instance):
    for bad in ("a|b", "x[1]", "", " padded"):
        with pytest.raises(ConfigError, match="not a valid key"):
            add_in_chunks(sqlite_instance, "model", ["ok-1", bad])
    for chunk in (0, 40_000, 1.5, True):
        with pytest.raises(ConfigError, match="chunk must be a whole number"):
            add_in_chunks(sqlite_instance, "model", ["ok-1"], chunk=chunk)
    assert sqlite_instance.get_dynamic_partitions("model") == []  # nothing half-added


def test_40000_keys_in_chunks_on_postgres(postgres_url, tmp_path):
    from dagster import DagsterInstance

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(f"storage:\n  postgres:\n    postgres_url: {postgres_url}\n")
    with DagsterInstance.from_config(str(home)) as instance:
        keys = _keys(N_KEYS)
        t0 = time.perf_counter()
        assert add_in_chunks(instance, "model", keys) == keys
        print(f"\n{N_KEYS:,} model keys registered on Postgres in {time.perf_counter() - t0:.2f} s")
        assert len(instance.get_dynamic_partitions("model")) == N_KEYS
