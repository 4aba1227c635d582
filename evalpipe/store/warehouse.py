"""The warehouse: one Parquet file per (table, partition), and a DuckDB file of views over them.

Why this shape: DuckDB allows one writing process per database file, and Dagster materializes partitions in
parallel processes while analysts keep read-only connections open. Writers here never open the DuckDB file:
each partition is written to a temp file and renamed into place (atomic, idempotent: re-materializing
replaces the file). The DuckDB file only holds views over `read_parquet(<glob>, union_by_name=true)`; they
are created once (or when the schema changes) and see new partition files without being touched again.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote, unquote

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.core.errors import WarehouseError
from evalpipe.core.procs import pid_alive
from evalpipe.core.schema import TABLES

log = logging.getLogger(__name__)
_warned: set = set()  # stray files already warned about in this process
_scanned: dict[str, float] = {}  # table folder -> when it was last scanned for stray files
# (pid, views' signature) -> (in-memory DuckDB database, tables that have their view in it): see Warehouse.connect
_databases: dict[tuple[int, str], tuple[Any, set[str]]] = {}
_databases_lock = threading.Lock()
# [sweeps] every partition write checks its table's schema placeholder and the views' signature: what was found
# right is remembered, the placeholder by its file's (inode, mtime, size) and schema object, the signature by what
# it is computed from (Warehouse._signature)
_schema_files_ok: dict[str, tuple] = {}
_signatures: dict[tuple, str] = {}

PART_FILE = "part.parquet"

# Views over the tables' views (nothing writes them): name -> (the tables they read, their SELECT).
# `sample_stages` (design_refs 001, docs/operations.md "Per-sample stages"): where each sample of a partition stands. `init`: the prompts
# hold it (the dataset was loaded and the sample prompted for that model); `rollout`: it has a rollouts row (answered,
# or failed: `rollout_status` says which); `judged`: it has judgements rows (`judged_metrics` of them).
DERIVED_VIEWS: dict[str, tuple[tuple[str, ...], str]] = {
    "sample_stages": (("prompts", "rollouts", "judgements"), (
        "SELECT p.benchmark_split, p.model, p.sample_id, p.sample_index, "
        "CASE WHEN j.sample_id IS NOT NULL THEN 'judged' WHEN r.sample_id IS NOT NULL THEN 'rollout' ELSE 'init' END "
        "AS stage, r.status AS rollout_status, coalesce(j.n, 0) AS judged_metrics "
        "FROM prompts p "
        "LEFT JOIN (SELECT benchmark_split, model, sample_id, any_value(status) AS status FROM rollouts "
        "GROUP BY ALL) r ON r.benchmark_split = p.benchmark_split AND r.model = p.model AND r.sample_id = p.sample_id "
        "LEFT JOIN (SELECT benchmark_split, model, sample_id, count(*) AS n FROM judgements GROUP BY ALL) j "
        "ON j.benchmark_split = p.benchmark_split AND j.model = p.model AND j.sample_id = p.sample_id")),
}
STALE_TMP_S = 3600.0  # a temp file this old, or whose writer is gone, is a leftover of a killed write


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def damaged(table: str, path: Path, exc: BaseException) -> WarehouseError:
    """The error for a partition file that doesn't read: which file, and how to get it back."""
    if isinstance(path, str):  # an object URI (evalpipe/store/objects.py)
        return WarehouseError(f"damaged {table} partition object {path} ({_reason(exc)}); re-materialize it or "
                              "delete the object")
    parts = [p for p in path.parent.relative_to(path.parents[len(path.parents) - 1]).parts if "=" in p][-2:]
    where = " ".join(f"--{'split' if k == 'benchmark_split' else k} {unquote(v)}"
                     for k, v in (p.split("=", 1) for p in parts))
    return WarehouseError(f"damaged {table} partition file {path} ({_reason(exc)}); re-materialize it "
                          f"(evalpipe run {where}) or delete the file")


def clean_stale_tmp(folder: Path) -> int:
    """Remove temp files of killed writes (`.<name>.<pid>.<id>.tmp` whose process is gone, or older than an hour)."""
    n = 0
    try:
        entries = list(folder.glob(".*.tmp"))
    except OSError:
        return 0
    for f in entries:
        bits = f.name.split(".")
        try:
            pid = int(bits[-3])
        except (ValueError, IndexError):
            pid = -1
        try:
            if (pid > 0 and not pid_alive(pid)) or time.time() - f.stat().st_mtime > STALE_TMP_S:
                f.unlink()
                n += 1
                log.info("removed %s, left by a killed write", f)
        except OSError:
            pass
    return n
SCHEMA_FILE = "_schema/part.parquet"  # a zero-row placeholder the views always find (older layout: _schema.parquet)


def _encode(value: str) -> str:
    return quote(str(value), safe="")  # '/' in "gaia/validation" must not make a folder level


def to_arrow(table: str, df: pd.DataFrame, fill: Mapping[str, str] | None = None) -> pa.Table:
    """Conform a DataFrame to a table's schema: missing columns become nulls (or the value `fill` gives them),
    unknown ones are an error."""
    schema = TABLES[table]
    fill = fill or {}
    extra = [c for c in dict.fromkeys([*df.columns, *fill]) if c not in schema.names]
    if extra:
        raise WarehouseError(f"table {table!r} has no column(s) {extra}; add them to evalpipe/core/schema.py")
    arrays = []
    for f in schema:
        if f.name in fill:
            arrays.append(pa.array([fill[f.name]] * len(df), type=f.type))
        elif f.name in df.columns:
            arrays.append(_arrow_column(df[f.name], f.type))
        else:
            arrays.append(pa.nulls(len(df), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _arrow_column(col: pd.Series, typ: pa.DataType) -> pa.Array:
    # A column already of the field's kind converts in C (NaN and None become nulls); any other goes through Python
    # objects, which converts differently (e.g. 1.5 into an integer field is 1 there, an error directly).
    kind = col.dtype.kind
    if ((kind == "O" and pa.types.is_string(typ)) or (kind == "f" and pa.types.is_floating(typ))
            or (kind in "iu" and pa.types.is_integer(typ)) or (kind == "b" and pa.types.is_boolean(typ))):
        return pa.array(col, type=typ, from_pandas=True)
    col = col.astype(object).where(col.notna(), None)
    return pa.array(col.tolist(), type=typ, from_pandas=True)


def close_databases() -> None:
    """Close this process's in-memory DuckDB databases (`Warehouse.connect`): before a fork, so none crosses it."""
    with _databases_lock:
        for db, _ in _databases.values():
            db.close()
        _databases.clear()


class Warehouse:
    def __init__(self, duckdb_path: str | os.PathLike, store: Any = None):
        self.duckdb_path = Path(duckdb_path).expanduser().resolve()
        self.root = self.duckdb_path.with_suffix("")  # dagster_home/warehouse/ beside warehouse.duckdb
        from evalpipe.store import objects as storage  # object storage when `warehouse.uri` / EVALS_WAREHOUSE_URI says so

        self.store = store if store is not None else storage.from_config()
        if not self.store and self.duckdb_path.is_dir():  # DuckDB's own error reads like a lock held elsewhere
            raise WarehouseError(f"the warehouse path {self.duckdb_path} is a folder; it must name a DuckDB file: set "
                                 f"EVALS_WAREHOUSE to a file path such as {self.duckdb_path / 'warehouse.duckdb'}")

    # ---- layout -------------------------------------------------------------------------------------------
    def table_dir(self, table: str) -> Path:
        if table not in TABLES:
            raise WarehouseError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
        return self.root / table

    def partition_file(self, table: str, partition: Mapping[str, str]) -> Path:
        d = self.table_dir(table)
        if self.store:  # an object: `.exists()` and `str()` work as on a Path
            from evalpipe.store.objects import ObjectPath

            return ObjectPath(self.store, self.store.partition_uri(table, partition))  # type: ignore[return-value]
        for dim, value in partition.items():  # dimension order is fixed by the caller (benchmark_split, model)
            d = d / f"{dim}={_encode(value)}"
        return d / PART_FILE

    def glob(self, table: str) -> str:
        if self.store:
            return self.store.glob(table)
        return str(self.table_dir(table) / "**" / "*.parquet")

    # ---- writes -------------------------------------------------------------------------------------------
    def write(self, table: str, df: pd.DataFrame, partition: Mapping[str, str]) -> Path:
        """Atomically replace one partition of a table with one frame. Returns the partition file's path."""
        with self.writer(table, partition) as w:
            w.write(df)
        return w.path

    def writer(self, table: str, partition: Mapping[str, str]) -> "PartitionWriter":
        """A writer that appends batches to the partition's next version; `close()` (or leaving the `with` block
        without an error) puts it into place atomically, an error leaves the old version as it was."""
        return PartitionWriter(self, table, partition)

    def delete(self, table: str, partition: Mapping[str, str]) -> bool:
        """Remove one partition of a table (`evalpipe forget`), and its folders once empty; True if it was there.
        The views need no change: they glob the files at every query."""
        path = self.partition_file(table, partition)
        if self.store:
            if not path.exists():
                return False
            try:
                self.store.fs.rm(self.store._path(str(path)))
            except (OSError, ValueError) as exc:
                raise self.store._fail("delete the partition object", str(path), exc) from exc
            self.store.fs.invalidate_cache()
            return True
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise WarehouseError(f"cannot delete the {table} partition file {path}: {_reason(exc)}; fix the "
                                 "folder's permissions and retry") from None
        for folder in path.parents:  # <table>/benchmark_split=.../model=...: the levels this partition made
            if folder == self.table_dir(table):
                break
            try:
                folder.rmdir()
            except OSError:  # not empty (another partition, a temp file): kept
                break
        return True

    def _views_after_write(self, target: Any) -> None:
        try:  # the partition is written; views that can't be updated now are rebuilt by a later write
            self.ensure_views(wait_s=1.0)
        except (WarehouseError, OSError) as exc:
            log.warning("%s written; the DuckDB views were not rebuilt (%s); the next write rebuilds them", target,
                        _reason(exc))

    def _ensure_schema_file(self, table: str) -> None:
        # A zero-row file per table gives the view its columns before any partition exists.
        if self.store:
            return self.store.ensure_schema(table, TABLES[table])
        path = self.table_dir(table) / SCHEMA_FILE
        schema = TABLES[table]
        try:  # [sweeps] a placeholder already read as right in this process, the same file since: nothing to do
            st = os.stat(path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size, id(schema))
        except OSError:
            stamp = None
        if stamp is not None and _schema_files_ok.get(str(path)) == stamp:
            return
        if stamp is not None:
            try:
                if pq.read_schema(path).equals(schema):
                    _schema_files_ok[str(path)] = stamp
                    return
            except Exception:  # a damaged placeholder is rewritten below
                pass
        tmp = path.with_name(f".{PART_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(schema.empty_table(), tmp)
            os.replace(tmp, path)
        except (OSError, pa.ArrowException) as exc:
            raise WarehouseError(f"cannot write the {table} schema file {path}: {_reason(exc)}; the warehouse "
                                 "folder must be writable (EVALS_WAREHOUSE moves it)") from None

    # ---- reads (never touch the DuckDB file, so they never wait for or block anyone) -------------------------
    def read(self, table: str, partition: Mapping[str, str], columns: list[str] | None = None) -> pd.DataFrame:
        """One whole partition as a DataFrame (small partitions; large ones: `reader(...).batches()`)."""
        return self.reader(table, partition).to_pandas(columns)

    def reader(self, table: str, partition: Mapping[str, str]) -> "PartitionReader":
        """The partition, read lazily: batches of the columns asked for. Raises if it is missing or damaged."""
        return PartitionReader(self, table, partition)

    def damaged_files(self, table: str) -> list[Path]:
        """Partition files of a table that don't read as Parquet (truncated, overwritten)."""
        if self.store:
            return self.store.damaged_files(table)
        bad = []
        for f in sorted(self.table_dir(table).rglob(PART_FILE)):
            try:
                pq.read_metadata(f)
            except (OSError, pa.ArrowException):
                bad.append(f)
        return bad

    def stray_files(self, table: str) -> list[Path]:
        """Files under a table's folder that are not its partition files (skipped by the views)."""
        root = self.table_dir(table)
        if self.store or not root.exists():  # (object storage: the views only ever match part.parquet)
            return []
        out = []
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(root).parts
            if not f.is_file() or "/".join(rel) in (SCHEMA_FILE, "_schema.parquet") or f.name.endswith(".tmp"):
                continue
            if f.name != PART_FILE or not all("=" in p for p in rel[:-1]):  # (unpartitioned: <table>/part.parquet)
                out.append(f)
        return out

    def may_have_rows(self, table: str) -> bool:
        """False when a local table has no file its view reads but the zero-row schema placeholder (so a query
        of it returns no rows, without DuckDB); True otherwise (on object storage: not listed, assumed)."""
        if self.store:
            return True
        d = self.table_dir(table)
        return any(f != d / SCHEMA_FILE for f in d.rglob(PART_FILE)) if d.is_dir() else False

    def partitions(self, table: str) -> list[dict[str, str]]:
        if self.store:
            return self.store.partitions(table)
        out = []
        for f in sorted(self.table_dir(table).rglob(PART_FILE)):
            parts = f.relative_to(self.table_dir(table)).parts[:-1]
            if parts and all("=" in p for p in parts):  # not the schema placeholder nor a stray copy
                out.append({p.split("=", 1)[0]: unquote(p.split("=", 1)[1]) for p in parts})
        return out

    def connect(self, tables: Any = None):
        """A DuckDB connection (a cursor on an in-memory database) with every table (or only `tables`) as a view:
        for queries from this process; close it when done. Opening a DuckDB database costs 20-100 ms and a cursor
        nothing, so the database is opened once per process and warehouse (again in a forked child: DuckDB's
        threads do not survive a fork) and each view is created once: a view reads the files at every query, so
        it never goes stale."""
        import duckdb

        names = (set(TABLES) | set(DERIVED_VIEWS)) if tables is None else set(tables)
        derived = [v for v in DERIVED_VIEWS if v in names]
        names |= {t for v in derived for t in DERIVED_VIEWS[v][0]}
        wanted = [t for t in TABLES if t in names]
        key = (os.getpid(), self._signature())
        with _databases_lock:
            if key not in _databases:
                db = duckdb.connect()
                if self.store:
                    self.store.register(db)
                _databases[key] = (db, set())
            db, viewed = _databases[key]
            for table in wanted:
                self._ensure_schema_file(table)
                if table not in viewed:
                    db.execute(f"CREATE VIEW {table} AS {self._view_sql(table)}")
                    viewed.add(table)
            for view in derived:
                if view not in viewed:
                    db.execute(f"CREATE VIEW {view} AS {DERIVED_VIEWS[view][1]}")
                    viewed.add(view)
            con = db.cursor()
        for table in wanted:
            root = str(self.table_dir(table))
            if time.monotonic() - _scanned.get(root, -1e9) < 60:  # a scan per table per minute is plenty
                continue
            _scanned[root] = time.monotonic()
            for f in self.stray_files(table):
                if f not in _warned:
                    _warned.add(f)
                    log.warning("skipping stray file %s in the warehouse (not a partition file of %s)", f, table)
        return con

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:
        import duckdb

        con = None
        try:
            import re

            # views only for the tables the query names (a word match; a false positive only costs a view)
            named = [t for t in (*TABLES, *DERIVED_VIEWS) if re.search(rf"\b{re.escape(t)}\b", sql, re.IGNORECASE)]
            con = self.connect(named)
            return con.execute(sql, params).df() if params is not None else con.execute(sql).df()
        except duckdb.Error as exc:  # a damaged partition file: name it, and how to get it back
            if ".parquet" in str(exc) or "parquet" in str(exc).lower():
                for table in TABLES:
                    bad = self.damaged_files(table)
                    if bad:
                        raise damaged(table, bad[0], exc) from exc
            raise
        finally:
            if con is not None:
                con.close()

    def read_table(self, table: str) -> pd.DataFrame:
        return self.query(f"SELECT * FROM {table}")

    # ---- the DuckDB file: views only ------------------------------------------------------------------------
    def _view_sql(self, table: str) -> str:
        # only the table's own files, all named part.parquet (partitions and the schema placeholder); a stray
        # file (a copy, a download) is skipped with a warning instead of breaking every query
        glob = self.store.glob(table) if self.store else str(self.table_dir(table) / "**" / PART_FILE)
        glob = glob.replace("'", "''")
        return f"SELECT * FROM read_parquet('{glob}', union_by_name=true, hive_partitioning=false)"

    def _signature(self) -> str:
        # [sweeps] what it is made of, for a local warehouse: its folder and the tables' and views' definitions
        key = (None if self.store else (str(self.root), tuple((t, id(TABLES[t])) for t in TABLES),
                                        tuple(DERIVED_VIEWS.items())))
        if key is not None and key in _signatures:
            return _signatures[key]
        spec = {t: [self._view_sql(t), str(TABLES[t])] for t in TABLES} | {v: sql for v, (_, sql) in DERIVED_VIEWS.items()}
        sig = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
        if key is not None:
            _signatures[key] = sig
        return sig

    @property
    def _sidecar(self) -> Path:
        return self.duckdb_path.with_name(self.duckdb_path.name + ".views.json")

    def views_current(self) -> bool:
        try:
            return json.loads(self._sidecar.read_text())["signature"] == self._signature() and self.duckdb_path.exists()
        except (OSError, ValueError, KeyError):
            return False

    @contextmanager
    def _lock(self) -> Iterator[None]:
        self.duckdb_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.duckdb_path.with_name(self.duckdb_path.name + ".lock"), "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def ensure_views(self, wait_s: float = 10.0) -> None:
        """Create the views in the DuckDB file if they are missing or stale. A no-op (no DuckDB open) otherwise."""
        if self.store:  # object storage: a DuckDB file can't carry the fsspec filesystem; connect() has the views
            return
        if self.views_current():
            return
        import duckdb

        with self._lock():
            if self.views_current():
                return
            for table in TABLES:
                self._ensure_schema_file(table)
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    con = duckdb.connect(str(self.duckdb_path))
                    break
                except duckdb.IOException as exc:
                    if "lock" not in str(exc).lower():  # not a lock: say what it is (a folder, a damaged file)
                        raise WarehouseError(f"cannot open the warehouse file {self.duckdb_path}: "
                                             f"{str(exc).splitlines()[0]}") from None
                    if time.monotonic() > deadline:
                        raise WarehouseError(
                            f"cannot update the views in {self.duckdb_path}: another process holds it open "
                            f"({str(exc).splitlines()[0]}); close that connection and retry") from None
                    time.sleep(0.2)
            try:
                for table in TABLES:
                    con.execute(f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table)}")
                for view, (_, sql) in DERIVED_VIEWS.items():
                    con.execute(f"CREATE OR REPLACE VIEW {view} AS {sql}")
            finally:
                con.close()
            tmp = self._sidecar.with_name(self._sidecar.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"signature": self._signature(), "root": str(self.root)}))
            os.replace(tmp, self._sidecar)


# ---- streaming: partitions written and read in batches (docs/scale.md) ------------------------------------------------
DEFAULT_BATCH_ROWS = 20_000  # rows per batch when the config has no `stream_batch_rows`


ONE_SCAN_BYTES = 64 << 20  # text columns up to this size together are scanned for secrets as one array


def redact_arrow(data: pa.Table, keep: Any = ()) -> pa.Table:
    """`redact.redact_frame`, the same cells masked, on a conformed batch: each text column (but those named in
    `keep`) is scanned once in C (`Redactor.could_match_cells`), and only the cells that could hold a secret go
    through `redact` (`redact_generated` for model output) in Python; a column with none is kept as it is."""
    import numpy as np

    from evalpipe.core.redact import get_redactor

    r = get_redactor()
    texts = [i for i, field in enumerate(data.schema) if pa.types.is_string(field.type) and field.name not in keep]
    if not texts:
        return data
    # [sweeps] the text columns scanned as one array: the scan's cost is mostly compiling its pattern, once per
    # call (a partition of a few rows paid it once per column); a cell's flag does not depend on its neighbours
    chunks = [c for i in texts for c in data.column(i).chunks]
    if sum(c.nbytes for c in chunks) < ONE_SCAN_BYTES:
        flags = r.could_match_cells(pa.concat_arrays(chunks) if chunks else pa.array([], type=pa.string()))
        bounds = np.cumsum([0] + [len(data.column(i)) for i in texts])
        column_flags = [flags[bounds[k]:bounds[k + 1]] for k in range(len(texts))]
    else:  # (large text: a column at a time, as one array's offsets can't pass 2 GB)
        column_flags = [r.could_match_cells(data.column(i)) for i in texts]
    for k, i in enumerate(texts):
        field = data.schema.field(i)
        flagged = np.flatnonzero(column_flags[k])
        if not len(flagged):
            continue
        redact = r.for_field(field.name)  # model output: known secrets only; scored fields and ids: no PII masking
        values = data.column(i).to_pylist()
        for j in flagged.tolist():
            values[j] = redact(values[j])
        data = data.set_column(i, field, pa.array(values, type=field.type))
    return data


def _all_equal(col: pd.Series, value: Any) -> bool:
    """`(col == value).all()`; a text column compared in numpy (~10x less than pandas' comparison on a batch)."""
    if col.dtype == object:
        return bool((col.to_numpy() == value).all())
    return bool((col == value).all())


def _same_bytes(new: Path, old: Path) -> bool:
    """Whether the file `old` holds exactly the bytes of `new` (False when it is missing or can't be read)."""
    import filecmp

    try:
        return os.path.getsize(new) == os.path.getsize(old) and filecmp.cmp(new, old, shallow=False)
    except OSError:
        return False


class PartitionWriter:
    """One partition's next version, written batch by batch (each `write` appends a Parquet row group to a temp
    file); `close()` fsyncs it and renames it into place, so readers see the old partition or the whole new one
    (a new version byte for byte the file already there leaves that file as it is).
    On object storage the temp file is local and `close()` uploads it as one object (an atomic PUT).
    Use it as a context manager: an exception inside the block discards the temp file (`abort()`)."""

    def __init__(self, wh: Warehouse, table: str, partition: Mapping[str, str]):
        self.wh, self.table, self.partition = wh, table, dict(partition)
        wh.table_dir(table)  # an unknown table name raises here
        self.schema = TABLES[table]
        self.rows = 0
        self.path: Any = wh.partition_file(table, partition)
        if wh.store:
            import tempfile

            fd, name = tempfile.mkstemp(prefix=f".{table}.", suffix=".parquet.tmp")
            os.close(fd)
            self._tmp = Path(name)
        else:
            wh._ensure_schema_file(table)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._cannot(exc) from exc
            clean_stale_tmp(self.path.parent)
            self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            # no dictionary pages: measured on the stages' batches, plain zstd pages write ~35% faster, read no
            # slower and come out smaller (zstd finds the repeats a dictionary would)
            self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self._tmp, self.schema, compression="zstd",
                                                                     use_dictionary=False)
        except (OSError, pa.ArrowException) as exc:
            self._discard()
            raise self._cannot(exc) from exc

    def _cannot(self, exc: BaseException) -> WarehouseError:
        return WarehouseError(f"cannot write the {self.table} partition file {self.path}: {_reason(exc)}; free space "
                              "or fix the folder's permissions (EVALS_WAREHOUSE moves it), then re-run")

    def write(self, df: pd.DataFrame) -> None:
        """Append one batch (conformed to the table's schema, redacted, partition columns checked and filled)."""
        if self._writer is None:
            raise WarehouseError(f"{self.table} writer for {self.path} is already closed")
        for dim, value in self.partition.items():
            if dim in df.columns and len(df) and not _all_equal(df[dim], value):
                bad = df.loc[df[dim] != value, dim].iloc[0]
                raise WarehouseError(f"{self.table}: row has {dim}={bad!r} but the partition is {dim}={value!r}")
        # redacted: no secret (key, token, user pattern) reaches a Parquet file; the partition's own key is kept
        data = redact_arrow(to_arrow(self.table, df, fill=self.partition), keep=self.partition)
        try:
            self._writer.write_table(data)
        except (OSError, pa.ArrowException) as exc:  # disk full, file too large
            self.abort()
            raise self._cannot(exc) from exc
        self.rows += len(df)

    def close(self) -> Any:
        """Put the written partition into place (atomically); returns its path (an object URI on object storage)."""
        if self._writer is None:
            return self.path
        try:
            self._writer.close()
            self._writer = None
            if self.wh.store:
                self.path = self.wh.store.put(self.table, self._tmp, self.partition, self.schema)
            elif _same_bytes(self._tmp, self.path):
                # [sweeps] byte for byte the partition already there (a cached re-run): left as it is, no fsync or
                # rename; readers, the rollups' change check (inode, mtime, size) and the views see no change
                return self.path
            else:
                with open(self._tmp, "rb") as fh:
                    os.fsync(fh.fileno())
                os.replace(self._tmp, self.path)
        except (OSError, pa.ArrowException) as exc:
            raise self._cannot(exc) from exc
        finally:
            self._writer = None
            self._discard()
        if not self.wh.store:
            self.wh._views_after_write(self.path)
        return self.path

    def abort(self) -> None:
        """Discard what was written: the partition keeps its previous version (or stays missing)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except (OSError, pa.ArrowException):
                pass
            self._writer = None
        self._discard()

    def _discard(self) -> None:
        try:
            if self._tmp.exists():
                self._tmp.unlink()
        except OSError:
            pass

    def __enter__(self) -> "PartitionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _scalar_columns(schema: pa.Schema) -> bool:
    """Whether every column holds scalars (text, numbers, flags, times): no list, struct or map cells."""
    return not any(pa.types.is_nested(field.type) for field in schema)


SMALL_PARTITION_BYTES = 1 << 20  # partition files up to this size are held decoded for their next readers
READ_CACHE_BYTES = 64 << 20  # at most this much decoded data held per process (least recently used goes first)


class _Decoded:
    """[sweeps] Small partition files as pyarrow decoded them, for the next reader of the same file: a cached
    partition's prompts, rollouts and judgements are each read by several stages, its checks and its run folder.
    Keyed by the file's path, inode, mtime and size: a new version (written by rename, docs/scale.md) is another
    key; a version written with the same bytes is left in place (PartitionWriter.close) and keeps its key. Arrow
    data is immutable, so readers share it; each gets its own DataFrame (a copy of the one converted first)."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.lock = threading.Lock()
        self.items: dict[tuple, dict[Any, Any]] = {}  # (insertion order = least recently used first)

    def entry(self, path: Any) -> dict[Any, Any] | None:
        """The cache entry of a local partition file small enough to hold (a dict: "meta", ("batches", n),
        "table"), else None."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        if st.st_size > SMALL_PARTITION_BYTES:
            return None
        key = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
        with self.lock:
            got = self.items.pop(key, None)
            if got is None:
                got = {"_bytes": 0, "_key": key}
            self.items[key] = got
            return got

    def any_batches(self, entry: dict[Any, Any]) -> list | None:
        """Some non-empty list of the file's batches already held, or None."""
        with self.lock:
            return next((v for k, v in entry.items() if isinstance(k, tuple) and v), None)

    def put(self, entry: dict[Any, Any], name: Any, value: Any, nbytes: int) -> Any:
        with self.lock:
            if name not in entry:
                entry[name] = value
                if self.items.get(entry["_key"]) is entry:  # (an entry let go meanwhile lives on with its reader)
                    entry["_bytes"] += nbytes
                    self.size += nbytes
            while self.size > self.limit and self.items:
                _, old = next(iter(self.items.items()))
                self.items.pop(next(iter(self.items)))
                self.size -= old["_bytes"]
            return entry[name]


_decoded = _Decoded(READ_CACHE_BYTES)


class PartitionReader:
    """One partition read lazily: `batches()` yields DataFrames of at most `batch_rows` rows of the columns asked
    for (pyarrow `iter_batches`), so a stage holds one batch at a time. The file's footer is read on creation:
    a missing or damaged partition fails here, with the message saying how to get it back."""

    def __init__(self, wh: Warehouse, table: str, partition: Mapping[str, str]):
        self.wh, self.table, self.partition = wh, table, dict(partition)
        self.path: Any = wh.partition_file(table, partition)
        if not self.path.exists():
            where = ", ".join(f"{k}={v}" for k, v in partition.items())
            raise WarehouseError(f"no {table} for partition {where} in {wh.store.uri if wh.store else wh.root}; "
                                 "materialize it first")
        self._held = None if wh.store else _decoded.entry(self.path)  # a small local file: decoded once
        meta = self._held.get("meta") if self._held is not None else None
        if meta is None:
            with self._open() as pf:
                meta = (pf.metadata.num_rows, list(pf.schema_arrow.names), pf.schema_arrow)
            if self._held is not None:  # (its size: about what the schema and names take, so that a process
                # that opens many files and reads few still holds a bounded number of them)
                _decoded.put(self._held, "meta", meta, 1024 + 64 * len(meta[1]))
        self.num_rows, self.columns, self._schema = meta[0], list(meta[1]), meta[2]

    def _held_frame(self, name: tuple, data: Any, have: list[str]) -> pd.DataFrame:
        """[sweeps] `data.select(have).to_pandas()` of a held file: its every column converted once, and each reader
        given a deep copy of the columns it asks for (the stages, checks and run folder ask for different ones).
        Every column of the tables is a scalar type, so the copy is the same frame as a conversion, and a reader
        changing its frame changes no other reader's; converting cost ~5x the copy."""
        if not _scalar_columns(data.schema):  # (nested values: a copy would share them)
            return data.select(have).to_pandas()
        df = self._held.get(name)
        if df is None:  # (its size: the text as arrow holds it, and about a pointer or number per cell)
            df = _decoded.put(self._held, name, data.to_pandas(), data.nbytes + 8 * data.num_rows * data.num_columns)
        if list(df.columns) == have:
            return df.copy()
        # (by position: pandas' selection by names costs more than converting them; `take` may give a view)
        return df.take([df.columns.get_loc(c) for c in have], axis=1).copy()

    @contextmanager
    def _open(self) -> Iterator[pq.ParquetFile]:
        if self.wh.store:
            with self.wh.store.open_partition(self.table, self.partition) as fh:
                try:
                    yield pq.ParquetFile(fh)
                except (OSError, pa.ArrowException) as exc:
                    raise self.wh.store._fail("read the partition object", str(self.path), exc) from exc
            return
        try:
            pf = pq.ParquetFile(self.path)
        except (OSError, pa.ArrowException) as exc:
            raise damaged(self.table, self.path, exc) from exc
        try:
            yield pf
        except (OSError, pa.ArrowException) as exc:
            raise damaged(self.table, self.path, exc) from exc
        finally:
            pf.close()

    def __len__(self) -> int:
        return self.num_rows

    def __repr__(self) -> str:
        return f"PartitionReader({self.table}, {self.partition}, rows={self.num_rows})"

    def batches(self, batch_rows: int | None = None, columns: list[str] | None = None) -> Iterator[pd.DataFrame]:
        """DataFrames of at most `batch_rows` rows, in file order. A column the file lacks (written before the
        column existed) comes back as nulls. An empty partition yields one empty frame (with its columns), so a
        stage runs its kernel once either way."""
        want = list(columns) if columns is not None else self.columns
        have = [c for c in want if c in self.columns]
        n = max(1, int(batch_rows or DEFAULT_BATCH_ROWS))
        if self._held is not None:  # the file's batches as its reader cuts them, every column, decoded once
            held = self._held.get(("batches", n))
            if held is None:
                with self._open() as pf:
                    held = list(pf.iter_batches(batch_size=n, use_threads=False))
                held = _decoded.put(self._held, ("batches", n), held, sum(b.nbytes for b in held))
            for i, batch in enumerate(held):
                yield self._frame(self._held_frame(("frame", n, i), batch, have), want)
            if not held:
                yield self._frame(self._schema.empty_table().select(have).to_pandas(), want)
            return
        with self._open() as pf:
            empty = True
            for batch in pf.iter_batches(batch_size=n, columns=have, use_threads=False):
                empty = False
                yield self._frame(batch.to_pandas(), want)
            if empty:
                yield self._frame(pf.schema_arrow.empty_table().select(have).to_pandas(), want)

    def to_pandas(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The whole partition (or some of its columns) as one DataFrame: for small partitions and tests."""
        want = list(columns) if columns is not None else self.columns
        have = [c for c in want if c in self.columns]
        if self._held is not None:
            table = self._held.get("table")
            if table is None:
                cut = _decoded.any_batches(self._held)
                if cut is not None:  # the batches already held, as one table (the same rows and values)
                    table = pa.Table.from_batches(cut)
                    table = _decoded.put(self._held, "table", table, 0)
                else:
                    with self._open() as pf:
                        table = pf.read(use_threads=False)
                    table = _decoded.put(self._held, "table", table, table.nbytes)
            return self._frame(self._held_frame(("frame",), table, have), want)
        with self._open() as pf:
            df = pf.read(columns=have, use_threads=False).to_pandas()
        return self._frame(df, want)

    def select(self, keep: Any, batch_rows: int | None = None, columns: list[str] | None = None) -> pd.DataFrame:
        """The rows for which `keep(batch)` (a boolean Series) is true, read batch by batch: a small part of a
        large partition without holding the rest."""
        parts = [b[keep(b)] for b in self.batches(batch_rows, columns)]
        return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0].reset_index(drop=True)

    def cursor(self, columns: list[str] | None = None, batch_rows: int | None = None) -> "SampleCursor":
        """Rows handed out for consecutive batches of sample ids (see SampleCursor)."""
        return SampleCursor(self, columns, batch_rows)

    @staticmethod
    def _frame(df: pd.DataFrame, want: list[str]) -> pd.DataFrame:
        for c in want:
            if c not in df.columns:
                df[c] = None
        return df[want] if list(df.columns) != want else df


class SampleCursor:
    """A per-sample table (rollouts, judgements: one or several rows per sample) read side by side with the
    partition's prompts. Every stage writes its rows in prompt order, so the rows for the next batch of prompts are
    the next rows of the file: `take(ids)` hands them out from a read-ahead buffer of about one batch. Should a
    file not be in that order (written by hand, or by an older version), `take` falls back to scanning the whole
    file for the ids of each batch: slower, the same rows."""

    def __init__(self, reader: PartitionReader, columns: list[str] | None = None, batch_rows: int | None = None,
                 key: str = "sample_id"):
        self.reader, self.key, self.batch_rows = reader, key, batch_rows
        self.columns = None if columns is None else list(dict.fromkeys([key, *columns]))
        self._batches = reader.batches(batch_rows, self.columns)
        self._buf: pd.DataFrame | None = None
        self._exhausted = False
        self.in_order = True

    def take(self, ids: Any) -> pd.DataFrame:
        """The rows whose key is in `ids` (a batch of prompts' sample ids, in prompt order), in file order."""
        import numpy as np

        values = np.asarray(ids if isinstance(ids, pd.Series) else list(ids), dtype=object)
        wanted = set(values.tolist())
        if self.in_order:
            rows = self._next_rows(wanted, values)
            if rows is not None:
                return rows
            self.in_order = False
            log.warning("%s rows are not in prompt order; reading the file once per batch instead (slower)",
                        self.reader.table)
        return self.reader.select(lambda b: b[self.key].isin(wanted), self.batch_rows, self.columns)

    def _next_rows(self, wanted: set, values: Any) -> pd.DataFrame | None:
        rest = None  # the buffer after these rows, when it is the next batch as read
        while True:
            buf = self._buf
            if buf is not None and len(buf):
                inside = buf[self.key].isin(values).to_numpy()  # (an array: pandas would copy a set into one)
                if not inside.all():
                    cut = int(inside.argmin())  # the first row of a later batch
                    break
            if self._exhausted:
                cut = len(buf) if buf is not None else 0
                break
            nxt = next(self._batches, None)
            if nxt is None:
                self._exhausted = True
            elif buf is None or not len(buf):
                self._buf = nxt
            elif (len(nxt) and not nxt[self.key].iloc[:1].isin(values).any() and list(nxt.columns) == list(buf.columns)
                  and (nxt.dtypes.to_numpy() == buf.dtypes.to_numpy()).all()):
                # the buffer is all wanted and the next batch starts with a later sample: the buffer is the answer,
                # without copying both into one frame (which would give these dtypes: the same rows and values)
                cut, rest = len(buf), nxt
                break
            else:
                self._buf = pd.concat([buf, nxt], ignore_index=True)
        buf = self._buf
        if buf is None:
            return None if wanted else pd.DataFrame(columns=self.columns or [self.key])
        head = buf.iloc[:cut]
        if set(head[self.key]) != wanted:
            return None
        self._buf = rest if rest is not None else buf.iloc[cut:].reset_index(drop=True)
        return head.reset_index(drop=True)
