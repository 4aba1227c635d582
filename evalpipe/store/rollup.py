"""One table's rows from all its partition files, kept as one compact file and refreshed by what changed.

Reading a table queries every partition file: at 10,000 partitions DuckDB opens 10,000 Parquet files (5-7 s on a
2-core machine), which is what a leaderboard rebuild after each metrics partition would pay. The rollup keeps the
rows of every partition file in `<warehouse>/_rollups/<table>.parquet`, together with what each file was when it
was read (inode, mtime in ns, size: a partition is replaced by a rename, so a new version is a new inode). A read
stats the partition files (one directory walk), reads only the files that are new or changed, drops the rows of
those changed or gone, and writes the rollup again (atomically; a rollup that can't be written is only slower).

The rollup is a cache: it is rebuilt whole when the table's schema changes, and a warehouse on object storage
(`warehouse.uri`) is read directly.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.core.schema import TABLES
from evalpipe.store.warehouse import PART_FILE, Warehouse

log = logging.getLogger(__name__)

FILE_COLUMN = "_partition_file"  # the partition file (relative to the table's folder) each row came from
META_KEY = b"evalpipe.rollup"


def rollup_path(wh: Warehouse, table: str) -> Path:
    return wh.root / "_rollups" / f"{table}.parquet"


def _partition_files(table_dir: Path) -> dict[str, tuple[int, int, int]]:
    """{relative path: (inode, mtime_ns, size)} of every partition file (`dim=value/.../part.parquet`)."""
    out: dict[str, tuple[int, int, int]] = {}
    for folder, _dirs, files in os.walk(table_dir):
        if PART_FILE not in files:
            continue
        rel = os.path.relpath(os.path.join(folder, PART_FILE), table_dir)
        parts = rel.split(os.sep)[:-1]
        if not parts or not all("=" in p for p in parts):  # the schema placeholder, or a stray copy
            continue
        try:
            st = os.stat(os.path.join(table_dir, rel))
        except FileNotFoundError:  # replaced or forgotten just now: the next read sees it
            continue
        out[rel] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def _load(path: Path, schema_id: str) -> tuple[Any, dict[str, list[int]]]:
    import pyarrow.parquet as pq

    try:
        data = pq.read_table(path)
        meta = json.loads((data.schema.metadata or {}).get(META_KEY, b"{}"))
    except (OSError, ValueError) as exc:  # none yet, or unreadable: rebuilt
        if path.exists():
            log.warning("rebuilding the rollup %s: %s", path, exc)
        return None, {}
    if meta.get("schema") != schema_id:
        return None, {}
    return data, meta.get("files") or {}


def _read_files(wh: Warehouse, table: str, rels: list[str]):
    """The rows of these partition files, conformed to the table's schema, with the file each came from."""
    import duckdb
    import pyarrow as pa

    table_dir = wh.table_dir(table)
    con = duckdb.connect()
    try:
        got = con.sql("SELECT * FROM read_parquet($files, union_by_name=true, hive_partitioning=false, filename=true)",
                      params={"files": [str(table_dir / r) for r in rels]}).to_arrow_table()
    finally:
        con.close()
    schema = TABLES[table]
    # conformed to the table's schema as the warehouse's views read it: a column older files lack is null
    columns = [got[f.name].cast(f.type) if f.name in got.column_names else pa.nulls(got.num_rows, f.type)
               for f in schema]
    prefix = str(table_dir) + os.sep
    files = pa.array([f[len(prefix):] if f.startswith(prefix) else os.path.relpath(f, table_dir)
                      for f in got["filename"].to_pylist()], type=pa.string())
    return pa.Table.from_arrays([*columns, files], names=[*schema.names, FILE_COLUMN])


def table_rows(wh: Warehouse, table: str, where: str | None = None) -> pd.DataFrame:
    """Every row of `table` (those matching the SQL condition `where`), as `wh.query(f"SELECT * FROM {table}")`
    returns them, read through the table's rollup."""
    if wh.store:  # object storage: no local files to stat
        return wh.query(f"SELECT * FROM {table}" + (f" WHERE {where}" if where else ""))
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema_id = str(TABLES[table])
    path = rollup_path(wh, table)
    current = _partition_files(wh.table_dir(table))  # stat before reading: a file changing meanwhile is re-read next time
    data, seen = _load(path, schema_id)
    changed = [rel for rel, sig in current.items() if tuple(seen.get(rel, ())) != sig]
    gone = set(seen) - set(current)
    if data is None or changed or gone:
        keep = data
        if keep is not None and (changed or gone):
            drop = pa.array(sorted(set(changed) | gone), type=pa.string())
            keep = keep.filter(pc.invert(pc.is_in(keep[FILE_COLUMN], value_set=drop)))
        try:
            fresh = _read_files(wh, table, changed) if changed else None
        except duckdb.Error:  # a damaged partition file: the warehouse's own read names it and says how to recover
            return wh.query(f"SELECT * FROM {table}" + (f" WHERE {where}" if where else ""))
        parts = [t for t in (keep, fresh) if t is not None]
        empty = pa.schema([*TABLES[table], pa.field(FILE_COLUMN, pa.string())]).empty_table()
        data = pa.concat_tables(parts) if parts else empty
        data = data.replace_schema_metadata({META_KEY: json.dumps({"schema": schema_id, "files": current})})
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, tmp)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only warehouse: correct, only slower next time
            log.debug("rollup %s not written: %s", path, exc)
            tmp.unlink(missing_ok=True)
    rows = data.drop_columns([FILE_COLUMN]).replace_schema_metadata(None)
    con = duckdb.connect()  # the frame typed as the warehouse's own queries type it
    try:
        con.register("rows", rows)
        return con.execute("SELECT * FROM rows" + (f" WHERE {where}" if where else "")).df()
    finally:
        con.close()
