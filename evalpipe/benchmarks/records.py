"""`adapter: records`: samples held in memory by this process (a list of dicts or a DataFrame given to the Python
API), mapped to samples exactly as the `file` adapter maps a file's rows (ids, targets, metadata, templates).

The records are registered under their content hash (`register_records`); the split's `records:` option names that
hash, which is also the adapter's `source_version`, so the same records are loaded once and any edit is a new
dataset. Column roles default to the first of `input`/`question`/`prompt` (the prompt), `target`/`answer`/
`expected`/`label` (the ground truth) and `id`/`sample_id` present in the records; `columns=` overrides any.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from pydantic import BaseModel

from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.benchmarks.file import MAPPABLE, plain, samples_from_rows
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.fingerprint import fingerprint
from evalpipe.core.types import Sample

RECORDS: dict[str, list[dict[str, Any]]] = {}  # content hash -> the records (this process only)
DEFAULT_COLUMNS = {"prompt": ("input", "question", "prompt"), "target": ("target", "answer", "expected", "label"),
                   "id": ("id", "sample_id")}


def as_records(data: Any) -> list[dict[str, Any]]:
    """A list of dicts, or a pandas DataFrame's rows, as plain JSON-friendly dicts."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a DataFrame
        data = data.to_dict("records")
    if isinstance(data, (str, bytes, dict)) or not isinstance(data, Iterable):
        raise ConfigError(f"dataset must be a list of dicts, a DataFrame, a .jsonl/.csv path or a benchmark name; "
                          f"got {type(data).__name__}")
    rows = list(data)
    if not rows:
        raise ConfigError("dataset is empty; give at least one record")
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise ConfigError(f"dataset record {i} is a {type(r).__name__}, not a dict; give a list of dicts like "
                              f"{{'input': ..., 'target': ...}}")
    return [{str(k): plain(v) for k, v in r.items()} for r in rows]


def columns_of(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def resolve_columns(present: Iterable[str], columns: dict[str, Any] | None = None) -> dict[str, Any]:
    """The column of each role: `columns` where given (a role mapped to None has no column), else the first default
    name present. A prompt and a target are required (target=None in `columns` for no ground truth)."""
    present = list(present)
    columns = dict(columns or {})
    unknown = set(columns) - set(MAPPABLE)
    if unknown:
        raise ConfigError(f"columns: unknown roles {sorted(unknown)}; allowed: {', '.join(MAPPABLE)}")
    found = ", ".join(repr(c) for c in present) or "none"
    out: dict[str, Any] = {}
    for role, names in DEFAULT_COLUMNS.items():
        if role in columns:
            col = columns[role]
            if col is not None and (not isinstance(col, str) or col not in present):
                raise ConfigError(f"columns: {role}={col!r} is not a column of the dataset (columns: {found})")
            out[role] = col
            continue
        out[role] = next((n for n in names if n in present), None)
    if out["prompt"] is None and columns.get("messages") is None:
        raise ConfigError(f"the dataset has no prompt column (looked for {', '.join(DEFAULT_COLUMNS['prompt'])}; "
                          f"columns: {found}); name it with columns={{'prompt': '<column>'}}")
    if out["target"] is None and "target" not in columns:
        raise ConfigError(f"the dataset has no target column (looked for {', '.join(DEFAULT_COLUMNS['target'])}; "
                          f"columns: {found}); name it with columns={{'target': '<column>'}}, or pass "
                          f"columns={{'target': None}} to evaluate without ground truth")
    for role in MAPPABLE:
        if role not in DEFAULT_COLUMNS and columns.get(role) is not None:
            out[role] = columns[role]
    return out


def register_records(data: Any) -> str:
    """Keep the records in this process; returns their content hash (the `records:` option)."""
    rows = as_records(data)
    key = fingerprint(rows, 16)
    RECORDS[key] = rows
    return key


class _Rows:
    """The records as `samples_from_rows` reads a file's rows (positions from 1, every column known up front)."""

    columns_complete = True
    complete = True
    header = None

    def __init__(self, key: str, rows: list[dict[str, Any]]):
        self.path, self.rows = f"records {key}", rows
        self.columns = {c: None for c in columns_of(rows)}

    def where(self, n: int) -> str:
        return f"record {n}"

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        return iter(enumerate(self.rows, 1))

    def drain(self) -> None:
        pass


class RecordsOptions(BaseModel):
    """The `records` adapter's options."""

    records: str
    columns: Optional[dict[str, Any]] = None


@register_adapter("records")
class RecordsAdapter(Adapter):
    """Samples from records registered in this process (the Python API's list of dicts or DataFrame)."""

    name = "records"
    option_schema = RecordsOptions

    def _rows(self) -> _Rows:
        key = str(self.options.get("records") or "")
        rows = RECORDS.get(key)
        if rows is None:
            raise DataError(f"{self.split.key}: its records ({key or '-'}) are not in this process; evaluate them "
                            f"with evalpipe.evaluate(dataset=<records>) from the process that holds them")
        return _Rows(key, rows)

    def load(self) -> Iterator[Sample]:
        rows = self._rows()
        cols = resolve_columns(rows.columns, self.options.get("columns"))
        mapping = {k: v for k, v in cols.items()}
        explicit = set(mapping)  # every role was resolved against the records: each is checked as given
        if mapping.get("id") is None:
            explicit.discard("id")  # no id column: ids are the rows' content hashes
            mapping["id"] = None
        template = None
        if self.split.prompt_template:
            from evalpipe.benchmarks.templates import load_template

            template = load_template(self.split.prompt_template, self.split.base_dir)
        return samples_from_rows(rows, lambda: (mapping, explicit, template))  # type: ignore[arg-type]

    def source_version(self) -> str | None:
        return str(self.options.get("records") or "") or None
