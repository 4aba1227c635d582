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

Every bad input stops the load with one line naming the file, the row and the problem, before anything is
written (the `dataset` asset writes only what `load` returns).
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.benchmarks.templates import PromptTemplate, TemplateRenderError, load_template
from evalpipe.errors import ConfigError, DataError
from evalpipe.fingerprint import canonical_json
from evalpipe.fingerprints import HEADER_KEY, parse_header, read_sidecar
from evalpipe.types import Sample

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
def _decode(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(f"{shown} line {line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {col}); "
                        f"re-save the file as UTF-8") from None


def _read_bytes(path: Path, shown: str) -> bytes:
    if not path.exists():
        raise DataError(f"{shown}: file not found; fix 'path' in the config")
    if path.is_dir():
        raise DataError(f"{shown}: is a folder, not a file; point 'path' at the data file")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise DataError(f"{shown}: cannot read the file ({exc.strerror or exc}); check its permissions") from None


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


def _read_jsonl(text: str, shown: str) -> Table:
    rows, lines, columns = [], [], {}
    header = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{shown} line {n}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{shown} line {n}: expected a JSON object per line, got {type(obj).__name__}")
        if HEADER_KEY in obj:  # a dataset header (fingerprints, gates, version): only as the first object
            if rows or header is not None:
                raise DataError(f"{shown} line {n}: a {HEADER_KEY!r} line may only be the first line of the file")
            header = parse_header(obj, f"{shown} line {n}")
            continue
        rows.append(obj)
        lines.append(n)
        columns.update(dict.fromkeys(obj))
    return Table(shown, list(columns), rows, lines, extra={"header": header} if header is not None else {})


def _read_json(text: str, shown: str) -> Table:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # several objects one per line: it is JSONL with a .json name
            return _read_jsonl(text, shown)
        raise DataError(f"{shown} line {exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if isinstance(data, dict):
        return Table(shown, list(data), [data]) if data else Table(shown, [], [])
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DataError(f"{shown}: expected a JSON array of objects (or one object per line)")
    extra = {}
    if data and HEADER_KEY in data[0]:  # a header as the array's first element
        extra["header"] = parse_header(data[0], f"{shown} element 1")
        data = data[1:]
    columns: dict[str, None] = {}
    for r in data:
        columns.update(dict.fromkeys(r))
    return Table(shown, list(columns), data, extra=extra)


def _read_csv(text: str, shown: str, sep: str) -> Table:
    import pandas as pd

    try:
        # every cell as text, empty cells as "" (not NaN): a CSV has no types to guess
        df = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{shown}: the file is empty (no header, no rows)") from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise DataError(f"{shown}: not valid CSV ({str(exc).strip().splitlines()[-1]})") from None
    return Table(shown, [str(c) for c in df.columns], df.to_dict("records"))


def _read_parquet(path: Path, shown: str) -> Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        tbl = pq.read_table(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        raise DataError(f"{shown}: not a readable Parquet file ({str(exc).strip().splitlines()[0]})") from None
    return Table(shown, list(tbl.column_names), tbl.to_pylist())


def read_table(path: Path, fmt: str | None = None, shown: str | None = None) -> Table:
    """All rows of a data file as dicts. Raises DataError (one line) on any bad input, including no rows."""
    shown = shown or str(path)
    kind = detect_format(str(path), fmt)
    data = _read_bytes(path, shown)
    if not data.strip():
        raise DataError(f"{shown}: the file is empty")
    if kind == "parquet":
        table = _read_parquet(path, shown)
    else:
        text = _decode(data, shown)
        table = {"jsonl": lambda: _read_jsonl(text, shown), "json": lambda: _read_json(text, shown),
                 "csv": lambda: _read_csv(text, shown, ","), "tsv": lambda: _read_csv(text, shown, "\t")}[kind]()
    if not table.rows:
        raise DataError(f"{shown}: the file has no rows")
    if "header" not in table.extra:  # any format: a sidecar `<file>.header.json` (an inline header wins)
        side = read_sidecar(path)
        if side is not None:
            table.extra["header"] = side
    return table


def read_header(path: Path, fmt: str | None = None) -> dict[str, Any] | None:
    """Only the header of a data file: its first JSONL line when that is a header, else the sidecar."""
    if detect_format(str(path), fmt) == "jsonl" and path.is_file():
        with open(path, "r", encoding="utf-8-sig") as fh:
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


def plain(v: Any) -> Any:
    """A cell made JSON-friendly for metadata: bytes decoded, NaN -> None, numpy -> Python."""
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
def _column_error(table: Table, role: str, column: str, hint: str = "") -> DataError:
    found = ", ".join(repr(c) for c in table.columns) or "none"
    return DataError(f"{table.path}: column {column!r} (mapped as {role}) not found; columns found: {found}{hint}")


@register_adapter("file")
class FileAdapter(Adapter):
    """Samples from a user's data file, mapped by `columns`, optionally rendered through `prompt_template`."""

    name = "file"

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
        return load_template(spec, self.split.base_dir) if spec else None

    def load(self) -> Iterable[Sample]:
        if "path" not in self.options:
            raise ConfigError(f"{self.split.key}: the file adapter needs 'path' (a JSONL/CSV/Parquet file or an hf:// URI)")
        local, shown = resolve_source(self.options["path"], self.split.base_dir)
        table = read_table(local, self.options.get("format"), shown)
        self._header = table.extra.get("header")
        return samples_from_table(table, *self._mapping(), template=self.template())

    def source_version(self) -> str | None:
        """Size and mtime of the data file and its header sidecar (local files only: an hf:// source is checked by
        loading it)."""
        from evalpipe.fingerprints import sidecar_path

        spec = self.options.get("path")
        if not isinstance(spec, str) or spec.startswith("hf://"):
            return None
        local, _ = resolve_source(spec, self.split.base_dir)
        return files_version([local, sidecar_path(local)])

    def header(self) -> dict[str, Any] | None:
        """The dataset header (docs/reproducibility.md): from the last `load`, else read from the file."""
        if hasattr(self, "_header"):
            return self._header
        if "path" not in self.options:
            return None
        local, _ = resolve_source(self.options["path"], self.split.base_dir)
        return read_header(local, self.options.get("format"))


def samples_from_table(table: Table, cols: dict[str, Any], explicit: set[str],
                       template: PromptTemplate | None = None) -> list[Sample]:
    """Map rows to samples; every problem names the file and the row."""
    present = set(table.columns)
    if cols["prompt"] not in present and cols.get("messages") is None:
        raise _column_error(table, "prompt", cols["prompt"], "; map it with columns: {prompt: <column>}")
    target_col = cols.get("target")
    if target_col is not None and target_col not in present:
        raise _column_error(table, "target", target_col,
                            "; map it with columns: {target: <column>}, or target: null for no ground truth")
    id_col = cols.get("id")
    if id_col is not None and id_col not in present:
        if "id" in explicit:
            raise _column_error(table, "id", id_col)
        id_col = None  # not asked for: ids are the row numbers
    system_col = cols.get("system")
    if system_col is not None and system_col not in present:
        raise _column_error(table, "system", system_col)
    messages_col = cols.get("messages")
    if messages_col is not None and messages_col not in present:
        raise _column_error(table, "messages", messages_col)
    tools_col = cols.get("tools")  # [tools] a column of OpenAI function-tool schemas (docs/tools.md)
    if tools_col is not None and tools_col not in present:
        raise _column_error(table, "tools", tools_col)
    if "prompt" not in explicit and messages_col is not None:
        cols = {**cols, "prompt": None}  # chat messages are the input: no prompt column needed
    choice_cols = cols.get("choices")
    if isinstance(choice_cols, list):
        for c in choice_cols:
            if c not in present:
                raise _column_error(table, "choices", c)
    elif choice_cols is not None and choice_cols not in present:
        raise _column_error(table, "choices", choice_cols)

    mapped = {cols["prompt"], target_col, id_col, system_col, messages_col, tools_col}
    mapped |= set(choice_cols) if isinstance(choice_cols, list) else {choice_cols}
    samples: list[Sample] = []
    first_seen: dict[str, str] = {}
    for i, row in enumerate(table.rows):
        where = f"{table.path} {table.where(i)}"
        messages = _messages(row.get(messages_col), where, messages_col) if messages_col else None
        if messages is not None and cols["prompt"] is None:
            prompt = "\n\n".join(f"[{m['role']}]\n{m.get('content') or ''}" for m in messages)
        else:
            raw_prompt = row.get(cols["prompt"])
            if _is_chat(raw_prompt):
                raise DataError(f"{where}: column {cols['prompt']!r} holds chat messages; map it with "
                                f"columns: {{messages: {cols['prompt']}}} to send them as they are")
            prompt = as_text(raw_prompt, where, cols["prompt"])
        if prompt is None or not prompt.strip():
            raise DataError(f"{where}: column {cols['prompt']!r} (the prompt) is empty")
        # no id column: the id is the stable hash of the row's canonical JSON, so it does not depend on the row's
        # position (shard membership and the resume journal survive a reordered file); identical rows get -2, -3...
        sid = as_text(row.get(id_col), where, id_col) if id_col else _row_id(row, first_seen)
        if sid is None or not sid.strip():
            raise DataError(f"{where}: column {id_col!r} (the id) is empty")
        if sid in first_seen:
            raise DataError(f"{where}: duplicate id {sid!r} (first at {first_seen[sid]}); ids must be unique")
        first_seen[sid] = table.where(i)
        target = as_text(row.get(target_col), where, target_col) if target_col else None
        system = as_text(row.get(system_col), where, system_col) if system_col else None
        choices = _choices(row, choice_cols, where)
        tools = _tool_schemas(row.get(tools_col), where, tools_col) if tools_col else None
        # the ground truth is never a template variable: it must not leak into the prompt
        metadata = {k: plain(v) for k, v in row.items() if k not in mapped}
        if template is not None:
            variables = {**{k: plain(v) for k, v in row.items() if k != target_col},
                         "prompt": prompt, "id": sid, "choices": choices or [], "choices_text": choices_text(choices)}
            try:
                prompt = template.render(variables)
            except TemplateRenderError as exc:
                raise DataError(f"{where}: {exc}") from None
        samples.append(Sample(id=sid, input=prompt, target=target if target != "" else None, metadata=metadata,
                              choices=choices, system=system or None, messages=messages, tools=tools))
    return samples


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


def _row_id(row: dict[str, Any], seen: dict[str, str]) -> str:
    import hashlib

    base = hashlib.sha256(canonical_json({k: plain(v) for k, v in row.items()}).encode("utf-8")).hexdigest()[:16]
    sid, n = base, 1
    while sid in seen:
        n += 1
        sid = f"{base}-{n}"
    return sid


def _is_chat(v: Any) -> bool:
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
