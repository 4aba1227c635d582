"""The warehouse on object storage (S3; GCS and Azure the same way): partition files as objects, read by DuckDB.

Configured by `warehouse: {uri: s3://bucket/prefix, storage_options: {...}}` in the config file, or by the env
var `EVALS_WAREHOUSE_URI` (which wins). Without either, the warehouse stays on local disk (evalpipe/store/warehouse.py).

The layout is the local one: `<uri>/<table>/benchmark_split=<key>/model=<key>/part.parquet`, plus a zero-row
`<table>/_schema/part.parquet` per table. An object PUT is atomic (a reader sees the old object or the new one,
never a half-written one): a partition is written batch by batch to a local temp file and uploaded as one object
when complete; re-materializing a partition replaces its object.
Reads go through an fsspec filesystem (s3fs for `s3://`, gcsfs for `gs://`, adlfs for `az://`), and DuckDB
reads through the same filesystem registered on each connection (`con.register_filesystem`), so its httpfs
extension (which downloads on first use) is not needed.
"""
from __future__ import annotations

import os
from typing import Any, Mapping
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.parquet as pq

from evalpipe.core.errors import WarehouseError

PART_FILE = "part.parquet"
SCHEMA_KEY = "_schema/part.parquet"
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs",
             "abfss": "adlfs"}
_sections: dict[tuple, Any] = {}  # (config path, mtime, size) -> its `warehouse:` mapping


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def settings(config_file: str | os.PathLike | None = None) -> tuple[str | None, dict[str, Any]]:
    """(uri, storage_options) from `EVALS_WAREHOUSE_URI` or the config's `warehouse:` mapping; (None, {}) = local."""
    env = os.environ.get("EVALS_WAREHOUSE_URI", "").strip()
    section: Any = {}
    try:
        from evalpipe.core.config import config_path

        path = str(config_file or config_path())
        st = os.stat(path)
        stamp = (path, st.st_mtime_ns, st.st_size)
        if stamp not in _sections:  # parsed once per config file version (a Warehouse is made per IO call)
            import yaml

            with open(path, encoding="utf-8") as fh:
                data = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
            _sections.clear()
            _sections[stamp] = data.get("warehouse") or {} if isinstance(data, dict) else {}
        section = _sections[stamp]
    except Exception:  # a missing or unreadable config is reported by `evalpipe check`; storage stays local here
        section = {}
    if not isinstance(section, dict):
        section = {}
    uri = env or str(section.get("uri") or "").strip() or None
    options = section.get("storage_options") or {}
    if not isinstance(options, dict):
        raise WarehouseError("warehouse.storage_options must be a mapping (e.g. {key: ..., secret: ..., "
                             "client_kwargs: {endpoint_url: ...}}); fix the config file")
    if uri and "://" not in uri:
        return None, {}  # a plain path: the local warehouse
    if uri and uri.startswith("file://"):
        return None, {}
    return uri, dict(options)


def from_config(config_file: str | os.PathLike | None = None) -> "ObjectStore | None":
    uri, options = settings(config_file)
    return ObjectStore(uri, options) if uri else None


class ObjectPath:
    """What `Warehouse.partition_file` returns on object storage: enough of a Path for `.exists()` checks."""

    def __init__(self, store: "ObjectStore", uri: str):
        self.store, self.uri = store, uri
        self.name = uri.rsplit("/", 1)[-1]

    def exists(self) -> bool:
        try:
            return bool(self.store.fs.exists(self.store._path(self.uri)))
        except OSError as exc:
            raise self.store._fail("check", self.uri, exc) from exc

    def __str__(self) -> str:
        return self.uri

    def __repr__(self) -> str:
        return f"ObjectPath({self.uri!r})"

    def __eq__(self, other: object) -> bool:
        return str(other) == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)


class ObjectStore:
    """Partition objects under one URI prefix, through an fsspec filesystem."""

    def __init__(self, uri: str, storage_options: Mapping[str, Any] | None = None):
        import fsspec

        self.protocol = uri.split("://", 1)[0].lower()
        self.uri = uri.rstrip("/")
        try:
            self.fs = fsspec.filesystem(self.protocol, **dict(storage_options or {}))
        except ImportError as exc:
            pkg = _PACKAGES.get(self.protocol, f"the fsspec package for {self.protocol}://")
            raise WarehouseError(f"the warehouse URI {self.uri} needs {pkg}; pip install {pkg}") from exc
        except ValueError as exc:
            raise WarehouseError(f"unknown storage scheme in warehouse.uri {self.uri} ({_reason(exc)}); use "
                                 "s3://, gs:// or az://") from exc

    # ---- layout -------------------------------------------------------------------------------------------
    def table_uri(self, table: str) -> str:
        return f"{self.uri}/{table}"

    def partition_uri(self, table: str, partition: Mapping[str, str]) -> str:
        parts = [f"{dim}={quote(str(value), safe='')}" for dim, value in partition.items()]
        return "/".join([self.table_uri(table), *parts, PART_FILE])

    def glob(self, table: str) -> str:
        return f"{self.table_uri(table)}/**/{PART_FILE}"

    def _path(self, uri: str) -> str:
        return self.fs._strip_protocol(uri)

    def _fail(self, what: str, uri: str, exc: BaseException) -> WarehouseError:
        return WarehouseError(f"cannot {what} {uri}: {_reason(exc)}; check warehouse.uri, the bucket and "
                              "warehouse.storage_options (credentials, endpoint)")

    # ---- objects --------------------------------------------------------------------------------------------
    def put(self, table: str, local_file: Any, partition: Mapping[str, str], schema: pa.Schema) -> str:
        """Upload a partition file written locally (evalpipe/store/warehouse.py PartitionWriter) as the partition's
        object: one PUT (or multipart upload completed on close), so readers never see half of it."""
        self.ensure_schema(table, schema)
        target = self.partition_uri(table, partition)
        try:
            self.fs.put_file(str(local_file), self._path(target))
        except (OSError, ValueError) as exc:
            raise self._fail("write the partition object", target, exc) from exc
        self.fs.invalidate_cache()
        return target

    def ensure_schema(self, table: str, schema: pa.Schema) -> None:
        path = self._path(f"{self.table_uri(table)}/{SCHEMA_KEY}")
        try:
            if self.fs.exists(path):
                with self.fs.open(path, "rb") as fh:
                    if pq.read_schema(fh).equals(schema):
                        return
        except Exception:  # a damaged placeholder is rewritten below
            pass
        try:
            with self.fs.open(path, "wb") as fh:
                pq.write_table(schema.empty_table(), fh)
        except (OSError, pa.ArrowException, ValueError) as exc:
            raise self._fail("write the schema object", f"{self.protocol}://{path}", exc) from exc

    def open_partition(self, table: str, partition: Mapping[str, str]) -> Any:
        """The partition object opened for reading (a file object for pyarrow: it reads the footer and then only
        the column chunks asked for)."""
        target = self.partition_uri(table, partition)
        try:
            return self.fs.open(self._path(target), "rb")
        except (OSError, ValueError) as exc:
            raise self._fail("read the partition object", target, exc) from exc

    def part_files(self, table: str) -> list[str]:
        """Object URIs of a table's partition files (not the schema placeholder), sorted."""
        root = self._path(self.table_uri(table))
        try:
            found = self.fs.glob(f"{root}/**/{PART_FILE}")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._fail("list", self.table_uri(table), exc) from exc
        out = []
        for p in sorted(found):
            rel = p[len(root):].strip("/").split("/")
            if len(rel) > 1 and all("=" in x for x in rel[:-1]):
                out.append(f"{self.protocol}://{p}")
        return out

    def partitions(self, table: str) -> list[dict[str, str]]:
        root = self.table_uri(table)
        out = []
        for uri in self.part_files(table):
            parts = uri[len(root):].strip("/").split("/")[:-1]
            out.append({p.split("=", 1)[0]: unquote(p.split("=", 1)[1]) for p in parts})
        return out

    def damaged_files(self, table: str) -> list[str]:
        bad = []
        for uri in self.part_files(table):
            try:
                with self.fs.open(self._path(uri), "rb") as fh:
                    pq.read_metadata(fh)
            except (OSError, pa.ArrowException):
                bad.append(uri)
        return bad

    def register(self, con: Any) -> None:
        """Let a DuckDB connection read this store's URIs (no httpfs extension needed)."""
        self.fs.invalidate_cache()  # objects written by other processes since the last listing
        con.register_filesystem(self.fs)
