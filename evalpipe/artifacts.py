"""Run artifacts: one auditable folder per run of a (benchmark_split, model) partition, kept
(`<root>/<split>/<model>/<run_id>/`, `latest` pointing at the newest; docs/reproducibility.md).

    manifest.json   config snapshot, git SHA, package versions, filtered env, start/end/duration, fingerprints
    samples.jsonl   per sample: prompt, ground truth, metadata, prediction, scores, usage, error
    events.jsonl    trajectory events flattened, one per line, with sample_id and event_index
    errors.jsonl    the samples whose rollout failed
    summary.json    metric values per slice, counts
    summary.md      the same for humans, one table per metric

Everything is built from the warehouse (plus the metrics just computed), so the `metrics` asset and
`evalpipe export` write identical folders. Every value passes through `evalpipe.redact`. The folder is written
under a temp name and renamed into place: a reader never sees half a set of files.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.config import REPO_ROOT, EvalConfig, dagster_home
from evalpipe.errors import WarehouseError
from evalpipe.fingerprint import fingerprint
from evalpipe.redact import MASK, get_redactor, is_secret_name

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
    return root / split_key / model_key.replace("/", "__")


# ---- small helpers ------------------------------------------------------------------------------------------------
def _loads(v: Any, default: Any = None) -> Any:
    if isinstance(v, str) and v:
        try:
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


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    if not len(df):
        return []
    names = list(df.columns)
    columns = []
    from pandas.api.types import infer_dtype

    for c in names:  # plain Python values, column by column: NaN (a missing number) and pandas' scalars cleaned
        col = df[c]
        if col.dtype.kind in "iub":
            columns.append(col.tolist())
        elif col.dtype == object and infer_dtype(col, skipna=True) in ("string", "empty", "boolean"):
            columns.append(col.where(col.notna(), None).tolist())  # (checked in C: text, flags and nulls only)
        else:
            columns.append([_clean(v) for v in col.tolist()])
    return [dict(zip(names, values)) for values in zip(*columns)]


def _git() -> dict[str, Any]:
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
        from evalpipe.fingerprint import canonical_json

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


ROLLOUT_COLUMNS = ["sample_id", "prediction", "raw_output", "status", "error", "input_tokens", "output_tokens",
                   "cost", "latency_s", "attempts", "cached", "finish_reason", "trajectory", "tool_trace",
                   "fingerprint"]
SCORE_FIELDS = ("score", "correct", "status", "reason", "normalized_prediction", "normalized_target")


# ---- the folder ---------------------------------------------------------------------------------------------------
def stream_samples(split_key: str, model_key: str, wh: Any, sink: Any, batch_rows: int | None = None) -> dict[str, Any]:
    """The per-sample records (samples, events, errors), built batch by batch from the warehouse (prompts, with
    the rollouts and judgements of the same samples side by side) and handed to `sink(name, records)`; returns
    the counts and the fingerprints of the partition's data."""
    part = {"benchmark_split": split_key, "model": model_key}
    prompts, rollouts, judgements = (_reader(wh, t, part) for t in ("prompts", "rollouts", "judgements"))
    if prompts is None and rollouts is None:
        raise WarehouseError(f"no prompts or rollouts for {split_key} x {model_key} in {wh.root}; "
                             "materialize the partition first (evalpipe run)")
    roll_cur = rollouts.cursor(ROLLOUT_COLUMNS, batch_rows) if rollouts is not None else None
    judge_cur = (judgements.cursor(["metric", *SCORE_FIELDS, "judge_fingerprint"], batch_rows)
                 if judgements is not None else None)
    counts = {"samples": 0, "ok": 0, "errors": 0, "from_journal": 0, "input_tokens": 0, "output_tokens": 0,
              "cost_usd": 0.0}
    prompt_fps: list[Any] = []
    rollout_fps: list[Any] = []
    judges: set[str] = set()
    batches = prompts.batches(batch_rows) if prompts is not None else iter([pd.DataFrame(columns=["sample_id"])])
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
        scores: dict[str, dict[str, Any]] = {}
        for r in _records(j_batch):
            scores.setdefault(r["sample_id"], {})[r["metric"]] = {k: r.get(k) for k in SCORE_FIELDS}
        roll = {r["sample_id"]: r for r in _records(r_batch)}
        samples, events, errors = [], [], []
        for p in _records(p_batch):
            sid = p["sample_id"]
            r = roll.get(sid, {})
            messages = _loads(p.get("messages"), [])
            usage = {k: r.get(k) for k in ("input_tokens", "output_tokens", "cost", "latency_s", "attempts", "cached")}
            samples.append({
                "sample_id": sid, "sample_index": p.get("sample_index"), "prompt": messages, "target": p.get("target"),
                "metadata": _loads(p.get("metadata"), {}), "slices": _loads(p.get("slices"), {}),
                "prediction": r.get("prediction"), "raw_output": r.get("raw_output"), "status": r.get("status"),
                "error": r.get("error"), "scores": scores.get(sid, {}), "usage": usage,
                "finish_reason": r.get("finish_reason"),
                # the final answer, the whole trajectory (tool calls and their output) and the data files it used
                "final_answer": r.get("prediction"), "files": _loads(p.get("files"), []),
                "trajectory": _loads(r.get("trajectory"), None), "tool_calls": _loads(r.get("tool_trace"), None),
            })
            counts["samples"] += 1
            counts["ok"] += r.get("status") == "ok"
            counts["from_journal"] += bool(usage.get("cached"))
            counts["input_tokens"] += int(usage.get("input_tokens") or 0)
            counts["output_tokens"] += int(usage.get("output_tokens") or 0)
            counts["cost_usd"] += float(usage.get("cost") or 0.0)
            if r.get("status") not in (None, "ok"):
                errors.append({"sample_id": sid, "error": r.get("error"), "attempts": r.get("attempts"),
                               "latency_s": r.get("latency_s")})
            trajectory = samples[-1]["trajectory"]
            if isinstance(trajectory, list) and trajectory:
                source, evs = "trajectory", _with_tool_calls(trajectory, samples[-1]["tool_calls"])
            else:  # no agent trajectory: the conversation itself is the event list
                source = "conversation"
                evs = [{"type": "message", **m} for m in messages]
                if r.get("status") == "ok":
                    evs.append({"type": "message", "role": "assistant", "content": r.get("raw_output")})
                elif r.get("status") is not None:
                    evs.append({"type": "error", "error": r.get("error")})
            for i, ev in enumerate(evs):
                flat = ev if isinstance(ev, dict) else {"type": "value", "value": ev}
                events.append({"sample_id": sid, "event_index": i, "source": source, **flat})
        counts["errors"] += len(errors)
        sink("samples.jsonl", samples)
        sink("events.jsonl", events)
        sink("errors.jsonl", errors)
    counts["ok"] = int(counts["ok"])
    counts["cost_usd"] = round(counts["cost_usd"], 6)
    dataset_fp = _ListHash()
    dataset = _reader(wh, "datasets", {"benchmark_split": split_key})
    if dataset is not None and len(dataset):
        for d in dataset.batches(batch_rows, ["sample_id", "input", "target", "choices", "files"]):
            dataset_fp.add([[_clean(v) for v in row] for row in d.itertuples(index=False, name=None)])
    fps = {
        "dataset": dataset_fp.hexdigest() if dataset_fp.n else None,
        "prompts": _sorted_hash(prompt_fps) if prompts is not None and "prompt_fingerprint" in prompts.columns else None,
        "rollouts": _sorted_hash(rollout_fps) if rollouts is not None and "fingerprint" in rollouts.columns else None,
        "judges": sorted(judges),
    }
    return {"counts": counts, "fingerprints": fps}


def build_artifacts(split_key: str, model_key: str, wh: Any, cfg: EvalConfig | None = None,
                    metrics: pd.DataFrame | None = None, run: dict[str, Any] | None = None,
                    sink: Any = None, batch_rows: int | None = None) -> dict[str, Any]:
    """The artifact contents as Python objects (file name -> object, or list of records for .jsonl). With `sink`,
    the per-sample .jsonl records go to `sink(name, records)` batch by batch instead (`write_artifacts`)."""
    part = {"benchmark_split": split_key, "model": model_key}
    if metrics is None:
        metrics = _read_or_empty(wh, "metrics", part)
    kept: dict[str, list] = {"samples.jsonl": [], "events.jsonl": [], "errors.jsonl": []}
    streamed = stream_samples(split_key, model_key, wh, sink or (lambda name, recs: kept[name].extend(recs)),
                              batch_rows)
    counts = streamed["counts"]

    metric_rows = _records(metrics)
    run = dict(run or {})
    started, finished = run.get("started_at"), run.get("finished_at") or time.time()
    timing = {"started_at": _iso(started), "finished_at": _iso(finished),
              "duration_s": round(finished - started, 3) if started else None}
    summary = {"benchmark_split": split_key, "model": model_key, "run_id": run.get("run_id"), **timing,
               "counts": counts, "metrics": metric_rows}

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
    if fp_rows:  # [reproducibility] the partition's recorded fingerprints (evalpipe/fingerprints.py)
        fps.update({k: v for k, v in fp_rows[-1].items() if k not in ("benchmark_split", "model")})
    manifest = {
        "benchmark_split": split_key, "model": model_key, "run_id": run.get("run_id"), **timing,
        "config": {"file": str(cfg.path) if cfg is not None else None,
                   "file_fingerprint": _file_fp(cfg.path) if cfg is not None else None,
                   "benchmark_split": split_dict, "model": model_dict},
        "fingerprints": fps, "git": _git(), "packages": package_versions(),
        "python": sys.version.split()[0], "platform": platform.platform(), "env": filtered_env(),
        "counts": counts, "files": list(FILES), "dataset_header": _dataset_header(split_cfg),
        "experiment": (model_cfg.options.get("experiment") if model_cfg is not None else None),
    }
    out = {"manifest.json": manifest, "summary.json": summary, "summary.md": summary_markdown(summary)}
    if sink is None:
        out.update(kept)
    return out


def _dataset_header(split_cfg: Any) -> dict[str, Any] | None:
    if split_cfg is None:
        return None
    try:
        from evalpipe.benchmarks import adapter_for

        adapter = adapter_for(split_cfg)
        return adapter.header() if hasattr(adapter, "header") else None
    except Exception:
        return None


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


def summary_markdown(summary: dict[str, Any]) -> str:
    c = summary["counts"]
    lines = [f"# {summary['benchmark_split']} x {summary['model']}", ""]
    if summary.get("run_id"):
        lines.append(f"run `{summary['run_id']}`, finished {summary.get('finished_at')}, "
                     f"took {summary.get('duration_s')} s")
        lines.append("")
    lines += [f"{c['samples']} samples: {c['ok']} ok, {c['errors']} errors, {c['from_journal']} from the journal; "
              f"{c['input_tokens']} input / {c['output_tokens']} output tokens, ${c['cost_usd']}", ""]
    by_metric: dict[str, list[dict[str, Any]]] = {}
    for r in summary["metrics"]:
        by_metric.setdefault(r["metric"], []).append(r)
    for metric, rows in by_metric.items():
        rows = sorted(rows, key=lambda r: (r["slice"] != "all", r["slice"]))
        lines += [f"## {metric}", "", "| slice | value | n | unscored | errors | 95% CI |", "|---|---|---|---|---|---|"]
        for r in rows:
            v = "n/a" if r.get("value") is None else f"{r['value']:.4f}"
            ci = "" if r.get("ci_low") is None else f"{r['ci_low']:.3f} - {r['ci_high']:.3f}"
            lines.append(f"| {r['slice']} | {v} | {r.get('n')} | {r.get('n_unscored')} | {r.get('n_errors')} | {ci} |")
        lines.append("")
    if not by_metric:
        lines.append("_no metrics_")
    return "\n".join(lines) + "\n"


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)  # one encoder: json.dumps builds one per call
_dump = _ENCODER.encode
def _secret_fragments() -> tuple[str, ...] | None:
    """The words of `redact._SECRET_NAME` (a case-insensitive alternation of words), or None if it is not that."""
    from evalpipe import redact

    pattern = getattr(getattr(redact, "_SECRET_NAME", None), "pattern", "")
    words = pattern.removeprefix("(?i)").split("|") if pattern.startswith("(?i)") else []
    return tuple(w.lower() for w in words) if words and all(re.fullmatch(r"\w+", w) for w in words) else None


_PLAIN_KEYS = ('"input_tokens":', '"output_tokens":')  # keys of every sample record that are not secrets
_JSON_KEY = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:')  # an object key in JSON text (a value is never followed by ':')


def redacted_lines(records: list[dict[str, Any]], r: Any) -> str:
    """The JSON lines `_dump(r.redact_obj(rec))` of a batch of records. `redact_obj` walks every string of every
    record (~200 us per sample); here the batch's JSON text is checked first, and records are walked only when it
    could hold something to mask (see `_nothing_to_mask`), so the lines are the same either way."""
    lines = [_dump(rec) for rec in records]
    if not lines:
        return ""
    if not _nothing_to_mask("\n".join(lines), r):
        lines = [line if _nothing_to_mask(line, r) else _dump(r.redact_obj(rec)) for rec, line in zip(records, lines)]
    return "\n".join(lines) + "\n"


def _nothing_to_mask(text: str, r: Any) -> bool:
    """True only when `r.redact_obj` would change nothing in the records this JSON text encodes: no string can
    match (`could_match` is substring tests: a trigger or literal in a value is in the JSON text too, escaped,
    hence the second test with `\\"` unescaped) and no key is a secret-looking name. False when unsure."""
    from evalpipe import redact

    triggers = getattr(redact, "_TRIGGERS", None)
    if r.always or triggers is None or any(_ENCODER.encode(t)[1:-1] != t.replace('"', '\\"')
                                           for t in (*triggers, *r.literals)):
        return False  # user regexes, or a word the JSON text would spell otherwise: walk the records
    if r.could_match(text) or r.could_match(text.replace('\\"', '"')):
        return False
    fragments = _secret_fragments()  # what every secret-looking key name contains, as plain words
    if fragments:
        probe = text.lower()
        for known in _PLAIN_KEYS:
            probe = probe.replace(known, "")
        if not any(f in probe for f in fragments):
            return True
    return not any(redact.is_secret_name(json.loads(f'"{k}"')) for k in set(_JSON_KEY.findall(text)))


def write_artifacts(split_key: str, model_key: str, wh: Any, cfg: EvalConfig | None = None,
                    metrics: pd.DataFrame | None = None, run: dict[str, Any] | None = None,
                    out_dir: str | os.PathLike | None = None, batch_rows: int | None = None) -> Path:
    """Write the partition's artifact folder (default `<artifacts root>/<split>/<model>/<run_id>/`, with
    `<artifacts root>/<split>/<model>/latest` pointing at it); returns its path. Folders of earlier runs are kept;
    the same run id written again replaces its own folder whole. The per-sample files are written batch by batch
    (`batch_rows` samples at a time), so the partition never sits in memory whole."""
    run_id = (run or {}).get("run_id") or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    if out_dir:
        target = Path(out_dir).expanduser().resolve()
    else:  # one folder per run, kept; `latest` points at the newest (docs/reproducibility.md)
        target = partition_dir(artifacts_root(cfg), split_key, model_key) / safe_run_id(run_id)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.mkdir()
    r = get_redactor()
    try:
        lines = {name: open(tmp / name, "w", encoding="utf-8") for name in FILES if name.endswith(".jsonl")}
        try:
            def sink(name: str, records: list[dict[str, Any]]) -> None:  # one batch of per-sample records
                lines[name].write(redacted_lines(records, r))

            contents = build_artifacts(split_key, model_key, wh, cfg, metrics, run, sink=sink, batch_rows=batch_rows)
        finally:
            for fh in lines.values():
                fh.close()
        for name, obj in contents.items():
            with open(tmp / name, "w", encoding="utf-8") as fh:
                if name.endswith(".json"):
                    fh.write(json.dumps(r.redact_obj(obj), ensure_ascii=False, default=str, indent=2) + "\n")
                else:
                    fh.write(r.redact(obj))
        if target.exists():
            old = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.old")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    if not out_dir:
        point_latest(target)
    return target


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
