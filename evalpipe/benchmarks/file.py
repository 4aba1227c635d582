"""Any dataset from a file: JSONL, JSON, CSV/TSV or Parquet, on disk or on the Hugging Face Hub (`hf://`).

The config maps the file's columns to the parts of a sample, and may give a prompt template:

    my_qa:
      adapter: file
      splits:
        test: {path: data/my_qa.csv}            # or hf://datasets/<owner>/<name>/<file>
      options:
        columns: {prompt: question, target: answer, id: qid, system: sys, choices: [a, b, c, d]}
      prompt_template: prompts/qa.j2            # or inline text; see templates.py
      metrics: [exact_match]

`shuffle: true` (with `seed`, default 0) orders the samples by SHA-256 of `<seed>:<id>`: the same order for the
same seed and the same samples, whatever the row order of the file (so it moves with the dataset fingerprint,
which is order-free, and not with an edit that only reorders rows); `limit` then takes the first N of that order.
A shuffled split is held in memory while it is ordered.

Every bad input stops the load with one line naming the file, the row and the problem, before anything is
written (the `dataset` asset writes only what `load` returns).
"""
from __future__ import annotations

import codecs
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Optional

from pydantic import BaseModel

from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.benchmarks.templates import PromptTemplate, TemplateRenderError, load_template
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, open_binary, open_text, split_cap
from evalpipe.core.fingerprint import canonical_json
from evalpipe.core.dataset_header import HEADER_KEY, parse_header, read_sidecar, sidecar_path
from evalpipe.core.types import Sample

FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
           ".parquet": "parquet", ".pq": "parquet"}
MAPPABLE = ("prompt", "target", "id", "system", "choices", "messages", "tools")


@dataclass
class Table:
    """Rows read from one file, with how to point at a row in an error message."""

    path: str  # as shown to the user (a local path, or the hf:// URI it came from)
    columns: list[str]
    rows: list[dict[str, Any]]
    lines: list[int] | None = None  # JSONL: the file line of each row
    extra: dict[str, Any] = field(default_factory=dict)

    def where(self, i: int) -> str:
        return f"line {self.lines[i]}" if self.lines is not None else f"row {i + 1}"


# ---- reading ------------------------------------------------------------------------------------------------------
# A data file is read as it is consumed: one chunk of it in memory at a time, whatever its size (docs/scale.md).
NEWLINE = b"\n"
TEXT_CHUNK_BYTES = 1 << 20  # text formats: decoded and parsed about this much at a time, in whole lines
ROWS_PER_CHUNK = 10_000  # CSV/TSV and Parquet: rows parsed at a time


def _open(path: Path, shown: str, cap: FileCap) -> Any:
    """The file's bytes under `cap`: the whole file for a format read whole, else an unbounded count (a streamed
    format's lines are capped one at a time by `_text_chunks`)."""
    if not path.exists():
        raise DataError(f"{shown}: file not found; fix 'path' in the config")
    if path.is_dir():
        raise DataError(f"{shown}: is a folder, not a file; point 'path' at the data file")
    try:
        return open_binary(path, cap, shown, decompress=False)
    except OSError as exc:
        raise _unreadable(shown, exc) from None


def _unreadable(shown: str, exc: OSError) -> DataError:
    return DataError(f"{shown}: cannot read the file ({exc.strerror or exc}); check its permissions")


def _read(fh: Any, size: int, shown: str) -> bytes:
    try:
        return fh.read(size)
    except OSError as exc:
        raise _unreadable(shown, exc) from None


def _blank(fh: Any, shown: str) -> bool:
    """Whether the file holds nothing but whitespace (read up to its first other byte, then rewound)."""
    while True:
        data = _read(fh, 1 << 16, shown)
        if not data or data.strip():
            fh.seek(0)
            return not data


def _text_chunks(fh: Any, shown: str, cap: FileCap) -> Iterator[str]:
    """The file's text a chunk of whole lines at a time (so `str.splitlines` on each chunk gives the lines of the
    whole text), without a leading UTF-8 BOM. A byte that is not UTF-8 stops the read, naming its line and column;
    so does a line longer than `cap` (what one line may hold in memory)."""
    lines_before, first = 0, True
    while True:
        data = _read(fh, TEXT_CHUNK_BYTES, shown)
        if not data:
            return
        if not data.endswith(b"\n"):
            rest = fh.readline(cap.max_bytes + 1)
            if len(rest) > cap.max_bytes:
                raise cap.refuse(f"{shown} line {lines_before + data.count(NEWLINE) + 1}", None)
            data += rest
        if first:
            data, first = data.removeprefix(codecs.BOM_UTF8), False
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = lines_before + data.count(b"\n", 0, exc.start) + 1
            col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise DataError(f"{shown} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {col}); "
                            f"re-save the file as UTF-8") from None
        lines_before += data.count(b"\n")
        yield text


def _drain(chunks: Iterator[Any]) -> None:
    """Read the rest of the file: a problem further on that the whole-file reading reported first (bytes that are
    not UTF-8 before a syntax error) raises here."""
    for _ in chunks:
        pass


class _TextStream:
    """Text chunks as a file object for pandas' CSV parser (it only calls `read`)."""

    def __init__(self, chunks: Iterator[str]):
        self.chunks = chunks

    def read(self, size: int = -1) -> str:
        if size is None or size < 0:
            return "".join(self.chunks)
        return next(self.chunks, "")


def detect_format(path: str, fmt: str | None = None) -> str:
    if fmt:
        f = str(fmt).lower().lstrip(".")
        if f not in set(FORMATS.values()):
            raise ConfigError(f"format {fmt!r} is not supported; use one of {sorted(set(FORMATS.values()))}")
        return f
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(f"{path}: cannot tell the format from the suffix {suffix!r}; name the file "
                          f"{'/'.join(FORMATS)} or set 'format:' (jsonl, json, csv, tsv, parquet)")
    return FORMATS[suffix]


class RowReader:
    """The rows of one data file, read as they are iterated: `(position, row)` pairs, the position being what
    `where` shows in an error message (JSONL: the file line; else the row number from 1).

    `columns`: every column of the file from the first row on for JSON, CSV/TSV and Parquet; for JSONL (rows may
    differ in keys) the keys seen so far, all of them once the rows are exhausted (`columns_complete` says which).
    `header`: the dataset header, inline (a first JSONL line, a JSON array's first element) or the sidecar's, known
    once `complete`. Any bad input raises DataError (one line), including a file without rows."""

    def __init__(self, path: Path, fmt: str | None = None, shown: str | None = None, cap: FileCap = DEFAULT_CAP):
        self.local, self.path, self.cap = path, shown or str(path), cap
        self.kind = detect_format(str(path), fmt)
        self.columns: dict[str, None] = {}
        self.columns_complete = self.kind != "jsonl"
        self.unit = "line" if self.kind == "jsonl" else "row"
        self.header: dict[str, Any] | None = None
        self.complete = False  # every row was read without a problem
        self._rows = self._read()

    def where(self, n: int) -> str:
        return f"{self.unit} {n}"

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        return self._rows

    def drain(self) -> None:
        """Read the rows not read yet (raising a problem of the file further on)."""
        _drain(self._rows)

    def _read(self) -> Iterator[tuple[int, dict[str, Any]]]:
        # a `.json` document is parsed whole: the cap bounds the file; other formats stream (docs/scale.md): a line
        whole_file_cap = self.cap if self.kind == "json" else FileCap(1 << 62, self.cap.how_to_raise)
        with _open(self.local, self.path, whole_file_cap) as fh:
            if _blank(fh, self.path):
                raise DataError(f"{self.path}: the file is empty")
            if self.kind == "parquet":
                rows = self._parquet()
            else:
                chunks = _text_chunks(fh, self.path, self.cap)
                rows = {"jsonl": lambda: self._jsonl(chunks), "json": lambda: self._json(chunks),
                        "csv": lambda: self._csv(chunks, ","), "tsv": lambda: self._csv(chunks, "\t")}[self.kind]()
            empty = True
            for row in rows:
                empty = False
                yield row
        if empty:
            raise DataError(f"{self.path}: the file has no rows")
        if self.header is None:  # any format: a sidecar `<file>.header.json` (an inline header wins)
            self.header = read_sidecar(self.local)
        self.complete = True

    def _jsonl(self, chunks: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
        shown, columns, loads = self.path, self.columns, json.loads
        seen = columns.keys()
        n, any_rows = 0, False
        for text in chunks:
            for line in text.splitlines():
                n += 1
                if not line or line.isspace():
                    continue
                try:
                    obj = loads(line)
                except json.JSONDecodeError as exc:
                    _drain(chunks)
                    raise DataError(f"{shown} line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
                if type(obj) is not dict:
                    _drain(chunks)
                    raise DataError(f"{shown} line {n}: expected a JSON object per line, got {type(obj).__name__}")
                if HEADER_KEY in obj:  # a dataset header (fingerprints, gates, version): only as the first object
                    if any_rows or self.header is not None:
                        _drain(chunks)
                        raise DataError(f"{shown} line {n}: a {HEADER_KEY!r} line may only be the first line of the "
                                        f"file")
                    self.header = parse_header(obj, f"{shown} line {n}")
                    continue
                any_rows = True
                if not obj.keys() <= seen:
                    columns.update(dict.fromkeys(obj))
                yield n, obj

    def _json(self, chunks: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
        shown = self.path
        text = "".join(chunks)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            if exc.msg == "Extra data":  # several objects one per line: it is JSONL with a .json name
                self.unit, self.columns_complete = "line", False
                yield from self._jsonl(iter([text]))
                return
            raise DataError(f"{shown} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if isinstance(data, dict):  # one object: one row
            self.columns.update(dict.fromkeys(data))
            if data:
                yield 1, data
            return
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise DataError(f"{shown}: expected a JSON array of objects (or one object per line)")
        if data and HEADER_KEY in data[0]:  # a header as the array's first element
            self.header = parse_header(data[0], f"{shown} element 1")
            data = data[1:]
        for r in data:
            self.columns.update(dict.fromkeys(r))
        yield from enumerate(data, 1)

    def _csv(self, chunks: Iterator[str], sep: str) -> Iterator[tuple[int, dict[str, Any]]]:
        import pandas as pd

        shown, n = self.path, 0
        try:
            # every cell as text, empty cells as "" (not NaN): a CSV has no types to guess
            parts = pd.read_csv(_TextStream(chunks), sep=sep, dtype=str, keep_default_na=False,
                                chunksize=ROWS_PER_CHUNK)
            for df in parts:
                if not self.columns:
                    self.columns = dict.fromkeys(str(c) for c in df.columns)
                for row in df.to_dict("records"):
                    n += 1
                    yield n, row
        except DataError:
            raise
        except pd.errors.EmptyDataError:
            raise DataError(f"{shown}: the file is empty (no header, no rows)") from None
        except (pd.errors.ParserError, ValueError) as exc:
            _drain(chunks)
            raise DataError(f"{shown}: not valid CSV ({str(exc).strip().splitlines()[-1]})") from None

    def _parquet(self) -> Iterator[tuple[int, dict[str, Any]]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = 0
        try:
            pf = pq.ParquetFile(self.local)  # (by path: pyarrow's own reads, not Python's)
            self.columns = dict.fromkeys(pf.schema_arrow.names)
            for batch in pf.iter_batches(batch_size=ROWS_PER_CHUNK):
                for row in batch.to_pylist():
                    n += 1
                    yield n, row
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
            raise DataError(f"{self.path}: not a readable Parquet file ({str(exc).strip().splitlines()[0]})") from None


def read_table(path: Path, fmt: str | None = None, shown: str | None = None, cap: FileCap = DEFAULT_CAP) -> Table:
    """All rows of a data file as dicts, for small files (GAIA's metadata, DA-Eval's questions); the `file` adapter
    streams them (`RowReader`). Raises DataError (one line) on any bad input, including no rows."""
    reader = RowReader(path, fmt, shown, cap)
    rows, positions = [], []
    for n, row in reader:
        rows.append(row)
        positions.append(n)
    return Table(reader.path, list(reader.columns), rows, positions if reader.unit == "line" else None,
                 extra={"header": reader.header} if reader.header is not None else {})


def read_header(path: Path, fmt: str | None = None) -> dict[str, Any] | None:
    """Only the header of a data file: its first JSONL line when that is a header, else the sidecar."""
    if detect_format(str(path), fmt) == "jsonl" and path.is_file():
        with open_text(path, DEFAULT_CAP, encoding="utf-8-sig") as fh:
            for line in fh:
                if line.strip():
                    if HEADER_KEY in line:
                        try:
                            obj = json.loads(line)
                        except json.JSONDecodeError:
                            break
                        if isinstance(obj, dict) and HEADER_KEY in obj:
                            return parse_header(obj, f"{path} line 1")
                    break
    elif detect_format(str(path), fmt) == "json" and path.is_file():
        try:
            return read_table(path, fmt).extra.get("header")
        except DataError:
            return None
    return read_sidecar(path)


def resolve_source(spec: Any, base_dir: Path, *, what: str = "'path'") -> tuple[Path, str]:
    """A local path for a `path:` option (downloading `hf://` URIs into the HF cache) and how to show it."""
    from evalpipe.benchmarks import hub

    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{what} must be a file path or an hf:// URI, got {spec!r}")
    if spec.startswith("hf://"):
        repo_id, repo_type, revision, filename = hub.parse_hf_uri(spec)
        return hub.download_file(repo_id, filename, repo_type=repo_type, revision=revision), spec
    p = Path(spec).expanduser()
    p = p if p.is_absolute() else (base_dir / p).resolve()
    return p, str(p)


# ---- values -------------------------------------------------------------------------------------------------------
def is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def as_text(v: Any, where: str, column: str) -> str | None:
    """A cell as text for a prompt or an answer; None when empty. Bytes must be UTF-8."""
    if type(v) is str and v.isascii():  # the common cell, first (ASCII holds no lone surrogate)
        return v
    if is_missing(v):
        return None
    if isinstance(v, bytes):
        try:
            v = v.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{where} column {column!r}: not UTF-8 text (byte 0x{v[exc.start]:02x} at offset "
                            f"{exc.start}); re-encode the column as UTF-8") from None
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, e.g. a "\udcff" escape in JSON
            raise DataError(f"{where} column {column!r}: not valid UTF-8 text (lone surrogate); fix the "
                            f"escaped characters") from None
        return v
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (int, float)):
        return str(v)
    if hasattr(v, "item"):  # numpy scalars
        return as_text(v.item(), where, column)
    return json.dumps(v, ensure_ascii=False, default=str)


_AS_IS = frozenset({str, int, bool})  # cells that `plain` returns as they are (checked first: most cells)


def plain(v: Any) -> Any:
    """A cell made JSON-friendly for metadata: bytes decoded, NaN -> None, numpy -> Python."""
    if type(v) in _AS_IS:
        return v
    if is_missing(v):
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "tolist"):
        return plain(v.tolist())
    return v


def choices_text(choices: list[str] | None) -> str:
    """Choices as lettered lines, `A. first` ... for templates."""
    if not choices:
        return ""
    return "\n".join(f"{chr(ord('A') + i) if i < 26 else i + 1}. {c}" for i, c in enumerate(choices))


# ---- the adapter --------------------------------------------------------------------------------------------------
def _column_error(table: Any, role: str, column: str, hint: str = "") -> DataError:
    found = ", ".join(repr(c) for c in table.columns) or "none"
    return DataError(f"{table.path}: column {column!r} (mapped as {role}) not found; columns found: {found}{hint}")


class FileOptions(BaseModel):
    """The `file` adapter's options (besides those every split takes: limit, slice_by, tools, ...)."""

    path: Optional[str] = None
    format: Optional[Literal["jsonl", "json", "csv", "tsv", "parquet"]] = None
    columns: Optional[dict[str, Any]] = None
    shuffle: Optional[bool] = None
    seed: Optional[int] = None
    max_file_mb: Optional[float] = None  # the size cap (evalpipe/core/file_caps.py): a .json file, a JSONL/CSV line


def shuffled(samples: Iterator[Sample], seed: int) -> list[Sample]:
    """The samples ordered by SHA-256 of `<seed>:<id>`: a seeded permutation that depends on the ids only."""
    import hashlib

    return sorted(samples, key=lambda s: hashlib.sha256(f"{seed}:{s.id}".encode("utf-8")).digest())


@register_adapter("file")
class FileAdapter(Adapter):
    """Samples from a user's data file, mapped by `columns`, optionally rendered through `prompt_template`."""

    name = "file"
    option_schema = FileOptions

    def _mapping(self) -> tuple[dict[str, Any], set[str]]:
        raw = self.options.get("columns") or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{self.split.key}: 'columns' must map {', '.join(MAPPABLE)} to column names")
        unknown = set(raw) - set(MAPPABLE)
        if unknown:
            raise ConfigError(f"{self.split.key}: unknown keys {sorted(unknown)} under 'columns'; allowed: {', '.join(MAPPABLE)}")
        return {"prompt": "prompt", "target": "target", "id": "id", **raw}, set(raw)

    def template(self) -> PromptTemplate | None:
        spec = self.split.prompt_template
        return load_template(spec, self.split.base_dir, split_cap(self.split.key, self.options)) if spec else None

    def load(self) -> Iterator[Sample]:
        """The samples, read from the file as they are iterated (one chunk of the file in memory at a time)."""
        if "path" not in self.options:
            raise ConfigError(f"{self.split.key}: the file adapter needs 'path' (a JSONL/CSV/Parquet file or an hf:// URI)")
        shuffle, seed = self.options.get("shuffle"), self.options.get("seed")
        if shuffle not in (None, True, False) or (seed is not None and (type(seed) is not int)):
            raise ConfigError(f"{self.split.key}: shuffle must be true or false and seed an integer, got "
                              f"{shuffle!r}/{seed!r}")
        if seed is not None and not shuffle:  # a seed alone would change nothing: say so rather than ignore it
            raise ConfigError(f"{self.split.key}: 'seed' has no effect without 'shuffle: true'; add shuffle: true or "
                              "remove seed")
        local, shown = resolve_source(self.options["path"], self.split.base_dir)
        self._rows = RowReader(local, self.options.get("format"), shown, split_cap(self.split.key, self.options))
        samples = samples_from_rows(self._rows, lambda: (*self._mapping(), self.template()))
        return iter(shuffled(samples, int(seed or 0))) if shuffle else samples

    def source_version(self) -> str | None:
        """Size and mtime of the data file and its header sidecar (local files only: an hf:// source is checked by
        loading it)."""
        spec = self.options.get("path")
        if not isinstance(spec, str) or spec.startswith("hf://"):
            return None
        local, _ = resolve_source(spec, self.split.base_dir)
        return files_version([local, sidecar_path(local)])

    def header(self) -> dict[str, Any] | None:
        """The dataset header (docs/reproducibility.md): from the last `load` read to its end, else read from the
        file."""
        rows = getattr(self, "_rows", None)
        if rows is not None and rows.complete:
            return rows.header
        if "path" not in self.options:
            return None
        local, _ = resolve_source(self.options["path"], self.split.base_dir)
        return read_header(local, self.options.get("format"))


@dataclass(frozen=True)
class _Plan:
    """Which column holds what part of a sample (None: no such column)."""

    prompt: str | None
    target: str | None
    id: str | None
    system: str | None
    messages: str | None
    tools: str | None
    choices: Any  # a column, a list of columns, or None
    mapped: frozenset[Any]  # every mapped column: the others are the sample's metadata


def _plan(rows: Any, cols: dict[str, Any], explicit: set[str], check: bool = True) -> _Plan:
    """The mapping checked against `rows.columns`. check=False (JSONL, before the other rows are read): nothing is
    checked, every mapped column is taken to exist but the default id column, used only if the rows so far have it."""
    present = set(rows.columns)

    def require(role: str, column: str, hint: str = "") -> None:
        if check and column not in present:
            raise _column_error(rows, role, column, hint)

    if cols.get("messages") is None:
        require("prompt", cols["prompt"], "; map it with columns: {prompt: <column>}")
    target_col = cols.get("target")
    if target_col is not None:
        require("target", target_col, "; map it with columns: {target: <column>}, or target: null for no ground truth")
    id_col = cols.get("id")
    if id_col is not None and id_col not in present:
        if "id" in explicit:
            require("id", id_col)
        else:
            id_col = None  # not asked for: ids are the rows' content hashes
    system_col, messages_col, tools_col = cols.get("system"), cols.get("messages"), cols.get("tools")
    for role, column in (("system", system_col), ("messages", messages_col), ("tools", tools_col)):
        if column is not None:  # [tools] tools: a column of OpenAI function-tool schemas (docs/tools.md)
            require(role, column)
    prompt_col = None if "prompt" not in explicit and messages_col is not None else cols["prompt"]  # chat messages
    choice_cols = cols.get("choices")  # are the input: no prompt column needed
    for c in choice_cols if isinstance(choice_cols, list) else [choice_cols] if choice_cols is not None else []:
        require("choices", c)
    mapped = {prompt_col, target_col, id_col, system_col, messages_col, tools_col}
    mapped |= set(choice_cols) if isinstance(choice_cols, list) else {choice_cols}
    return _Plan(prompt_col, target_col, id_col, system_col, messages_col, tools_col, choice_cols, frozenset(mapped))


class _Where:
    """`<file> line N` (or `row N`) of the row being mapped, formatted only when an error message needs it."""

    __slots__ = ("rows", "n")

    def __init__(self, rows: Any):
        self.rows, self.n = rows, 0

    def __str__(self) -> str:
        return f"{self.rows.path} {self.rows.where(self.n)}"


class _RowMapper:
    """Rows to samples under one plan; remembers the ids so far (duplicates name both rows)."""

    def __init__(self, rows: Any, plan: _Plan, template: PromptTemplate | None):
        self.rows, self.plan, self.template = rows, plan, template
        self.first_seen: dict[str, int] = {}  # id -> its row's position
        self.where = _Where(rows)

    def sample(self, n: int, row: dict[str, Any]) -> Sample:
        p, first_seen, where = self.plan, self.first_seen, self.where
        where.n = n
        messages = _messages(row.get(p.messages), where, p.messages) if p.messages else None
        if messages is not None and p.prompt is None:
            prompt = "\n\n".join(f"[{m['role']}]\n{m.get('content') or ''}" for m in messages)
        else:
            raw_prompt = row.get(p.prompt)
            if _is_chat(raw_prompt):
                raise DataError(f"{where}: column {p.prompt!r} holds chat messages; map it with "
                                f"columns: {{messages: {p.prompt}}} to send them as they are")
            prompt = as_text(raw_prompt, where, p.prompt)
        if prompt is None or not prompt or prompt.isspace():
            raise DataError(f"{where}: column {p.prompt!r} (the prompt) is empty")
        # no id column: the id is the stable hash of the row's canonical JSON, so it does not depend on the row's
        # position (shard membership and the resume journal survive a reordered file); identical rows get -2, -3...
        sid = as_text(row.get(p.id), where, p.id) if p.id else _row_id(row, first_seen)
        if sid is None or not sid or sid.isspace():
            raise DataError(f"{where}: column {p.id!r} (the id) is empty")
        if sid in first_seen:
            raise DataError(f"{where}: duplicate id {sid!r} (first at {self.rows.where(first_seen[sid])}); ids must "
                            f"be unique")
        first_seen[sid] = n
        target = as_text(row.get(p.target), where, p.target) if p.target else None
        system = as_text(row.get(p.system), where, p.system) if p.system else None
        choices = _choices(row, p.choices, where) if p.choices is not None else None
        tools = _tool_schemas(row.get(p.tools), where, p.tools) if p.tools else None
        mapped = p.mapped
        metadata = {k: plain(v) for k, v in row.items() if k not in mapped}
        if self.template is not None:
            # the ground truth is never a template variable: it must not leak into the prompt
            variables = {**{k: plain(v) for k, v in row.items() if k != p.target},
                         "prompt": prompt, "id": sid, "choices": choices or [], "choices_text": choices_text(choices)}
            try:
                prompt = self.template.render(variables)
            except TemplateRenderError as exc:
                raise DataError(f"{where}: {exc}") from None
        return Sample(id=sid, input=prompt, target=target if target != "" else None, metadata=metadata,
                      choices=choices, system=system or None, messages=messages, tools=tools)


ColumnMapping = tuple[dict[str, Any], set[str], PromptTemplate | None]  # columns, roles mapped explicitly, template


def samples_from_rows(rows: RowReader, mapping: Callable[[], ColumnMapping]) -> Iterator[Sample]:
    """The rows' samples, mapped as the rows are read; every problem names the file and the row. `mapping` gives the
    column mapping, the explicitly mapped roles and the template; it is called once the file has a row.

    The problem reported is the one the file read whole before any row was mapped would report: a problem of the
    file itself (bad bytes, bad syntax, no rows) first, then one of the config, a mapped column missing, then the
    first bad row. So a row's problem found while reading reads the rest of the file before it is raised."""
    it = iter(rows)
    first = next(it)
    try:
        cols, explicit, template = mapping()
        plan = _plan(rows, cols, explicit, check=rows.columns_complete)
    except (DataError, ConfigError):
        rows.drain()
        raise
    mapper = _RowMapper(rows, plan, template)
    for n, row in itertools.chain([first], it):
        try:
            sample = mapper.sample(n, row)
        except DataError:
            _earlier_problem(rows, cols, explicit, template, plan, first)
            raise
        yield sample
    if not rows.columns_complete:
        _earlier_problem(rows, cols, explicit, template, plan, first)


def _earlier_problem(rows: RowReader, cols: dict[str, Any], explicit: set[str], template: PromptTemplate | None,
                     plan: _Plan, first: tuple[int, dict[str, Any]]) -> None:
    """Raise the problem that comes before a row's (see samples_from_rows), if any: one of the file further on, a
    mapped column that no row has, or (JSONL whose first row lacks the default id column that later rows have) the
    first row's, mapped with that id column as reading the whole file first would have."""
    rows.drain()
    final = _plan(rows, cols, explicit)
    if final != plan:
        _RowMapper(rows, final, template).sample(*first)  # raises: the first row has no id


def _tool_schemas(v: Any, where: str, column: str) -> list[dict[str, Any]] | None:
    """[tools] A cell of tool schemas (a list, or its JSON text in CSV): `{"type": "function", "function": {...}}`
    or bare `{"name", "description", "parameters"}` entries; empty or null: the sample offers no tools."""
    if isinstance(v, str) and v.strip():
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column {column!r} (tools) is not a valid JSON array of tool schemas") from None
    v = plain(v)
    if v is None or v == "" or v == []:
        return None
    from evalpipe.tools.schema import as_function_tool

    if not isinstance(v, list) or not all(isinstance(t, dict) for t in v):
        raise DataError(f"{where}: column {column!r} (tools) must hold a list of function-tool schemas like "
                        '[{"type": "function", "function": {"name": ..., "parameters": {...}}}]')
    try:
        return [as_function_tool(t) for t in v]
    except ConfigError as exc:
        raise DataError(f"{where}: column {column!r} (tools): {exc}") from None


def _row_id(row: dict[str, Any], seen: dict[str, Any]) -> str:
    import hashlib

    base = hashlib.sha256(canonical_json({k: plain(v) for k, v in row.items()}).encode("utf-8")).hexdigest()[:16]
    sid, n = base, 1
    while sid in seen:
        n += 1
        sid = f"{base}-{n}"
    return sid


def _is_chat(v: Any) -> bool:
    if type(v) is str:
        return False
    if hasattr(v, "tolist"):
        v = v.tolist()
    return isinstance(v, list) and bool(v) and all(isinstance(m, dict) and "role" in m for m in v)


def _messages(v: Any, where: str, column: str) -> list[dict[str, Any]]:
    """A cell of chat messages (a list, or its JSON text in CSV) as OpenAI-format messages, kept as they are."""
    if isinstance(v, str) and v.strip().startswith("["):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column {column!r} (messages) is not a valid JSON array") from None
    v = plain(v)
    if not _is_chat(v):
        raise DataError(f"{where}: column {column!r} (messages) must hold a list of chat messages like "
                        f'[{{"role": "user", "content": "..."}}]')
    for m in v:
        if m["role"] not in ("system", "user", "assistant", "tool", "developer"):
            raise DataError(f"{where}: column {column!r}: unknown message role {m['role']!r}")
    return v


def _choices(row: dict[str, Any], spec: Any, where: str) -> list[str] | None:
    if spec is None:
        return None
    if isinstance(spec, list):
        return [as_text(row.get(c), where, c) or "" for c in spec]
    v = row.get(spec)
    if isinstance(v, str) and v.strip().startswith("["):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            raise DataError(f"{where}: column {spec!r} (choices) is not a valid JSON array") from None
    if hasattr(v, "tolist"):
        v = v.tolist()
    if not isinstance(v, list):
        raise DataError(f"{where}: column {spec!r} (choices) must hold a list (in CSV: a JSON array like "
                        f"[\"a\", \"b\"]), or map choices to several columns: [col_a, col_b, ...]")
    return [as_text(c, where, spec) or "" for c in v]
