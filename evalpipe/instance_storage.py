"""Dagster instance storage on SQLite without an fsync per event (configured in dagster_home/dagster.yaml).

Dagster's stock SQLite storages open a fresh engine and connection for every statement (`NullPool`). Each close of
the last connection checkpoints the WAL into the database and fsyncs it, so a run of ~100 events costs ~100 fsyncs
and several MB of writes (measured: ~1,300 fsyncs and ~26 MB for one `evalpipe run`). These subclasses change two
things only:

- one pooled engine per database file and process (the WAL stays open; SQLite checkpoints it every 1000 pages);
- `PRAGMA synchronous=NORMAL` on each connection: in WAL mode a commit is durable against a crash of any process
  (the WAL is written before the commit returns); only a power loss or OS crash may roll back the last commits,
  never corrupt the database (https://www.sqlite.org/pragma.html#pragma_synchronous).

Tables, files, migrations and every query are Dagster's own, so the UI, the daemon and `dagster` CLI read the same
databases, and a `dagster.yaml` without these classes keeps working on the same folder. For more than one machine
use Postgres instead (docs/deployment.md).
"""
from __future__ import annotations

import atexit
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

import sqlalchemy as db
from dagster import DagsterEventType, Field, StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS

SYNCHRONOUS = "NORMAL"
PAGE_SIZE = 1024  # bytes, for databases created here: an event rewrites ~9 index and table pages, 4x less than at 4 KB
WAL_AUTOCHECKPOINT = 256  # pages: the WAL is folded back (and its file reused) every ~256 KB, not every 1000 pages
RUN_WAL_AUTOCHECKPOINT = 8192  # a per-run database: folded back once when its run ends, each page copied once
MAX_ENGINES = 32  # per-run event databases: a long-lived process (daemon, webserver) keeps only the recent ones
PARTITION_CACHE_S = 5.0  # how long "this dynamic partition exists" is trusted without asking the database again

def _check_alembic_revision_cached(alembic_config: Any, conn: Any) -> tuple[Any, Any]:
    """Dagster's `check_alembic_revision` with the head revision remembered per migration folder: it is fixed for
    the installed Dagster, and finding it parses ~270 migration scripts (~0.13 s) on every storage start, three
    times per process. The database's own revision is still read every time."""
    from alembic.runtime.migration import MigrationContext
    from dagster._core.storage import sql

    location = alembic_config.get_main_option("script_location")
    with sql._alembic_lock:
        db_revision = MigrationContext.configure(conn).get_current_revision()
        head = _alembic_heads.get(location)
        if head is None:
            from alembic.script import ScriptDirectory

            head = _alembic_heads[location] = ScriptDirectory.from_config(alembic_config).as_revision_number("head")
    return db_revision, head


_alembic_heads: dict[str, Any] = {}
for _module in ("dagster._core.storage.runs.sqlite.sqlite_run_storage",
                "dagster._core.storage.event_log.sqlite.sqlite_event_log",
                "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage"):
    __import__(_module, fromlist=["check_alembic_revision"]).check_alembic_revision = _check_alembic_revision_cached

_RUN_END = {DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}
_engines: OrderedDict[tuple[int, str], Any] = OrderedDict()
_lock = threading.Lock()


def _on_connect(dbapi_conn: Any, _record: Any, autocheckpoint: int = WAL_AUTOCHECKPOINT) -> None:
    cur = dbapi_conn.cursor()
    try:
        # a new per-run database is created in WAL mode too (Dagster switches it after creating its tables,
        # which costs a rollback journal and an fsync per table)
        cur.execute(f"PRAGMA page_size={PAGE_SIZE}")  # only takes effect on a database being created
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
        cur.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
    finally:
        cur.close()


def engine_for(conn_string: str, per_run: bool = False) -> Any:
    """A pooled engine for this database file in this process (rebuilt after a fork). `per_run`: a run's own
    event database, written by one run and then left alone."""
    key = (os.getpid(), conn_string)
    with _lock:
        eng = _engines.get(key)
        if eng is not None:
            _engines.move_to_end(key)
            return eng
        eng = db.create_engine(conn_string, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                          "check_same_thread": False},
                               pool_size=2, max_overflow=8)
        checkpoint = RUN_WAL_AUTOCHECKPOINT if per_run else WAL_AUTOCHECKPOINT
        db.event.listen(eng, "connect", lambda conn, rec: _on_connect(conn, rec, checkpoint))
        _engines[key] = eng
        while len(_engines) > MAX_ENGINES:
            (pid, _), old = _engines.popitem(last=False)
            if pid == os.getpid():
                old.dispose()
        return eng


def dispose(conn_string: str | None = None) -> None:
    """Close pooled connections (of one database, or all): the last close checkpoints the WAL and removes it."""
    with _lock:
        for key in [k for k in _engines if conn_string is None or k[1] == conn_string]:
            eng = _engines.pop(key)
            if key[0] == os.getpid():
                eng.dispose()


atexit.register(dispose)


def _precreate(folder: str, name: str) -> str:
    """Create an empty database file with our page size before Dagster's own code creates it (its first
    connection is not ours, so `_on_connect` would come too late); an existing file is left as it is."""
    import sqlite3

    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.db")
    if not os.path.exists(path):
        con = sqlite3.connect(path)
        try:
            con.execute(f"PRAGMA page_size={PAGE_SIZE}")
            con.execute("PRAGMA journal_mode=WAL")  # writes the header, which fixes the page size
        finally:
            con.close()
    return folder


def _home_dir(*parts: str) -> str:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise RuntimeError("DAGSTER_HOME is not set; set it to the folder holding dagster.yaml")
    return os.path.join(os.path.abspath(home), *parts)


def _base_dir_schema() -> dict:
    return {"base_dir": Field(StringSource, is_required=False,
                              description="Folder of the database(s); default: Dagster's own under $DAGSTER_HOME.")}


class FastSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's per-run SQLite event log, with pooled connections and synchronous=NORMAL."""

    @classmethod
    def config_type(cls):
        return _base_dir_schema()

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, base_dir=config_value.get("base_dir") or _home_dir("history", "runs", ""))

    def __init__(self, base_dir: str, inst_data: Any = None):
        # Dagster creates and initializes the index database here only when its file is missing; create the file
        # first (with our page size) and then run that same initialization
        new = not os.path.exists(os.path.join(os.path.abspath(base_dir), "index.db"))
        if new:
            _precreate(os.path.abspath(base_dir), "index")
        super().__init__(base_dir, inst_data=inst_data)
        if new:
            self._initdb(engine_for(self.conn_string_for_shard("index")), for_index_shard=True)
            self.reindex_events()
            self.reindex_assets()
            self._run_template()  # part of making the instance, like index.db: not billed to its first run

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Any]:
        with self._db_lock:
            if shard != "index" and shard not in self._initialized_dbs:
                self._copy_run_template(self.path_for_shard(shard))
            engine = engine_for(self.conn_string_for_shard(shard), per_run=shard != "index")
            if shard not in self._initialized_dbs:
                self._initdb(engine)  # on a copied template: its revision is the head, nothing to do
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn

    def _copy_run_template(self, path: str) -> None:
        """A new run's event database as a copy of an empty one made once by Dagster's own `_initdb` (kept as
        `.template/run-<dagster version>.db` beside the runs): creating the tables and stamping alembic's revision
        for every run cost ~0.15 s of CPU and ~110 KB of writes; the copy is one ~50 KB write."""
        if os.path.exists(path):
            return
        import shutil

        shutil.copyfile(self._run_template(), f"{path}.tmp")
        os.replace(f"{path}.tmp", path)

    def _run_template(self) -> str:
        """The empty run database that new runs copy, made by Dagster's own `_initdb` when missing."""
        from dagster import __version__ as dagster_version

        template = os.path.join(self._base_dir, ".template", f"run-{dagster_version}.db")
        if not os.path.exists(template):
            os.makedirs(os.path.dirname(template), exist_ok=True)
            tmp = f"{template}.{os.getpid()}.{threading.get_ident()}.tmp"
            conn_string = f"sqlite:///{tmp}"
            try:
                self._initdb(engine_for(conn_string, per_run=True))
            finally:
                dispose(conn_string)  # the last close folds the WAL into the file: one self-contained file
            os.replace(tmp, template)  # atomic: concurrent processes each make one, the last rename wins
        return template

    # Dagster asks "does table X exist?" and "does model partition Y exist?" dozens of times per run (~60 and
    # ~70 queries for one partition's chain, each on a fresh unpooled connection for has_table). Tables are never
    # dropped under a running process and partitions are added far more often than deleted, so positive answers
    # are remembered: tables for the process, partitions for PARTITION_CACHE_S (a delete here forgets at once).
    def has_table(self, table_name: str) -> bool:
        known = self.__dict__.setdefault("_tables_present", set())
        if table_name in known:
            return True
        engine = engine_for(self.conn_string_for_shard("index"))
        with engine.connect() as conn:
            present = bool(engine.dialect.has_table(conn, table_name))
        if present:
            known.add(table_name)
        return present

    def has_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> bool:
        seen = self.__dict__.setdefault("_partitions_seen", {})
        key = (partitions_def_name, partition_key)
        if time.monotonic() - seen.get(key, -PARTITION_CACHE_S) < PARTITION_CACHE_S:
            return True
        present = super().has_dynamic_partition(partitions_def_name, partition_key)
        if present:
            seen[key] = time.monotonic()
        return present

    def delete_dynamic_partition(self, partitions_def_name: str, partition_key: str) -> None:
        self.__dict__.setdefault("_partitions_seen", {}).pop((partitions_def_name, partition_key), None)
        super().delete_dynamic_partition(partitions_def_name, partition_key)

    def store_event(self, event: Any) -> None:
        super().store_event(event)
        # a finished run writes no more events: fold its WAL into its database now, leaving one file behind
        if event.is_dagster_event and event.dagster_event_type in _RUN_END and event.run_id:
            dispose(self.conn_string_for_shard(event.run_id))


class FastSqliteRunStorage(SqliteRunStorage):
    """Dagster's SQLite run storage, with a pooled connection and synchronous=NORMAL."""

    @classmethod
    def config_type(cls):
        return _base_dir_schema()

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        base = config_value.get("base_dir") or _home_dir("history", "")
        return cls.from_local(inst_data=inst_data, base_dir=_precreate(base, "runs"))

    @contextmanager
    def connect(self) -> Iterator[Any]:
        with engine_for(self._conn_string).connect() as conn:
            with conn.begin():
                yield conn


class FastSqliteScheduleStorage(SqliteScheduleStorage):
    """Dagster's SQLite schedule/sensor storage, with a pooled connection and synchronous=NORMAL."""

    @classmethod
    def config_type(cls):
        return _base_dir_schema()

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        base = config_value.get("base_dir") or _home_dir("schedules")
        return cls.from_local(inst_data=inst_data, base_dir=_precreate(base, "schedules"))

    @contextmanager
    def connect(self) -> Iterator[Any]:
        with engine_for(self._conn_string).connect() as conn:
            with conn.begin():
                yield conn


def storage_yaml() -> str:
    """The dagster.yaml block that selects these storages (tests write it into their own DAGSTER_HOME)."""
    return "".join(f"{key}:\n  module: evalpipe.instance_storage\n  class: {cls}\n" for key, cls in (
        ("run_storage", "FastSqliteRunStorage"), ("event_log_storage", "FastSqliteEventLogStorage"),
        ("schedule_storage", "FastSqliteScheduleStorage")))
