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

Start-up (docs/operations.md#instance-start-up): Dagster creates these databases and stamps alembic's version on
first use, and several processes doing that at once on a fresh DAGSTER_HOME race ("table alembic_version already
exists", or two rows in alembic_version, after which every open fails with "more than one head"). Every storage
here, and `open_instance()` (the CLI, `evaluate()` and `evalpipe serve`), is made under one file lock per
DAGSTER_HOME, so the first process initializes and the others find it done. A database already left with two
versions is repaired when that is certain to be right (the other rows are ancestors of this Dagster's head: the
race's signature), else refused with one line naming `python -m evalpipe.store.instance_storage repair`.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import sqlite3
import sys
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator

import sqlalchemy as db
from dagster import DagsterEventType, Field, StringSource

from evalpipe.store import deferred_alembic

deferred_alembic.import_sql_module()  # before the storages below import it: alembic loads only for a migration
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage  # noqa: E402
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage  # noqa: E402
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage  # noqa: E402
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS  # noqa: E402

from evalpipe.core.disk_full import disk_full
from evalpipe.core.errors import EvalError
from evalpipe.store.sqlite_files import use_wal

log = logging.getLogger(__name__)

SYNCHRONOUS = "NORMAL"
PAGE_SIZE = 1024  # bytes, for databases created here: an event rewrites ~9 index and table pages, 4x less than at 4 KB
WAL_AUTOCHECKPOINT = 256  # pages: the WAL is folded back (and its file reused) every ~256 KB, not every 1000 pages
RUN_WAL_AUTOCHECKPOINT = 8192  # a per-run database: folded back once when its run ends, each page copied once
MAX_ENGINES = 32  # per-run event databases: a long-lived process (daemon, webserver) keeps only the recent ones
SQLITE_WAIT_S = float(SQLITE_BUSY_TIMEOUT_SECONDS)  # Dagster's own wait for a busy storage file
PARTITION_CACHE_S = 5.0  # how long "this dynamic partition exists" is trusted without asking the database again

def _db_revision(conn: Any) -> Any:
    """The database's alembic revision, as alembic's `MigrationContext.get_current_revision()` reads it (None
    without a version table or row); on SQLite with one query and without importing alembic."""
    if conn.dialect.name != "sqlite":
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(conn).get_current_revision()
    if conn.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type='table' AND name='alembic_version'").first() is None:
        return None
    rows = [r[0] for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")]
    if len(rows) > 1:  # alembic's "more than one head": a database this process did not check at start-up
        path = getattr(conn.engine.url, "database", None) or str(conn.engine.url)
        raise InstanceStorageError(_heads_message(path, rows))
    return rows[0] if rows else None


def _check_alembic_revision_cached(alembic_config: Any, conn: Any) -> tuple[Any, Any]:
    """Dagster's `check_alembic_revision` without alembic on the run path (evalpipe/store/deferred_alembic.py): the
    database's own revision is read every time; the head revision, fixed for the installed Dagster (finding it
    parses ~270 migration scripts, ~0.13 s), is remembered beside the database."""
    from dagster._core.storage import sql

    with sql._alembic_lock:
        db_revision = _db_revision(conn)
        head = deferred_alembic.head_revision(alembic_config, getattr(conn.engine.url, "database", None))
    return db_revision, head


for _module in ("dagster._core.storage.runs.sqlite.sqlite_run_storage",
                "dagster._core.storage.event_log.sqlite.sqlite_event_log",
                "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage"):
    _storage = sys.modules[_module]
    _storage.check_alembic_revision = _check_alembic_revision_cached
    deferred_alembic.use_config_refs(_storage)

_last_asset_event = threading.local()  # FastSqliteEventLogStorage.last_asset_event
_group = threading.local()  # FastSqliteEventLogStorage.grouped: (storage, {shard: connection}, ExitStack) or None
_RUN_END = {DagsterEventType.RUN_SUCCESS, DagsterEventType.RUN_FAILURE, DagsterEventType.RUN_CANCELED}
_engines: OrderedDict[tuple[int, str], Any] = OrderedDict()
_lock = threading.Lock()


def _on_connect(dbapi_conn: Any, _record: Any, autocheckpoint: int = WAL_AUTOCHECKPOINT) -> None:
    cur = dbapi_conn.cursor()
    try:
        # a new per-run database is created in WAL mode too (Dagster switches it after creating its tables,
        # which costs a rollback journal and an fsync per table)
        cur.execute(f"PRAGMA page_size={PAGE_SIZE}")  # only takes effect on a database being created
        use_wal(cur, SQLITE_WAIT_S)  # processes starting at once on a new home
        cur.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
        cur.execute(f"PRAGMA wal_autocheckpoint={autocheckpoint}")
    finally:
        cur.close()


def _said_when_full(context: Any) -> None:
    """SQLite's "disk I/O error" on a full disk: raised instead as one line naming the database and the fix. On
    every SQLite engine of the process (Dagster's own storages open theirs too)."""
    if context.dialect is None or context.dialect.name != "sqlite" or context.engine is None:
        return
    full = disk_full(context.engine.url.database or "", context.original_exception)
    if full is not None:
        raise full from None


db.event.listen(db.engine.Engine, "handle_error", _said_when_full)


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


# ---- start-up: one initializer per DAGSTER_HOME, and databases left with two alembic versions ----------------------
LOCK_FILE = ".evalpipe-instance.lock"  # in DAGSTER_HOME (a storage with its own base_dir and no home: in that folder)
LOCK_WAIT_S = 120.0  # making an instance takes well under a second; a holder this slow is stuck
DATABASES = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")  # Dagster's SQLite files


class InstanceStorageError(EvalError):
    """The Dagster instance's storage can't be opened as it is (exit 2: a repair is needed, not a re-run)."""


_held: dict[str, list[Any]] = {}  # lock file -> [open file, depth]: the lock is re-entrant within a process
_held_guard = threading.RLock()  # flock excludes open files, not threads sharing one: threads take turns here


def _after_fork() -> None:
    global _held_guard
    _held.clear()  # the parent's holds are the parent's (a child's copy of the file is closed with it)
    _held_guard = threading.RLock()


os.register_at_fork(after_in_child=_after_fork)


CLAIM_LOCK_FILE = ".concurrency-claims.lock"  # serializes pool slot claims (FastSqliteEventLogStorage)


def _lock_folder(folder: str | None = None) -> str:
    home = os.environ.get("DAGSTER_HOME")
    return os.path.abspath(home if home else (folder or "."))


@contextmanager
def startup_lock(folder: str | None = None, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the instance start-up lock of this DAGSTER_HOME (`fcntl.flock` on `.evalpipe-instance.lock`, so a
    killed holder releases it). Re-entrant within a process; other processes wait for it."""
    folder = _lock_folder(folder)
    path = os.path.join(folder, LOCK_FILE)
    with _held_guard:
        entry = _held.get(path)
        if entry is None:
            os.makedirs(folder, exist_ok=True)
            fh = open(path, "a+")
            try:
                _flock_within(fh, path, wait_s)
                fh.truncate(0)
                fh.write(json.dumps({"pid": os.getpid(), "since": time.time()}))
                fh.flush()
            except BaseException:
                fh.close()
                raise
            entry = _held[path] = [fh, 0]
        entry[1] += 1
        try:
            yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del _held[path]
                fcntl.flock(entry[0], fcntl.LOCK_UN)
                entry[0].close()


def _flock_within(fh: Any, path: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                try:
                    holder = json.loads(open(path).read() or "{}").get("pid", "?")
                except (OSError, ValueError):
                    holder = "?"
                raise InstanceStorageError(
                    f"the Dagster instance in {os.path.dirname(path)} has been starting for over {wait_s:.0f} s in "
                    f"another process (pid {holder}); stop that process if it is stuck and retry") from None
            time.sleep(0.05)


def _script() -> Any:
    from alembic.script import ScriptDirectory
    from dagster._core.storage.sql import get_alembic_config
    from dagster._core.storage.runs.sqlite import sqlite_run_storage

    return ScriptDirectory.from_config(get_alembic_config(sqlite_run_storage.__file__))


def _versions(path: str) -> list[str]:
    """The rows of a database's alembic_version ([] when it has none yet)."""
    con = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS)
    try:
        return [r[0] for r in con.execute("SELECT version_num FROM alembic_version")]
    except sqlite3.OperationalError:  # no such table: a database not initialized yet
        return []
    finally:
        con.close()


def _heads_message(path: str, rows: list[str]) -> str:
    return (f"Dagster's database {path} has {len(rows) or 'several'} alembic versions ({', '.join(rows) or '?'}), "
            "left by processes that created it at the same time; repair it with: "
            f"python -m evalpipe.store.instance_storage repair {path}")


def _plan(rows: list[str]) -> tuple[str | None, bool]:
    """(the version row to keep, whether dropping the others is certainly right). Certain: this Dagster's head is
    among the rows and the others are its ancestors, which is what the start-up race leaves (a process that found
    the tables already created stamps an older revision beside the creator's head; the tables are the head's).
    Otherwise the newest row when the rows lie on one line of migrations (then `dagster instance migrate`
    completes it), None when a row is unknown to this Dagster (written by another version)."""
    script = _script()
    head = script.get_current_head()
    lines: dict[str, set[str]] = {}
    for r in rows:
        try:
            lines[r] = {rev.revision for rev in script.iterate_revisions(r, "base")}
        except Exception:  # noqa: BLE001  alembic: unknown or ambiguous revision
            return None, False
    if head in rows and all(r in lines[head] for r in rows):
        return head, True
    newest = [r for r in rows if all(o in lines[r] for o in rows)]
    return (newest[0] if newest else None), False


def _keep_only(path: str, keep: str) -> None:
    con = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_SECONDS, isolation_level=None)
    try:
        con.execute("BEGIN IMMEDIATE")
        con.execute("DELETE FROM alembic_version WHERE version_num != ?", (keep,))
        if not con.execute("SELECT count(*) FROM alembic_version").fetchone()[0]:  # (both rows were `keep`)
            con.execute("INSERT INTO alembic_version VALUES (?)", (keep,))
        con.execute("COMMIT")
    finally:
        con.close()


def check_versions(path: str) -> None:
    """A database whose alembic_version holds more than one row is repaired when that is certain (`_plan`), with a
    warning; otherwise InstanceStorageError names the repair command. Call under `startup_lock`."""
    if not os.path.exists(path):
        return
    rows = _versions(path)
    if len(rows) <= 1:
        return
    keep, certain = _plan(rows)
    if not certain:
        raise InstanceStorageError(_heads_message(path, rows))
    _keep_only(path, keep)
    log.warning("repaired %s: it had %d alembic versions (%s) left by processes that created it at the same time; "
                "kept %s (this Dagster's head, whose tables it has)", path, len(rows), ", ".join(rows), keep)


# Dagster's compute log manager that captures nothing (the stdout/stderr tab of a run stays empty)
NO_COMPUTE_LOGS = {"module": "dagster._core.storage.noop_compute_log_manager", "class": "NoOpComputeLogManager"}


def open_instance(home: str | None = None, capture_compute_logs: bool = True) -> Any:
    """`DagsterInstance.get()` for this DAGSTER_HOME, made under the start-up lock, with Dagster's SQLite databases
    checked first (also when its dagster.yaml selects Dagster's stock SQLite storages rather than these).
    `capture_compute_logs=False`: the instance as dagster.yaml configures it, but runs executed through it in this
    process do not capture the process's stdout/stderr (Dagster's compute logs), see `eval_assets/launch.py`."""
    from dagster import DagsterInstance

    home = os.path.abspath(home or os.environ["DAGSTER_HOME"])
    with startup_lock(home):
        for rel in DATABASES:
            check_versions(os.path.join(home, rel))
        if capture_compute_logs:
            return DagsterInstance.get()
        from dagster._core.instance.ref import InstanceRef

        return DagsterInstance.from_ref(InstanceRef.from_dir(home, overrides={"compute_logs": NO_COMPUTE_LOGS}))


def repair(paths: list[str]) -> int:
    """`python -m evalpipe.store.instance_storage repair [DB or DAGSTER_HOME ...]`: keep one alembic version row per
    database (the head, or the newest of rows on one line of migrations); 0 when nothing is left to do."""
    code = 0
    for given in paths or [os.environ.get("DAGSTER_HOME", ".")]:
        given = os.path.abspath(given)
        dbs = [os.path.join(given, rel) for rel in DATABASES] if os.path.isdir(given) else [given]
        with startup_lock(given if os.path.isdir(given) else None):
            for path in (p for p in dbs if os.path.exists(p)):
                rows = _versions(path)
                if len(rows) <= 1:
                    print(f"{path}: ok ({rows[0] if rows else 'not initialized'})")
                    continue
                keep, certain = _plan(rows)
                if keep is None:
                    from dagster import __version__

                    print(f"{path}: versions {', '.join(rows)} are not one line of dagster {__version__}'s "
                          "migrations (written by another Dagster version?); install the Dagster that wrote it, or "
                          "move the database aside to start afresh", file=sys.stderr)
                    code = 2
                    continue
                _keep_only(path, keep)
                print(f"{path}: kept {keep} of {', '.join(rows)}"
                      + ("" if certain else "; now run `dagster instance migrate` to bring it to the head"))
    return code


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
            use_wal(con, SQLITE_WAIT_S)  # writes the header, which fixes the page size
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
        base = config_value.get("base_dir") or _home_dir("history", "runs", "")
        with startup_lock(base):
            check_versions(os.path.join(base, "index.db"))
            return cls(inst_data=inst_data, base_dir=base)

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
    def _slots_locked(self) -> Iterator[None]:
        # Dagster's claim asks whether a slot is free, queues the step as assigned if so, then takes a free slot by
        # id (SELECT ... FOR UPDATE SKIP LOCKED, which SQLite ignores): two processes claiming at the same moment
        # both got a pool's one slot. Claims and frees go one at a time per instance, across processes and threads
        # (flock on a file beside index.db), so a pool limit stays a limit (tests/test_pools.py).
        with open(os.path.join(os.path.abspath(self._base_dir), CLAIM_LOCK_FILE), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def claim_concurrency_slot(self, concurrency_key: str, run_id: str, step_key: str,
                               priority: int | None = None) -> Any:
        with self._slots_locked():
            return super().claim_concurrency_slot(concurrency_key, run_id, step_key, priority)

    def free_concurrency_slot_for_step(self, run_id: str, step_key: str) -> None:
        with self._slots_locked():
            return super().free_concurrency_slot_for_step(run_id, step_key)

    def free_concurrency_slots_for_run(self, run_id: str) -> None:
        with self._slots_locked():
            return super().free_concurrency_slots_for_run(run_id)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Any]:
        group = getattr(_group, "value", None)
        if group is not None and group[0] is self:  # inside `grouped()`: this thread's transaction on the shard
            conn = group[1].get(shard)
            if conn is None:
                conn = group[1][shard] = group[2].enter_context(self._transaction(shard))
            yield conn
            return
        with self._db_lock:
            with self._transaction(shard) as conn:
                yield conn

    @contextmanager
    def _transaction(self, shard: str) -> Iterator[Any]:
        if shard != "index" and shard not in self._initialized_dbs:
            self._copy_run_template(self.path_for_shard(shard))
        engine = engine_for(self.conn_string_for_shard(shard), per_run=shard != "index")
        if shard not in self._initialized_dbs:
            self._initdb(engine)  # on a copied template: its revision is the head, nothing to do
            self._initialized_dbs.add(shard)
        with engine.connect() as conn:
            with conn.begin():
                yield conn

    @contextmanager
    def grouped(self) -> Iterator[None]:
        """[sweeps] The events this thread stores inside the block share one transaction per database (the run's
        event log, the asset index), committed together when the block ends, or rolled back together when it
        raises: the same rows as one transaction per event and statement, in ~2 commits instead of ~2-3 per event
        (eval_assets/batch.py: a batch's planned events). Other threads' writes to this storage wait for the block,
        as they wait for any transaction here; so nothing inside may wait for another thread (a logging handler's
        lock: events logged through `context.log_event` are not for a group)."""
        if getattr(_group, "value", None) is not None:  # (nested: the outer block's transactions)
            yield
            return
        from contextlib import ExitStack

        with self._db_lock, ExitStack() as stack:
            _group.value = (self, {}, stack)
            try:
                yield
            finally:
                _group.value = None

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

    # Dagster asks "does table X exist?", "does model partition Y exist?" dozens of times per run (~60 and ~70
    # queries for one partition's chain, each on a fresh unpooled connection for has_table) and "has asset_keys
    # column Z?" on every asset event (reflecting the table). Tables and columns are never dropped under a running
    # process and partitions are added far more often than deleted, so positive answers are remembered: tables and
    # columns for the process, partitions for PARTITION_CACHE_S (a delete here forgets at once).
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

    def _has_asset_key_col_on_connection(self, conn: Any, column_name: str) -> bool:
        # asked (by reflecting the table's columns) on every asset event stored; a column, once there, stays
        known = self.__dict__.setdefault("_asset_key_cols", set())
        if column_name in known:
            return True
        present = super()._has_asset_key_col_on_connection(conn, column_name)
        if present:
            known.add(column_name)
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

    # [ui] A partitioned asset check's statuses (succeeded, failed, in progress per partition) are what the asset
    # graph and the asset page ask for on every poll (AssetGraphLiveQuery, AssetChecksQuery). Dagster computes them
    # from every partition's latest execution each time (its base storage keeps no checkpoint, dagster#33243): 3-7 s
    # per check at 10,000 partitions (docs/scale.md "The UI at 10,000 partitions"). Here the answer is kept per check
    # and given again while nothing it is computed from changed, in any process: the check's execution rows and its
    # asset's materializations (their number, newest id, newest evaluation, newest time: a row stored, updated or
    # deleted, as by a deleted run or a wiped asset, changes one), no run of it in progress, the same partitions
    # definition and dynamic partition keys. Otherwise Dagster's own computation runs, from scratch, as before.
    def get_asset_check_state(self, keys: Any) -> Any:
        keys = list(keys)
        cache = self.__dict__.setdefault("_check_states", {})
        tokens: dict = {}  # per partitions definition, once per call
        prints = self._check_fingerprints([key for key, _ in keys])
        out: dict = {}
        todo: list = []
        for key, partitions_def in keys:
            if partitions_def not in tokens:
                tokens[partitions_def] = self._partitions_token(partitions_def)
            stamp = (partitions_def, tokens[partitions_def], prints[key])
            hit = cache.get(key)
            if hit is not None and hit[0] == stamp and not hit[1].in_progress_runs:
                out[key] = hit[1]
            else:
                todo.append((key, partitions_def, stamp))
        if todo:
            got = super().get_asset_check_state([(k, p) for k, p, _ in todo])
            for key, _, stamp in todo:
                if key in got:
                    out[key] = got[key]
                    cache[key] = (stamp, got[key])
        return out

    def _check_fingerprints(self, check_keys: list) -> dict:
        """Per check: (its execution rows, its asset's materializations), each summarized as (rows, newest id, ...)."""
        from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable as Ex
        from dagster._core.storage.event_log.schema import SqlEventLogStorageTable as Ev

        assets = sorted({k.asset_key.to_string() for k in check_keys})
        with self.index_connection() as conn:
            checks = {(r[0], r[1]): tuple(r[2:]) for r in conn.execute(
                db.select(Ex.c.asset_key, Ex.c.check_name, db.func.count(), db.func.max(Ex.c.id),
                          db.func.max(Ex.c.evaluation_event_storage_id), db.func.max(Ex.c.create_timestamp),
                          db.func.max(Ex.c.evaluation_event_timestamp))
                .where(Ex.c.asset_key.in_(assets)).group_by(Ex.c.asset_key, Ex.c.check_name))}
            mats = {r[0]: tuple(r[1:]) for r in conn.execute(
                db.select(Ev.c.asset_key, db.func.count(), db.func.max(Ev.c.id), db.func.max(Ev.c.timestamp))
                .where(Ev.c.asset_key.in_(assets),
                       Ev.c.dagster_event_type == DagsterEventType.ASSET_MATERIALIZATION.value)
                .group_by(Ev.c.asset_key))}
        return {k: (checks.get((k.asset_key.to_string(), k.name)), mats.get(k.asset_key.to_string()))
                for k in check_keys}

    def _partitions_token(self, partitions_def: Any) -> Any:
        """The dynamic partition keys `partitions_def` reads (a deleted or added key can change a check's statuses)."""
        from dagster import DynamicPartitionsDefinition, MultiPartitionsDefinition

        defs = ([d.partitions_def for d in partitions_def.partitions_defs]
                if isinstance(partitions_def, MultiPartitionsDefinition) else [partitions_def])
        return tuple(tuple(self.get_dynamic_partitions(d.name)) for d in defs
                     if isinstance(d, DynamicPartitionsDefinition) and d.name)

    def _store_asset_event_tags(self, conn: Any, events: Any, event_ids: Any) -> None:
        super()._store_asset_event_tags(conn, events, event_ids)
        # called with the ids the index gave the asset events just inserted (their storage ids): remembered per
        # thread, so that whoever logged the event can point at it without querying for it (eval_assets/batch.py)
        if events and event_ids:
            _last_asset_event.value = (int(event_ids[-1]), float(events[-1].timestamp))

    def last_asset_event(self) -> tuple[int, float] | None:
        """(storage id, timestamp) of the last asset event this thread stored here (None: none yet)."""
        return getattr(_last_asset_event, "value", None)

    def store_event(self, event: Any) -> None:
        _last_asset_event.value = None
        # [sweeps] Dagster's store_event opens a connection and commits per statement group: an asset event 2-3
        # times, a check evaluation 3 (the run's log, the index, the check's execution row). Here the event's
        # statements share one transaction per database, committed when the event is stored (the same rows; an
        # event whose index write fails leaves no row in the run's log either)
        with self.grouped():
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
        with startup_lock(base):
            check_versions(os.path.join(base, "runs.db"))
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
        with startup_lock(base):
            check_versions(os.path.join(base, "schedules.db"))
            return cls.from_local(inst_data=inst_data, base_dir=_precreate(base, "schedules"))

    @contextmanager
    def connect(self) -> Iterator[Any]:
        with engine_for(self._conn_string).connect() as conn:
            with conn.begin():
                yield conn


def storage_yaml() -> str:
    """The dagster.yaml block that selects these storages (tests write it into their own DAGSTER_HOME)."""
    return "".join(f"{key}:\n  module: evalpipe.store.instance_storage\n  class: {cls}\n" for key, cls in (
        ("run_storage", "FastSqliteRunStorage"), ("event_log_storage", "FastSqliteEventLogStorage"),
        ("schedule_storage", "FastSqliteScheduleStorage")))


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0] != "repair":
        print("usage: python -m evalpipe.store.instance_storage repair [DB or DAGSTER_HOME ...]", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from evalpipe.store.instance_storage import repair as _repair  # the imported module's lock state, not __main__'s

    sys.exit(_repair(args[1:]))
