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
import os
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping
from urllib.parse import quote, unquote

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.errors import WarehouseError
from evalpipe.schema import TABLES

PART_FILE = "part.parquet"
SCHEMA_FILE = "_schema.parquet"


def _encode(value: str) -> str:
    return quote(str(value), safe="")  # '/' in "gaia/validation" must not make a folder level


def to_arrow(table: str, df: pd.DataFrame) -> pa.Table:
    """Conform a DataFrame to a table's schema: missing columns become nulls, unknown ones are an error."""
    schema = TABLES[table]
    extra = [c for c in df.columns if c not in schema.names]
    if extra:
        raise WarehouseError(f"table {table!r} has no column(s) {extra}; add them to evalpipe/schema.py")
    arrays = []
    for f in schema:
        if f.name in df.columns:
            col = df[f.name]
            col = col.astype(object).where(col.notna(), None)
            arrays.append(pa.array(col.tolist(), type=f.type, from_pandas=True))
        else:
            arrays.append(pa.nulls(len(df), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


class Warehouse:
    def __init__(self, duckdb_path: str | os.PathLike):
        self.duckdb_path = Path(duckdb_path).expanduser().resolve()
        self.root = self.duckdb_path.with_suffix("")  # dagster_home/warehouse/ beside warehouse.duckdb

    # ---- layout -------------------------------------------------------------------------------------------
    def table_dir(self, table: str) -> Path:
        if table not in TABLES:
            raise WarehouseError(f"unknown table {table!r}; known: {', '.join(TABLES)}")
        return self.root / table

    def partition_file(self, table: str, partition: Mapping[str, str]) -> Path:
        d = self.table_dir(table)
        for dim, value in partition.items():  # dimension order is fixed by the caller (benchmark_split, model)
            d = d / f"{dim}={_encode(value)}"
        return d / PART_FILE

    def glob(self, table: str) -> str:
        return str(self.table_dir(table) / "**" / "*.parquet")

    # ---- writes -------------------------------------------------------------------------------------------
    def write(self, table: str, df: pd.DataFrame, partition: Mapping[str, str]) -> Path:
        """Atomically replace one partition of a table. Returns the partition file's path."""
        from evalpipe.redact import redact_frame

        df = redact_frame(df)  # a redacted copy: no secret (key, token, user pattern) reaches a Parquet file
        for dim, value in partition.items():
            if dim in df.columns and len(df) and not (df[dim] == value).all():
                bad = df.loc[df[dim] != value, dim].iloc[0]
                raise WarehouseError(f"{table}: row has {dim}={bad!r} but the partition is {dim}={value!r}")
            df[dim] = value
        data = to_arrow(table, df)
        self._ensure_schema_file(table)
        target = self.partition_file(table, partition)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        try:
            pq.write_table(data, tmp, compression="zstd")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()
        self.ensure_views()
        return target

    def _ensure_schema_file(self, table: str) -> None:
        # A zero-row file per table gives the view its columns before any partition exists.
        path = self.table_dir(table) / SCHEMA_FILE
        schema = TABLES[table]
        if path.exists():
            try:
                if pq.read_schema(path).equals(schema):
                    return
            except Exception:  # a damaged placeholder is rewritten below
                pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SCHEMA_FILE}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
        pq.write_table(schema.empty_table(), tmp)
        os.replace(tmp, path)

    # ---- reads (never touch the DuckDB file, so they never wait for or block anyone) -------------------------
    def read(self, table: str, partition: Mapping[str, str]) -> pd.DataFrame:
        path = self.partition_file(table, partition)
        if not path.exists():
            where = ", ".join(f"{k}={v}" for k, v in partition.items())
            raise WarehouseError(f"no {table} for partition {where} in {self.root}; materialize it first")
        return pq.read_table(path).to_pandas()

    def partitions(self, table: str) -> list[dict[str, str]]:
        out = []
        for f in sorted(self.table_dir(table).rglob(PART_FILE)):
            parts = f.relative_to(self.table_dir(table)).parts[:-1]
            out.append({p.split("=", 1)[0]: unquote(p.split("=", 1)[1]) for p in parts if "=" in p})
        return out

    def connect(self):
        """An in-memory DuckDB connection with every table as a view: for queries from this process."""
        import duckdb

        con = duckdb.connect()
        for table in TABLES:
            self._ensure_schema_file(table)
            con.execute(f"CREATE VIEW {table} AS {self._view_sql(table)}")
        return con

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:
        con = self.connect()
        try:
            return con.execute(sql, params).df() if params is not None else con.execute(sql).df()
        finally:
            con.close()

    def read_table(self, table: str) -> pd.DataFrame:
        return self.query(f"SELECT * FROM {table}")

    # ---- the DuckDB file: views only ------------------------------------------------------------------------
    def _view_sql(self, table: str) -> str:
        glob = self.glob(table).replace("'", "''")
        return f"SELECT * FROM read_parquet('{glob}', union_by_name=true, hive_partitioning=false)"

    def _signature(self) -> str:
        spec = {t: [self._view_sql(t), str(TABLES[t])] for t in TABLES}
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()

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
                    if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                        raise WarehouseError(
                            f"cannot update the views in {self.duckdb_path}: another process holds it open "
                            f"({str(exc).splitlines()[0]}); close that connection and retry") from None
                    time.sleep(0.2)
            try:
                for table in TABLES:
                    con.execute(f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table)}")
            finally:
                con.close()
            tmp = self._sidecar.with_name(self._sidecar.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"signature": self._signature(), "root": str(self.root)}))
            os.replace(tmp, self._sidecar)
