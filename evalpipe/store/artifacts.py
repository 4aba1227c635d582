"""Run artifacts: one auditable folder per run of a (benchmark_split, model) partition, kept
(`<root>/<split>/<model>/<run_id>/`, `latest` pointing at the newest; docs/reproducibility.md).

    manifest.json   config snapshot, git SHA, package versions, filtered env, start/end/duration, fingerprints
    samples.jsonl   per sample: prompt, ground truth, metadata, prediction, scores, usage, error
    events.jsonl    trajectory events flattened, one per line, with sample_id and event_index
    errors.jsonl    the samples whose rollout failed
    summary.json    metric values per slice, counts
    summary.md      the same for humans, one table per metric

Everything is built from the warehouse (plus the metrics just computed), so the `metrics` asset and
`evalpipe export` write identical folders. Every value passes through `evalpipe.core.redact`. The files go through an
`ArtifactWriter` (below; `artifacts: {writer: ...}`): the default writes the folder under a temp name and renames it
into place, so a reader never sees half a set of files; `memory` keeps them as text; your own may ship them anywhere.
"""
from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from itertools import repeat
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from evalpipe.core.config import REPO_ROOT, EvalConfig, dagster_home
from evalpipe.core.errors import ConfigError, WarehouseError
from evalpipe.core.fingerprint import fingerprint
from evalpipe.core.jsontext import dumps as _dump
from evalpipe.core.keys import folder_name
from evalpipe.core.redact import MASK, get_redactor, is_secret_name

ARTIFACTS_ENV = "EVALS_ARTIFACTS"
FILES = ("manifest.json", "samples.jsonl", "events.jsonl", "errors.jsonl", "summary.json", "summary.md")
PACKAGES = ("evalpipe", "dagster", "duckdb", "pandas", "pyarrow", "litellm", "transformers", "torch", "aiohttp",
            "sentence-transformers", "opentelemetry-sdk")
# Environment kept in the manifest: only variables that change how a run behaves. Values of secret-looking
# names are masked, everything else is redacted like any other text.
ENV_PREFIXES = ("EVALS_", "DAGSTER_", "LITELLM_", "HF_", "TRANSFORMERS_", "OTEL_", "OMP_", "MKL_", "CUDA_",
                "TOKENIZERS_", "PYTHONHASHSEED")


def artifacts_root(cfg: EvalConfig | None = None) -> Path:
    """`EVALS_ARTIFACTS`, else `artifacts.dir` in the config (relative to the config file), else
    `$DAGSTER_HOME/artifacts`."""
    env = os.environ.get(ARTIFACTS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    configured = (cfg.artifacts.get("dir") if cfg is not None else None)
    if configured:
        p = Path(os.path.expandvars(str(configured))).expanduser()
        return p if p.is_absolute() else (cfg.path.parent / p).resolve()
    return dagster_home() / "artifacts"


def artifacts_enabled(cfg: EvalConfig | None) -> bool:
    return bool(cfg.artifacts.get("enabled", True)) if cfg is not None else True


def partition_dir(root: Path, split_key: str, model_key: str) -> Path:
    # benchmark_split keys hold one '/' (benchmark/split) and become two levels; a '/' in a model key
    # (e.g. `org/model`) would make a third, so it is spelled `__` like the models registry does.
    return root / split_key / folder_name(model_key)


# ---- small helpers ------------------------------------------------------------------------------------------------
_scan = json.JSONDecoder().scan_once  # json.loads without its Python layers (~4x faster on short texts)
# What the encoder writes for a plain value (finite floats: their repr; NaN and infinities go to the encoder)
_SCALAR_TEXT = {str: json.encoder.encode_basestring, int: int.__repr__, type(None): lambda v: "null",
                bool: lambda v: "true" if v else "false",
                float: lambda v: float.__repr__(v) if math.isfinite(v) else _dump(v)}


def _enc(v: Any) -> str:
    """`_dump(v)`, quicker for text, numbers, flags and nulls (most values of a line)."""
    text = _SCALAR_TEXT.get(type(v))
    return text(v) if text is not None else _dump(v)


def _encs(values: list[Any]) -> list[str]:
    """`_enc` of each value of a column; a column of one kind (text, text and nulls, integers) in one C loop."""
    kinds = set(map(type, values))
    if kinds <= {str}:
        return list(map(json.encoder.encode_basestring, values))
    if kinds <= {str, type(None)}:
        return ["null" if v is None else json.encoder.encode_basestring(v) for v in values]
    if kinds <= {int}:
        return list(map(int.__repr__, values))
    if kinds <= {float} and math.isfinite(sum(values)):  # (no NaN nor infinity: those are spelled otherwise)
        return list(map(float.__repr__, values))
    if kinds <= {bool}:
        return ["true" if v else "false" for v in values]
    return [_enc(v) for v in values]


def _key(k: Any) -> str:
    """The JSON text of `k` as an object key (the encoder spells None, numbers and flags as strings)."""
    return json.encoder.encode_basestring(k) if type(k) is str else _dump({k: 0})[1:-4]


def _loads(v: Any, default: Any = None) -> Any:
    """`json.loads(v)` of a non-empty string (the string itself if it is not JSON), else `default`."""
    if isinstance(v, str) and v:
        try:
            obj, end = _scan(v, 0)
            if end == len(v):
                return obj
        except (StopIteration, ValueError):
            pass
        try:  # leading/trailing whitespace, or not JSON: what json.loads makes of it
            return json.loads(v)
        except ValueError:
            return v
    return default


def _clean(v: Any) -> Any:
    """pandas/numpy scalars and NaN -> plain JSON values."""
    t = type(v)
    if v is None or t is str or t is int or t is bool:  # the common cases first: this runs for every value
        return v
    if t is float:
        return None if v != v else v
    if isinstance(v, float) and v != v:
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            v = v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and v != v:
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    return v


def _values(col: pd.Series) -> list[Any]:
    """A column as plain Python values: NaN (a missing number) and pandas' scalars cleaned."""
    from pandas.api.types import infer_dtype

    if col.dtype.kind in "iub":
        return col.tolist()
    kind = infer_dtype(col, skipna=True) if col.dtype == object else None  # (checked in C)
    if kind in ("string", "empty"):  # text and missing values (None, NaN, pd.NA): those become None
        return [v if isinstance(v, str) else None for v in col.tolist()]
    if col.dtype.kind == "f" or kind == "boolean":
        return col.astype(object).where(col.notna(), None).tolist()
    return [_clean(v) for v in col.tolist()]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    if not len(df):
        return []
    names = list(df.columns)
    return [dict(zip(names, values)) for values in zip(*(_values(df[c]) for c in names))]


# [sweeps] the manifest's git state and package versions are the process's, not the partition's: read at most once
# per MANIFEST_CACHE_S (two git processes and ~10 package metadata files cost ~15 ms, per partition of a sweep)
MANIFEST_CACHE_S = 30.0
_manifest_cache: dict[str, tuple[float, Any]] = {}


def _cached(name: str, read: Any) -> Any:
    hit = _manifest_cache.get(name)
    if hit is not None and time.monotonic() - hit[0] < MANIFEST_CACHE_S:
        return dict(hit[1])
    value = read()
    _manifest_cache[name] = (time.monotonic(), value)
    return dict(value)


def _git() -> dict[str, Any]:
    return _cached("git", _read_git)


def _read_git() -> dict[str, Any]:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return {"sha": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=5)
        return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None}


def package_versions() -> dict[str, str]:
    return _cached("packages", _read_package_versions)


def _read_package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:
            continue
    return out


def filtered_env() -> dict[str, str]:
    out = {}
    for k, v in sorted(os.environ.items()):
        if not k.startswith(ENV_PREFIXES):
            continue
        out[k] = MASK if is_secret_name(k) else v
    return out


def _model_files_signature(path: str | None) -> list[list[Any]] | None:
    """For a local model (folder or file): names and sizes of its files, so a changed checkpoint shows."""
    if not path:
        return None
    p = Path(path)
    if not p.exists():
        return None
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    return [[str(f.relative_to(p.parent if p.is_file() else p)), f.stat().st_size] for f in files[:500]]


def _reader(wh: Any, table: str, partition: dict[str, str]) -> Any:
    try:
        return wh.reader(table, partition)
    except WarehouseError:
        return None


def _read_or_empty(wh: Any, table: str, partition: dict[str, str]) -> pd.DataFrame:
    try:
        return wh.read(table, partition)
    except WarehouseError:
        return pd.DataFrame()


class _ListHash:
    """`fingerprint(list)` of a list seen piece by piece: SHA-256 of its canonical JSON, "[" item,item... "]"."""

    def __init__(self) -> None:
        import hashlib

        self.h = hashlib.sha256(b"[")
        self.n = 0

    def add(self, items: list[Any]) -> None:
        from evalpipe.core.fingerprint import canonical_json

        if items:
            text = canonical_json(items)[1:-1]  # the items' canonical JSON, comma-separated
            self.h.update(("," + text if self.n else text).encode("utf-8"))
            self.n += len(items)

    def hexdigest(self, length: int = 32) -> str:
        h = self.h.copy()
        h.update(b"]")
        return h.hexdigest()[:length]


def _sorted_hash(parts: list[Any]) -> str:
    """`fingerprint(sorted(values))` of string values collected batch by batch as numpy byte strings (UTF-8
    byte order is code-point order: the same order as `sorted` of the strings): ~32 bytes per value."""
    import numpy as np

    values = np.sort(np.concatenate(parts)) if parts else np.array([], dtype="S1")
    h = _ListHash()
    for lo in range(0, len(values), 50_000):
        h.add([v.decode("utf-8") for v in values[lo:lo + 50_000]])
    return h.hexdigest()


def _as_bytes(col: pd.Series) -> Any:
    import numpy as np

    vals = col.dropna()
    return np.array([str(v).encode("utf-8") for v in vals], dtype=bytes) if len(vals) else np.array([], dtype="S1")


PROMPT_COLUMNS = ["sample_id", "sample_index", "messages", "target", "metadata", "slices", "files",
                  "prompt_fingerprint"]
ROLLOUT_COLUMNS = ["sample_id", "prediction", "raw_output", "status", "error", "input_tokens", "output_tokens",
                   "cost", "latency_s", "attempts", "cached", "finish_reason", "trajectory", "tool_trace",
                   "fingerprint"]
# Integer columns of rollouts: pandas reads one with a null (an error row) in the batch as floats, and a line must
# not say `12.0` tokens or depend on which rows share its batch
ROLLOUT_INT_COLUMNS = ("input_tokens", "output_tokens", "attempts")
SCORE_FIELDS = ("score", "correct", "status", "reason", "normalized_prediction", "normalized_target")
USAGE_FIELDS = ("input_tokens", "output_tokens", "cost", "latency_s", "attempts", "cached")
# The per-sample lines are put together column by column from these templates (each `%s` the JSON text of one
# value), which gives the text `_dump(record)` gives for the record with these keys in this order.
SAMPLE_FIELDS = ("sample_id", "sample_index", "prompt", "target", "metadata", "slices", "prediction", "raw_output",
                 "status", "error", "scores", "usage", "finish_reason", "final_answer", "files", "trajectory",
                 "tool_calls")
ERROR_FIELDS = ("sample_id", "error", "attempts", "latency_s")
EVENT_HEAD = ("sample_id", "event_index", "source")


def _template(fields: tuple[str, ...]) -> str:
    return "{" + ", ".join(f"{_key(k)}: %s" for k in fields) + "}"


SAMPLE_LINE, SCORE_TEXT, USAGE_TEXT, ERROR_LINE = map(_template, (SAMPLE_FIELDS, SCORE_FIELDS, USAGE_FIELDS,
                                                                  ERROR_FIELDS))
# Every key a line can have besides those inside the stored JSON (messages, metadata, trajectories): none may be a
# secret-looking name, else `redact_obj` would mask the value under it and every line must be walked.
_FIXED_KEYS = (*SAMPLE_FIELDS, *SCORE_FIELDS, *USAGE_FIELDS, *ERROR_FIELDS, *EVENT_HEAD, "type", "role", "content",
               "value")


def _column(df: pd.DataFrame, name: str) -> list[Any]:
    return _values(df[name]) if name in df.columns else [None] * len(df)


def _json_texts(texts: list[Any], default: Any) -> list[str]:
    """`_dump(_loads(t, default))` of each stored JSON text (the same texts repeat: each is re-encoded once)."""
    seen: dict[Any, str] = {}
    out = []
    for t in texts:
        text = seen.get(t)
        if text is None:
            text = seen[t] = _dump(_loads(t, default))
        out.append(text)
    return out


EVENT_LINE = '{"sample_id": %s, "event_index": %d, "source": %s, %s'  # the head, then an event's text after "{"


def _event_line(sid: Any, index: int, source: str, ev: Any, text: str | None = None) -> str:
    """`_dump({"sample_id": sid, "event_index": index, "source": source, **flat})`: the head, then the event's own
    JSON text (`text`, or made here) when none of its keys overrides one of the head's."""
    flat = ev if isinstance(ev, dict) else {"type": "value", "value": ev}
    if flat and flat.keys().isdisjoint(EVENT_HEAD):
        return EVENT_LINE % (_enc(sid), index, _enc(source), (text or _dump(flat))[1:])
    return _dump({"sample_id": sid, "event_index": index, "source": source, **flat})


_MESSAGE_EVENT_KEYS = (*EVENT_HEAD, "type")  # a message with none of these keys: its event line is spliced


def _conversation_events(sid: Any, sid_text: str, messages: Any, message_texts: list[str] | None, st: Any,
                         raw_output: Any, error: Any) -> list[str]:
    """The event lines of a sample without an agent trajectory: each message as a `message` event, then the reply
    (or the error). A message's event text is `"type": "message"` spliced before the message's own JSON text."""
    lines = []
    for k, m in enumerate(messages):
        if message_texts is not None and type(m) is dict and m and m.keys().isdisjoint(_MESSAGE_EVENT_KEYS):
            lines.append(f'{{"sample_id": {sid_text}, "event_index": {k}, "source": "conversation", "type": "message", '
                         + message_texts[k][1:])
        else:
            lines.append(_event_line(sid, k, "conversation", {"type": "message", **m}))
    if st == "ok":
        lines.append(f'{{"sample_id": {sid_text}, "event_index": {len(lines)}, "source": "conversation", '
                     f'"type": "message", "role": "assistant", "content": {_enc(raw_output)}}}')
    elif st is not None:
        lines.append(f'{{"sample_id": {sid_text}, "event_index": {len(lines)}, "source": "conversation", '
                     f'"type": "error", "error": {_enc(error)}}}')
    return lines


def _might_redact(r: Any, df: pd.DataFrame, plain: tuple[str, ...], json_text: tuple[str, ...]) -> Any:
    """Per row: could `redact_obj` change anything made of these columns (text, and stored JSON text)? Columns of
    numbers count for nothing: a number is masked only under a secret-looking key, and the keys here are fixed."""
    import numpy as np
    import pyarrow as pa

    from evalpipe.store.warehouse import ONE_SCAN_BYTES

    hit = np.zeros(len(df), dtype=bool)
    for names, as_json in ((plain, False), (json_text, True)):
        columns = []
        for c in names:
            if c not in df.columns or not len(df) or df[c].dtype != object:
                continue
            try:
                columns.append(pa.array(df[c], type=pa.string(), from_pandas=True))
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # not all text (a file of another schema): walk its rows
                hit |= df[c].notna().to_numpy()
        if columns and sum(c.nbytes for c in columns) < ONE_SCAN_BYTES:
            # [sweeps] the columns scanned as one array: one pattern compiled, not one per column
            flags = r.could_match_cells(pa.concat_arrays(columns), json_text=as_json)
            hit |= np.asarray(flags, dtype=bool).reshape(len(columns), len(df)).any(axis=0)
        else:
            for cells in columns:  # (large text: a column at a time, as one array's offsets can't pass 2 GB)
                hit |= r.could_match_cells(cells, json_text=as_json)
    return hit


# ---- the folder ---------------------------------------------------------------------------------------------------
def stream_samples(split_key: str, model_key: str, wh: Any, sink: Any, batch_rows: int | None = None) -> dict[str, Any]:
    """The per-sample JSON lines (samples, events, errors), built batch by batch from the warehouse (prompts, with
    the rollouts and judgements of the same samples side by side), redacted, and handed to `sink(name, text)`;
    returns the counts and the fingerprints of the partition's data.

    Each line is the text `_dump(r.redact_obj(record))` of its record, made without building the records: the
    lines are put together from each column's JSON text, and only the lines of samples whose cells could hold
    something to mask (`Redactor.could_match_cells`, one scan per column in C) are parsed back and redacted."""
    part = {"benchmark_split": split_key, "model": model_key}
    prompts, rollouts, judgements = (_reader(wh, t, part) for t in ("prompts", "rollouts", "judgements"))
    if prompts is None and rollouts is None:
        raise WarehouseError(f"no prompts or rollouts for {split_key} x {model_key} in {wh.root}; "
                             "materialize the partition first (evalpipe run)")
    roll_cur = rollouts.cursor(ROLLOUT_COLUMNS, batch_rows) if rollouts is not None else None
    judge_cur = (judgements.cursor(["metric", *SCORE_FIELDS, "judge_fingerprint"], batch_rows)
                 if judgements is not None else None)
    r = get_redactor()
    walk_all = any(is_secret_name(k) for k in _FIXED_KEYS)
    counts = {"samples": 0, "ok": 0, "errors": 0, "from_journal": 0, "input_tokens": 0, "output_tokens": 0,
              "cost_usd": 0.0}
    prompt_fps: list[Any] = []
    rollout_fps: list[Any] = []
    judges: set[str] = set()
    batches = (prompts.batches(batch_rows, PROMPT_COLUMNS) if prompts is not None
               else iter([pd.DataFrame(columns=["sample_id"])]))
    for p_batch in batches:
        ids = p_batch["sample_id"]
        r_batch = roll_cur.take(ids) if roll_cur is not None else pd.DataFrame(columns=ROLLOUT_COLUMNS)
        j_batch = judge_cur.take(ids) if judge_cur is not None else pd.DataFrame()
        if "prompt_fingerprint" in p_batch:
            prompt_fps.append(_as_bytes(p_batch["prompt_fingerprint"]))
        if "fingerprint" in r_batch:
            rollout_fps.append(_as_bytes(r_batch["fingerprint"]))
        if "judge_fingerprint" in j_batch:
            judges.update(j_batch["judge_fingerprint"].dropna().unique().tolist())
        sids = _column(p_batch, "sample_id")
        n = len(sids)

        # each sample's rollout (by id, the last row of an id wins) and scores (metric -> fields, file order)
        r_ids = _column(r_batch, "sample_id")
        pos = None if r_ids == sids else {sid: i for i, sid in enumerate(r_ids)}
        rows = None if pos is None else [pos.get(sid) for sid in sids]

        def rollout(name: str) -> list[Any]:
            vals = _column(r_batch, name)
            if name in ROLLOUT_INT_COLUMNS and name in r_batch.columns and r_batch[name].dtype.kind == "f":
                vals = [None if v is None else int(v) for v in vals]
            return vals if rows is None else [None if i is None else vals[i] for i in rows]

        roll = {c: rollout(c) for c in ROLLOUT_COLUMNS}
        # each sample's scores as '"metric": {fields}' parts; a sample's first metric kept without a dict of its own
        # (a dict per sample would be 20,000 containers for the garbage collector to walk, per batch)
        first_metric: dict[Any, Any] = {}
        first_part: dict[Any, str] = {}
        more: dict[Any, dict[Any, str]] = {}  # samples with several metrics: metric -> part (a repeat replaces it)
        if len(j_batch):
            metrics = _column(j_batch, "metric")
            keys = {m: _key(m) + ": " for m in set(metrics)}
            texts = [SCORE_TEXT % v for v in zip(*(_encs(_column(j_batch, c)) for c in SCORE_FIELDS))]
            for sid, metric, text in zip(_column(j_batch, "sample_id"), metrics, texts):
                if sid in more:
                    more[sid][metric] = keys[metric] + text
                elif sid not in first_part or first_metric[sid] == metric:
                    first_metric[sid], first_part[sid] = metric, keys[metric] + text
                else:
                    more[sid] = {first_metric[sid]: first_part[sid], metric: keys[metric] + text}

        # which samples' lines must be walked by redact_obj
        walk = _might_redact(r, p_batch, ("sample_id", "target"), ("messages", "metadata", "slices", "files"))
        r_walk = _might_redact(r, r_batch, ("prediction", "raw_output", "status", "error", "finish_reason"),
                               ("trajectory", "tool_trace"))
        if r_walk.any():
            flagged = {r_ids[i] for i in r_walk.nonzero()[0].tolist()}
            walk |= [sid in flagged for sid in sids]
        if len(j_batch):
            j_walk = _might_redact(r, j_batch, ("status", "reason", "normalized_prediction", "normalized_target"), ())
            if j_walk.any():
                j_ids = _column(j_batch, "sample_id")
                flagged = {j_ids[i] for i in j_walk.nonzero()[0].tolist()}
                walk |= [sid in flagged for sid in sids]
        if walk_all:
            walk[:] = True

        trajectories = [_loads(t, None) for t in roll["trajectory"]]
        status, raw_output, error = roll["status"], roll["raw_output"], roll["error"]
        walk_rows = walk.tolist()
        sid_texts = _encs(sids)
        prompt_texts, events, events_walk, errors, errors_walk = [], [], [], [], []
        for i, (sid, messages) in enumerate(zip(sids, map(_loads, _column(p_batch, "messages"), repeat([])))):
            if type(messages) is list:  # the prompt's text made of its messages' texts, which the events reuse
                message_texts = [_dump(m) for m in messages]
                prompt_texts.append("[" + ", ".join(message_texts) + "]")
            else:
                message_texts = None
                prompt_texts.append(_dump(messages))
            st = status[i]
            if st not in (None, "ok"):
                errors.append(ERROR_LINE % (_enc(sid), _enc(error[i]), _enc(roll["attempts"][i]),
                                            _enc(roll["latency_s"][i])))
                errors_walk.append(walk_rows[i])
            trajectory = trajectories[i]
            if isinstance(trajectory, list) and trajectory:  # an agent's trajectory, with its tool calls
                evs = _with_tool_calls(trajectory, _loads(roll["tool_trace"][i], None))
                lines = [_event_line(sid, k, "trajectory", ev) for k, ev in enumerate(evs)]
            else:  # no agent trajectory: the conversation itself is the event list
                lines = _conversation_events(sid, sid_texts[i], messages, message_texts, st, raw_output[i], error[i])
            events += lines
            events_walk += [walk_rows[i]] * len(lines)

        prediction = _encs(roll["prediction"])
        columns = [
            sid_texts, _encs(_column(p_batch, "sample_index")), prompt_texts,
            _encs(_column(p_batch, "target")), _json_texts(_column(p_batch, "metadata"), {}),
            _json_texts(_column(p_batch, "slices"), {}), prediction, _encs(raw_output), _encs(status), _encs(error),
            ["{" + ", ".join(more[sid].values()) + "}" if sid in more else "{" + first_part[sid] + "}"
             if sid in first_part else "{}" for sid in sids],
            (USAGE_TEXT % u for u in zip(*(_encs(roll[c]) for c in USAGE_FIELDS))),
            _encs(roll["finish_reason"]), prediction, _json_texts(_column(p_batch, "files"), []),
            _json_texts(roll["trajectory"], None), _json_texts(roll["tool_trace"], None),
        ]
        samples = [SAMPLE_LINE % values for values in zip(*columns)]

        counts["samples"] += n
        counts["ok"] += sum(1 for st in status if st == "ok")
        counts["from_journal"] += sum(1 for c in roll["cached"] if c)
        counts["input_tokens"] += sum(int(t or 0) for t in roll["input_tokens"])
        counts["output_tokens"] += sum(int(t or 0) for t in roll["output_tokens"])
        for cost in roll["cost"]:  # one by one, in sample order: the same float sum as ever
            counts["cost_usd"] += float(cost or 0.0)
        counts["errors"] += len(errors)
        sink("samples.jsonl", _redacted(r, samples, walk_rows))
        sink("events.jsonl", _redacted(r, events, events_walk))
        sink("errors.jsonl", _redacted(r, errors, errors_walk))
    counts["ok"] = int(counts["ok"])
    counts["cost_usd"] = round(counts["cost_usd"], 6)
    dataset_fp = _ListHash()
    dataset = _reader(wh, "datasets", {"benchmark_split": split_key})
    if dataset is not None and len(dataset):
        for d in dataset.batches(batch_rows, ["sample_id", "input", "target", "choices", "files"]):
            dataset_fp.add(list(zip(*(_values(d[c]) for c in d.columns))))  # (rows as tuples: the same JSON)
    fps = {
        "dataset": dataset_fp.hexdigest() if dataset_fp.n else None,
        "prompts": _sorted_hash(prompt_fps) if prompts is not None and "prompt_fingerprint" in prompts.columns else None,
        "rollouts": _sorted_hash(rollout_fps) if rollouts is not None and "fingerprint" in rollouts.columns else None,
        "judges": sorted(judges),
    }
    return {"counts": counts, "fingerprints": fps}


def _redacted(r: Any, lines: list[str], walk: list[bool]) -> str:
    """The JSON lines, those marked to be walked replaced by `_dump(r.redact_obj(record))` of the record they encode."""
    if any(walk):
        lines = [_dump(r.redact_obj(json.loads(line))) if w else line for line, w in zip(lines, walk)]
    return "\n".join(lines) + "\n" if lines else ""


def build_artifacts(split_key: str, model_key: str, wh: Any, cfg: EvalConfig | None = None,
                    metrics: pd.DataFrame | None = None, run: dict[str, Any] | None = None,
                    sink: Any = None, batch_rows: int | None = None,
                    dataset_header: dict[str, Any] | None = None) -> dict[str, Any]:
    """The artifact contents as Python objects (file name -> object, or list of (redacted) records for .jsonl).
    With `sink`, the per-sample .jsonl text goes to `sink(name, text)` batch by batch instead (`write_artifacts`).
    `dataset_header`: the split's header for the manifest (`evalpipe.benchmarks.dataset_header`; the adapters
    read it, a floor above storage)."""
    part = {"benchmark_split": split_key, "model": model_key}
    if metrics is None:
        metrics = _read_or_empty(wh, "metrics", part)
    kept: dict[str, list] = {"samples.jsonl": [], "events.jsonl": [], "errors.jsonl": []}
    streamed = stream_samples(split_key, model_key, wh, sink or (
        lambda name, text: kept[name].extend(json.loads(line) for line in text.splitlines())), batch_rows)
    counts = streamed["counts"]

    metric_rows = _records(metrics)
    run = dict(run or {})
    started, finished = run.get("started_at"), run.get("finished_at") or time.time()
    timing = {"started_at": _iso(started), "finished_at": _iso(finished),
              "duration_s": round(finished - started, 3) if started else None}
    summary = {"benchmark_split": split_key, "model": model_key, "run_id": run.get("run_id"), **timing,
               "counts": counts, "metrics": metric_rows}
    if judge_usage(metric_rows) is not None:  # [spend] the judges' calls beside the rollouts' counts
        summary["judge_usage"] = judge_usage(metric_rows)

    split_cfg = model_cfg = None
    if cfg is not None:
        split_cfg = cfg.splits.get(split_key)
        try:
            model_cfg = cfg.model(model_key)
        except Exception:  # a model since removed from the config: the manifest still records the rest
            model_cfg = None
    split_dict = None
    if split_cfg is not None:
        split_dict = {k: v for k, v in asdict(split_cfg).items() if k != "base_dir"}
        split_dict["base_dir"] = str(split_cfg.base_dir)
    model_dict = asdict(model_cfg) if model_cfg is not None else None
    data_fps = streamed["fingerprints"]
    fps = {
        "dataset": data_fps["dataset"], "prompts": data_fps["prompts"],
        "prompt_template": fingerprint(split_cfg.prompt_template) if split_cfg is not None else None,
        "runner": fingerprint({"runner": model_cfg.runner, "api_base": model_cfg.api_base,
                               "options": model_cfg.options}) if model_cfg is not None else None,
        "model": fingerprint({"model": model_cfg.model, "params": model_cfg.params,
                              "files": _model_files_signature(model_cfg.model)}) if model_cfg is not None else None,
        "rollouts": data_fps["rollouts"], "judges": data_fps["judges"],
    }
    fp_rows = _records(_read_or_empty(wh, "fingerprints", part))
    if fp_rows:  # [reproducibility] the partition's recorded fingerprints (evalpipe/pipeline/fingerprints.py)
        fps.update({k: v for k, v in fp_rows[-1].items() if k not in ("benchmark_split", "model")})
    manifest = {
        "benchmark_split": split_key, "model": model_key, "run_id": run.get("run_id"), **timing,
        "config": {"file": str(cfg.path) if cfg is not None else None,
                   "file_fingerprint": _file_fp(cfg.path) if cfg is not None else None,
                   "benchmark_split": split_dict, "model": model_dict},
        "fingerprints": fps, "git": _git(), "packages": package_versions(),
        "python": sys.version.split()[0], "platform": platform.platform(), "env": filtered_env(),
        "counts": counts, "files": list(FILES), "dataset_header": dataset_header,
        "experiment": (model_cfg.options.get("experiment") if model_cfg is not None else None),
    }
    out = {"manifest.json": manifest, "summary.json": summary, "summary.md": summary_markdown(summary)}
    if sink is None:
        out.update(kept)
    return out


def _with_tool_calls(trajectory: list[Any], records: list[dict[str, Any]] | None) -> list[Any]:
    """[tools] A conversation's events: every message (model turns included) as a `message` event, and each tool
    call record (docs/tools.md) as a `tool_call` event just before the `tool` message that answered it."""
    if not records:
        return trajectory
    out: list[Any] = []
    pending = iter(records)
    left = len(records)
    for ev in trajectory:
        if isinstance(ev, dict) and "role" in ev and "type" not in ev:
            if ev["role"] == "tool" and left:
                out.append({"type": "tool_call", **next(pending)})
                left -= 1
            ev = {"type": "message", **ev}
        out.append(ev)
    out += [{"type": "tool_call", **rec} for rec in pending]  # calls recorded without tool messages (replay)
    return out


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat() if ts else None


def _file_fp(path: Path) -> str | None:
    try:
        return fingerprint(path.read_text(encoding="utf-8"))
    except OSError:
        return None


JUDGE_USAGE_FIELDS = {"judge_calls": "calls", "judge_input_tokens_total": "input_tokens",
                      "judge_output_tokens_total": "output_tokens", "judge_cost_usd_total": "cost_usd",
                      "judge_latency_s_mean": "latency_s_mean"}


def judge_usage(metric_rows: Any) -> dict[str, Any] | None:
    """[spend] The judges' usage of a partition from its metrics rows (the `judge_*` rows of slice `usage`):
    calls sent, input/output tokens, cost in USD, mean latency in s; None when no judge recorded usage."""
    rows = metric_rows.to_dict("records") if isinstance(metric_rows, pd.DataFrame) else list(metric_rows or [])
    got = {JUDGE_USAGE_FIELDS[r["metric"]]: r.get("value") for r in rows
           if r.get("slice") == "usage" and r.get("metric") in JUDGE_USAGE_FIELDS}
    if not got:
        return None
    out: dict[str, Any] = {}
    for key in JUDGE_USAGE_FIELDS.values():
        v = got.get(key)
        v = None if v is None or (isinstance(v, float) and v != v) else float(v)
        out[key] = (int(v) if v is not None and key in ("calls", "input_tokens", "output_tokens")
                    else round(v, 6) if v is not None else None)
    return out


def spend_text(counts: dict[str, Any] | None, judges: dict[str, Any] | None) -> str:
    """One line: the rollouts' tokens and cost, the judges' beside them (when any judge recorded usage)."""
    c = counts or {}
    text = (f"rollouts {c.get('input_tokens', 0)} input / {c.get('output_tokens', 0)} output tokens, "
            f"${c.get('cost_usd', 0.0)}")
    if judges:
        text += (f"; judges {judges['calls']} call(s), {judges['input_tokens']} input / {judges['output_tokens']} "
                 f"output tokens, ${judges['cost_usd']}")
    return text


def summary_markdown(summary: dict[str, Any]) -> str:
    c = summary["counts"]
    lines = [f"# {summary['benchmark_split']} x {summary['model']}", ""]
    if summary.get("run_id"):
        lines.append(f"run `{summary['run_id']}`, finished {summary.get('finished_at')}, "
                     f"took {summary.get('duration_s')} s")
        lines.append("")
    lines += [f"{c['samples']} samples: {c['ok']} ok, {c['errors']} errors, {c['from_journal']} from the journal; "
              + spend_text(c, summary.get("judge_usage")), ""]
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in summary["metrics"]:
        by_metric.setdefault(r["metric"], []).append(r)
    for metric, rows in by_metric.items():
        rows = sorted(rows, key=lambda r: (r["slice"] != "all", r["slice"]))
        lines += [f"## {metric}", "", "| slice | value | n | unscored | errors | 95% CI |", "|---|---|---|---|---|---|"]
        for r in rows:
            count = r.get("kind") == "count"  # a count reads as a whole number, with no interval
            v = ("n/a" if r.get("value") is None else
                 (f"{r['value']:.0f}" if count and float(r["value"]).is_integer() else f"{r['value']:.4f}"))
            ci = "" if r.get("ci_low") is None or count else f"{r['ci_low']:.3f} - {r['ci_high']:.3f}"
            lines.append(f"| {r['slice']} | {v} | {r.get('n')} | {r.get('n_unscored')} | {r.get('n_errors')} | {ci} |")
        lines.append("")
    if not by_metric:
        lines.append("_no metrics_")
    return "\n".join(lines) + "\n"


# ---- where the files go: the ArtifactWriter protocol ----------------------------------------------------------------
@runtime_checkable
class RunArtifacts(Protocol):
    """One run's files while they are written: `write` appends text (already redacted) to a file of the run, in
    batches; `commit` publishes every file at once and returns where the run is; `abort` drops what was written."""

    def write(self, name: str, text: str) -> None: ...

    def commit(self) -> Any: ...

    def abort(self) -> None: ...


@runtime_checkable
class ArtifactWriter(Protocol):
    """Where run artifacts are written (`artifacts: {writer: ...}` in the config, or `write_artifacts(writer=)`).
    `open_run` starts one run's set of files: `out_dir` is the folder the user asked for (`evalpipe export --out`),
    None for the writer's own place for (split, model, run id); `started_at` the run's start (epoch seconds)."""

    def open_run(self, split_key: str, model_key: str, run_id: str, cfg: EvalConfig | None = None,
                 out_dir: str | os.PathLike | None = None, started_at: float | None = None) -> RunArtifacts: ...


class _FolderRun:
    """A run folder written under a temp name and renamed into place: a reader never sees half a set of files."""

    def __init__(self, target: Path, point_latest_at_commit: bool) -> None:
        self.target, self.latest = target, point_latest_at_commit
        target.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
        self.tmp.mkdir()
        self.files: dict[str, Any] = {}

    def write(self, name: str, text: str) -> None:
        fh = self.files.get(name)
        if fh is None:
            fh = self.files[name] = open(self.tmp / name, "w", encoding="utf-8")
        fh.write(text)

    def _close(self) -> None:
        for fh in self.files.values():
            fh.close()
        self.files.clear()

    def commit(self) -> Path:
        self._close()
        target = self.target
        if target.exists():
            old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(target, old)
            os.replace(self.tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(self.tmp, target)
        if self.latest:
            point_latest(target)
        return target

    def abort(self) -> None:
        self._close()
        if self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)


FOLDER_NAMES = ("run_id", "timestamp_run_id")


def run_folder_name(run_id: str, started_at: float | None = None, cfg: EvalConfig | None = None) -> str:
    """A run's folder name: the run id (default), or with `artifacts: {folder_name: timestamp_run_id}`
    `<UTC start, YYYYMMDDTHHMMSSZ>_<run id>` (the GAIA harness's layout: folders sort by time)."""
    style = str((cfg.artifacts.get("folder_name") if cfg is not None else None) or "run_id")
    if style not in FOLDER_NAMES:
        raise ConfigError(f"artifacts.folder_name: {style!r} is not one of {', '.join(FOLDER_NAMES)}")
    name = safe_run_id(run_id)
    if style == "timestamp_run_id":
        when = datetime.fromtimestamp(started_at if started_at is not None else time.time(), timezone.utc)
        name = f"{when.strftime('%Y%m%dT%H%M%SZ')}_{name}"
    return name


class LocalFolderWriter:
    """The default: `<artifacts root>/<split>/<model>/<run_id>/`, `latest` beside it pointing at the newest; folders
    of earlier runs are kept, the same run id written again replaces its own folder whole."""

    def open_run(self, split_key: str, model_key: str, run_id: str, cfg: EvalConfig | None = None,
                 out_dir: str | os.PathLike | None = None, started_at: float | None = None) -> RunArtifacts:
        if out_dir:
            return _FolderRun(Path(out_dir).expanduser().resolve(), point_latest_at_commit=False)
        name = run_folder_name(run_id, started_at, cfg)
        return _FolderRun(partition_dir(artifacts_root(cfg), split_key, model_key) / name, True)


class MemoryArtifactWriter:
    """Keeps each run's files as text in `runs[(split, model, run_id)]` (tests, notebooks, a service that ships
    them elsewhere): nothing touches the disk. Committed runs only; a run written again replaces its files."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, str, str], dict[str, str]] = {}

    def open_run(self, split_key: str, model_key: str, run_id: str, cfg: EvalConfig | None = None,
                 out_dir: str | os.PathLike | None = None, started_at: float | None = None) -> RunArtifacts:
        return _MemoryRun(self, (split_key, model_key, str(out_dir or run_id)))


class _MemoryRun:
    def __init__(self, owner: MemoryArtifactWriter, key: tuple[str, str, str]) -> None:
        self.owner, self.key, self.parts = owner, key, {}

    def write(self, name: str, text: str) -> None:
        self.parts.setdefault(name, []).append(text)

    def commit(self) -> str:
        self.owner.runs[self.key] = {name: "".join(chunks) for name, chunks in self.parts.items()}
        return "memory://" + "/".join(self.key)

    def abort(self) -> None:
        self.parts.clear()


_WRITERS: dict[str, Any] = {"local": LocalFolderWriter(), "memory": MemoryArtifactWriter()}


def register_artifact_writer(name: str, writer: ArtifactWriter) -> None:
    """Make `artifacts: {writer: NAME}` use `writer` (an object with `open_run`, see ArtifactWriter)."""
    if not isinstance(writer, ArtifactWriter):
        raise TypeError(f"artifact writer {name!r} has no open_run(split_key, model_key, run_id, cfg, out_dir)")
    _WRITERS[name] = writer


def artifact_writer(cfg: EvalConfig | None = None) -> ArtifactWriter:
    """The config's `artifacts.writer`: a registered name (`local`, the default; `memory`) or `module:attribute`
    naming a writer object, or a class built with no arguments."""
    spec = str((cfg.artifacts.get("writer") if cfg is not None else None) or "local")
    if spec in _WRITERS:
        return _WRITERS[spec]
    if ":" not in spec:
        raise ConfigError(f"artifacts.writer: unknown writer {spec!r}; use {', '.join(sorted(_WRITERS))} or "
                          "'package.module:attribute'")
    import importlib

    module, _, attr = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"artifacts.writer: cannot import {spec!r} ({e})") from e
    writer = obj() if isinstance(obj, type) else obj
    register_artifact_writer(spec, writer)  # one instance per process: a stateful writer keeps its state
    return writer


REVIEWS_FILE = "reviews.jsonl"


def partition_reviews(wh: Any, split_key: str, model_key: str) -> list[dict[str, Any]]:
    """The `reviews` rows of a partition, whole history, oldest first: verdicts on its samples and pairwise
    preferences with this model on either side."""
    if hasattr(wh, "may_have_rows") and not wh.may_have_rows("reviews"):  # [sweeps] none at all: no DuckDB query
        return []
    df = wh.query("SELECT * FROM reviews WHERE benchmark_split = ? AND (model = ? OR model_b = ?) "
                  "ORDER BY created_at, review_id", [split_key, model_key, model_key])
    return [{k: (None if v is None or (isinstance(v, float) and v != v) else v) for k, v in row.items()}
            for row in df.to_dict("records")]


def write_artifacts(split_key: str, model_key: str, wh: Any, cfg: EvalConfig | None = None,
                    metrics: pd.DataFrame | None = None, run: dict[str, Any] | None = None,
                    out_dir: str | os.PathLike | None = None, batch_rows: int | None = None,
                    dataset_header: dict[str, Any] | None = None, writer: ArtifactWriter | None = None) -> Any:
    """Write the partition's run artifacts through `writer` (default: the config's `artifacts.writer`, else the local
    folder writer: `<artifacts root>/<split>/<model>/<run_id>/`, with `latest` pointing at it; `out_dir` always goes
    to the local writer) and return where they are (a Path for the local writer). The per-sample files are written
    batch by batch (`batch_rows` samples at a time), so the partition never sits in memory whole. Every value is
    redacted before it reaches the writer."""
    run_id = (run or {}).get("run_id") or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    if writer is None:  # a folder the user named (`evalpipe export --out`) is a local folder whatever the config says
        writer = _WRITERS["local"] if out_dir else artifact_writer(cfg)
    out = writer.open_run(split_key, model_key, str(run_id), cfg, out_dir, started_at=(run or {}).get("started_at"))
    r = get_redactor()
    try:
        contents = build_artifacts(split_key, model_key, wh, cfg, metrics, run, sink=out.write,  # lines come redacted
                                   batch_rows=batch_rows, dataset_header=dataset_header)
        for name, obj in contents.items():
            if name.endswith(".json"):
                out.write(name, json.dumps(r.redact_obj(obj), ensure_ascii=False, default=str, indent=2) + "\n")
            else:
                out.write(name, r.redact(obj))
        reviews = partition_reviews(wh, split_key, model_key)
        if reviews:  # people's and judges' reviews of this partition (docs/viewer.md "Reviews"), only where there are some
            out.write(REVIEWS_FILE, r.redact("".join(json.dumps(x, ensure_ascii=False, default=str) + "\n"
                                                     for x in reviews)))
        for name in FILES:  # an empty file still exists (errors.jsonl of a clean run)
            out.write(name, "")
        return out.commit()
    except BaseException:
        out.abort()
        raise


def safe_run_id(run_id: str) -> str:
    """A run id as one folder name (a user-given --run-id may hold anything)."""
    import re

    s = re.sub(r"[^A-Za-z0-9._@+=-]+", "-", str(run_id)).strip("-.")
    if not s or s == LATEST:
        raise ValueError(f"run id {run_id!r} cannot name a folder; use letters, digits and ._-")
    return s


LATEST = "latest"


def point_latest(run_folder: Path) -> None:
    """Atomically make `<partition>/latest` a relative symlink to this run's folder."""
    link = run_folder.parent / LATEST
    tmp = run_folder.parent / f".{LATEST}.{uuid.uuid4().hex[:8]}"
    os.symlink(run_folder.name, tmp)
    os.replace(tmp, link)


def run_folders(split_key: str, model_key: str, cfg: EvalConfig | None = None) -> list[Path]:
    """The kept run folders of a partition, oldest first (by their manifest's finish time)."""
    d = partition_dir(artifacts_root(cfg), split_key, model_key)
    if not d.is_dir():
        return []
    runs = [p for p in d.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
            and (p / "manifest.json").exists()]
    return sorted(runs, key=lambda p: (p / "manifest.json").stat().st_mtime)


def read_run_dir(path: str | os.PathLike) -> dict[str, Any]:
    """summary.json of a run folder (or of a partition folder's `latest`)."""
    p = Path(path).expanduser()
    if not (p / "summary.json").exists() and (p / LATEST / "summary.json").exists():
        p = p / LATEST
    f = p / "summary.json"
    if not f.exists():
        raise WarehouseError(f"{p}: no summary.json here; pass a run folder (<artifacts>/<benchmark>/<split>/<model>/"
                             "<run_id>) or its partition folder")
    return json.loads(f.read_text(encoding="utf-8"))
