"""A results file read back: an exported `samples.jsonl` (`evalpipe export`, or the run folder the `metrics` asset
keeps) as the warehouse tables it was written from, so `evalpipe view RESULTS.jsonl` (terminal and `--web`) and
`evalpipe summarize --run-dir` on a copied folder read it with the same queries as the warehouse (docs/viewer.md).

Read-only: nothing is written beside the file. A line that cannot be read is reported as `file:line: why` and left
out; the other lines are still read. The inverse of `artifacts.stream_samples`: each line's `scores` become the
sample's `judgements` rows, `usage` and the rollout fields its `rollouts` row, the rest its `prompts` row.
"""
from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.core.errors import WarehouseError
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, FileTooLarge, open_binary, read_text
from evalpipe.core.jsontext import dumps, raw_decode
from evalpipe.core.schema import TABLES
from evalpipe.store.artifacts import LATEST

SAMPLES = "samples.jsonl"
USAGE_NUMBERS = {"input_tokens": int, "output_tokens": int, "attempts": int, "cost": float, "latency_s": float}
SCORE_TEXTS = ("status", "reason", "normalized_prediction", "normalized_target")


@dataclass
class ResultsFile:
    path: Path  # the samples.jsonl read
    folder: Path | None  # the run folder it sits in (summary.json, manifest.json beside it), when it is one
    benchmark_split: str
    model: str
    records: list[dict[str, Any]]
    problems: list[str] = field(default_factory=list)  # "file:line: why", one per line left out
    summary: dict[str, Any] | None = None  # the folder's summary.json, when it has one


def samples_path(path: str | Path) -> Path:
    """The samples file `path` names: the file itself, a run folder's samples.jsonl, or that of a partition
    folder's `latest` run."""
    p = Path(path).expanduser()
    if p.is_dir():
        for candidate in (p / SAMPLES, p / LATEST / SAMPLES):
            if candidate.is_file():
                return candidate
        raise WarehouseError(f"{p}: no {SAMPLES} here; pass a samples.jsonl (evalpipe export) or a run folder "
                             "(<artifacts>/<benchmark>/<split>/<model>/<run_id>)")
    if not p.is_file():
        raise WarehouseError(f"{p}: no such file; pass a samples.jsonl (evalpipe export) or a run folder")
    return p


def _read_json(path: Path, cap: FileCap) -> dict[str, Any] | None:
    """A run folder's summary or manifest (None if unreadable or not an object); over `cap` is a FileTooLarge, never
    a silent None (the partition's names would quietly fall back to the file's own)."""
    try:
        obj = json.loads(read_text(path, cap))
    except FileTooLarge:
        raise
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _line_problem(rec: Any) -> str | None:
    """Why a parsed line cannot be one sample's record (None: it can)."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    if not isinstance(rec.get("sample_id"), (str, int)) or isinstance(rec.get("sample_id"), bool):
        return "no sample_id (a samples.jsonl line from `evalpipe export` has one)"
    scores, usage = rec.get("scores"), rec.get("usage")
    if scores is not None and not (isinstance(scores, dict) and all(isinstance(v, dict) for v in scores.values())):
        return "`scores` must be an object of metric -> {score, correct, status, ...}"
    for metric, s in (scores or {}).items():
        score, correct = s.get("score"), s.get("correct")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            return f"scores.{metric}.score must be a number or null, not {score!r}"
        if correct is not None and not isinstance(correct, bool):
            return f"scores.{metric}.correct must be true, false or null, not {correct!r}"
    if usage is not None and not isinstance(usage, dict):
        return "`usage` must be an object"
    for name in USAGE_NUMBERS:
        v = (usage or {}).get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"usage.{name} must be a number or null, not {v!r}"
    return None


def load_results(path: str | Path, cap: FileCap = DEFAULT_CAP) -> ResultsFile:
    """Read a results file (or a run folder's) under the size cap `cap`. The partition's names come from the
    folder's summary.json or manifest.json; a bare file is named after itself (split `file/<name>`, model
    `results`). A line that can't be read (not UTF-8, not JSON, not a record) is a problem naming file:line; the
    others are read."""
    f = samples_path(path)
    folder = f.parent if (f.parent / "manifest.json").exists() or (f.parent / "summary.json").exists() else None
    summary = _read_json(folder / "summary.json", cap) if folder else None
    about = summary or (_read_json(folder / "manifest.json", cap) if folder else None) or {}
    records, problems, seen = [], [], set()
    with open_binary(f, cap, decompress=False) as fh:
        for no, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:  # one bad line costs that line, not the file
                problems.append(f"{f}:{no}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                "the line is skipped (re-save the file as UTF-8)")
                continue
            if not line.strip():
                continue
            try:
                rec, end = raw_decode(line)  # (json.loads without its Python layers: a big file reads ~2x faster)
                if line[end:].strip():
                    raise ValueError(f"extra data after the JSON value at column {end + 1}")
            except ValueError as exc:
                problems.append(f"{f}:{no}: not JSON ({exc})")
                continue
            why = _line_problem(rec)
            if why is None and str(rec["sample_id"]) in seen:
                why = f"sample_id {rec['sample_id']!r} again (its first line is kept)"
            if why:
                problems.append(f"{f}:{no}: {why}")
                continue
            seen.add(str(rec["sample_id"]))
            rec.setdefault("sample_index", len(records))
            records.append(rec)
    return ResultsFile(path=f, folder=folder, benchmark_split=str(about.get("benchmark_split") or f"file/{f.stem}"),
                       model=str(about.get("model") or "results"), records=records, problems=problems,
                       summary=summary)


# ---- the records as warehouse tables ------------------------------------------------------------------------------
def _text(v: Any) -> str | None:
    """A string column's value: text as it is, anything else as its JSON text (the warehouse keeps JSON as text)."""
    if v is None or isinstance(v, str):
        return v
    return dumps(v)


def _json(v: Any, empty: Any = None) -> str | None:
    return None if v is None or v == empty else dumps(v)


def _prompt_text(prompt: Any) -> str | None:
    """The prompt as the warehouse's `prompt_text` reads (as pipeline.stages.render_messages writes it)."""
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return "\n\n".join(f"[{m.get('role', 'user')}]\n{m.get('content', '')}" for m in prompt)
    return _text(prompt)


def _number(v: Any, kind: type) -> Any:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return kind(v)


def tables(rf: ResultsFile) -> dict[str, pd.DataFrame]:
    """`prompts`, `rollouts` and `judgements` of the file's partition, as the warehouse holds them."""
    key = {"benchmark_split": rf.benchmark_split, "model": rf.model}
    prompts, rollouts, judgements = [], [], []
    for r in rf.records:
        sid, usage = str(r["sample_id"]), r.get("usage") or {}
        target, slices = _text(r.get("target")), _json(r.get("slices"), {})
        prompt = r.get("prompt")
        prompts.append({**key, "sample_id": sid, "sample_index": _number(r.get("sample_index"), int),
                        "messages": _json(prompt) if isinstance(prompt, list) else None,
                        "prompt_text": _prompt_text(prompt), "target": target, "files": _json(r.get("files"), []),
                        "metadata": _json(r.get("metadata"), {}), "slices": slices})
        rollouts.append({**key, "sample_id": sid, "status": _text(r.get("status")), "error": _text(r.get("error")),
                         "prediction": _text(r.get("prediction")), "raw_output": _text(r.get("raw_output")),
                         "finish_reason": _text(r.get("finish_reason")),
                         **{k: _number(usage.get(k), t) for k, t in USAGE_NUMBERS.items()},
                         "cached": bool(usage["cached"]) if usage.get("cached") is not None else None,
                         "trajectory": _json(r.get("trajectory")), "tool_trace": _json(r.get("tool_calls"))})
        for metric, s in (r.get("scores") or {}).items():
            judgements.append({**key, "sample_id": sid, "metric": str(metric), "score": _number(s.get("score"), float),
                               "correct": s.get("correct"), **{k: _text(s.get(k)) for k in SCORE_TEXTS},
                               "prediction": _text(r.get("prediction")), "target": target, "slices": slices,
                               # not written by `evalpipe export` today; read when a file carries it
                               "details": _json(s.get("details"))})
    return {name: _frame(name, rows) for name, rows in
            (("prompts", prompts), ("rollouts", rollouts), ("judgements", judgements))}


def _frame(table: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
    names = TABLES[table].names
    return pd.DataFrame(rows, columns=names)


class FileWarehouse:
    """A stand-in for the Warehouse over a results file's tables (and the metrics given), held in an in-memory
    DuckDB database: `connect()` and `query()` as the Warehouse has them, so the viewer's queries and `evalpipe
    view`'s SQL run unchanged. Every other table exists, empty."""

    def __init__(self, frames: dict[str, pd.DataFrame]):
        import duckdb

        from evalpipe.store.warehouse import to_arrow

        self.root = None
        self._db = duckdb.connect()
        self._lock = threading.Lock()
        for table in TABLES:
            data = to_arrow(table, frames.get(table, pd.DataFrame()))  # the warehouse's own column types
            self._db.register(f"_{table}", data)
            self._db.execute(f"CREATE TABLE {table} AS SELECT * FROM _{table}")
            self._db.unregister(f"_{table}")

    def connect(self, tables: Any = None):
        with self._lock:  # a cursor per caller; the viewer asks from its worker threads
            return self._db.cursor()

    def query(self, sql: str, params: Any = None) -> pd.DataFrame:
        con = self.connect()
        try:
            return con.execute(sql, params or []).df()
        finally:
            con.close()
