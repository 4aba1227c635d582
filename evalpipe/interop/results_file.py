"""One portable results file per run (`evalpipe run --output-path FILE`), like lm-evaluation-harness's
`--output_path`: everything needed to read, cite and reproduce the run's numbers, in one JSON file, plus the
per-sample records beside it. The fields are documented in docs/interop.md "One portable results file".

Everything written passes through the redactor: the config file's secrets, secret-looking keys and the
`--redact-pattern`s are masked as in the run artifacts.
"""
from __future__ import annotations

import json
import platform
import re
import sys
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalpipe.core.file_caps import CONFIG_CAP, file_sha256

FORMAT, FORMAT_VERSION = "evalpipe.results", 1
METRIC_FIELDS = ("value", "stderr", "ci_low", "ci_high", "n", "n_unscored", "n_errors", "higher_is_better", "kind")
FINGERPRINT_FIELDS = ("dataset_sha256", "tool_registry_sha256", "tokenizer_fingerprint", "prompt_wrapper_sha256",
                      "runner_fingerprint", "model_fingerprint", "recorded_at", "params")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _clean(v: Any) -> Any:
    """NaN -> None, numpy scalars -> Python (the file is plain JSON)."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)):
        v = v.item()
    return None if isinstance(v, float) and v != v else v


def _rows(wh: Any, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    try:
        df = wh.query(sql, params)
    except Exception:  # the table does not exist yet (nothing of that kind was ever written)
        return []
    return [{k: _clean(v) for k, v in r.items()} for r in df.to_dict("records")]


def _metrics(wh: Any, split: str, model: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(metric -> fields on slice `all`, slice -> metric -> fields for the other slices)."""
    rows = _rows(wh, "SELECT metric, slice, " + ", ".join(METRIC_FIELDS) + " FROM metrics WHERE benchmark_split = ? "
                 "AND model = ? ORDER BY slice, metric", [split, model])
    overall: dict[str, Any] = {}
    slices: dict[str, dict[str, Any]] = {}
    for r in rows:
        fields = {k: r[k] for k in METRIC_FIELDS}
        if r["slice"] == "all":
            overall[r["metric"]] = fields
        else:
            slices.setdefault(r["slice"], {})[r["metric"]] = fields
    return overall, slices


def _counts(wh: Any, split: str, model: str) -> dict[str, Any]:
    rows = _rows(wh, "SELECT count(*) AS samples, count(*) FILTER (WHERE status = 'ok') AS ok, "
                 "count(*) FILTER (WHERE status <> 'ok') AS errors, sum(input_tokens) AS input_tokens, "
                 "sum(output_tokens) AS output_tokens, sum(cost) AS cost_usd FROM rollouts "
                 "WHERE benchmark_split = ? AND model = ?", [split, model])
    c = rows[0] if rows else {}
    return {"samples": int(c.get("samples") or 0), "ok": int(c.get("ok") or 0), "errors": int(c.get("errors") or 0),
            "input_tokens": int(c.get("input_tokens") or 0), "output_tokens": int(c.get("output_tokens") or 0),
            "cost_usd": round(float(c.get("cost_usd") or 0.0), 6)}


def _judge_usage(by_slice: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """[spend] The judges' calls, tokens, cost and mean latency (from the `usage` slice); None without judges."""
    from evalpipe.store.artifacts import judge_usage

    return judge_usage([{"metric": m, "slice": "usage", "value": f.get("value")}
                        for m, f in (by_slice.get("usage") or {}).items()])


def _fingerprints(wh: Any, split: str, model: str) -> dict[str, Any]:
    rows = _rows(wh, "SELECT " + ", ".join(FINGERPRINT_FIELDS) + " FROM fingerprints WHERE benchmark_split = ? "
                 "AND model = ? ORDER BY recorded_at", [split, model])
    if not rows:
        return {}
    fp = dict(rows[-1])  # the latest record of the partition
    if isinstance(fp.get("params"), str):
        try:
            fp["params"] = json.loads(fp["params"])
        except ValueError:
            pass
    return fp


def versions(extra: tuple[str, ...] = ()) -> dict[str, Any]:
    from importlib import metadata

    from evalpipe.store.artifacts import package_versions

    out = {"python": sys.version.split()[0], "platform": platform.platform(), **package_versions()}
    for dist in extra:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def _config(cfg: Any, splits: list[str], models: list[str]) -> dict[str, Any]:
    """The resolved config of the run's splits and models (as the run used them, defaults filled in)."""
    def split_dict(key: str) -> Any:
        s = cfg.splits.get(key)
        if s is None:
            return None
        d = asdict(s)
        d["base_dir"] = str(s.base_dir)
        return d

    def model_dict(key: str) -> Any:
        try:
            return asdict(cfg.model(key))
        except Exception:  # an ad-hoc or since-removed model: its key is all there is
            return None

    path = getattr(cfg, "path", None)
    digest = file_sha256(path, CONFIG_CAP) if path and Path(path).is_file() else None
    return {"file": str(path) if path else None, "file_sha256": digest,
            "benchmark_splits": {k: split_dict(k) for k in splits}, "models": {k: model_dict(k) for k in models}}


def samples_name(split: str, model: str) -> str:
    return f"{_UNSAFE.sub('_', split)}__{_UNSAFE.sub('_', model)}.jsonl"


def write_results_file(path: str | Path, partitions: list[Any], wh: Any, cfg: Any, run: dict[str, Any] | None = None,
                       samples: bool = True) -> Path:
    """Write the results file of a run at `path` (and, with `samples`, each finished partition's per-sample records
    as `<path stem>_samples/<split>__<model>.jsonl`). `partitions`: objects with `benchmark_split`, `model`,
    `success`, `error`, `run_id` (eval_assets/launch.py PartitionResult). Returns the file's path."""
    from evalpipe.core.redact import redact_obj
    from evalpipe.store.artifacts import stream_samples

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    samples_dir = path.with_name(path.stem + "_samples")
    entries = []
    for p in partitions:
        split, model = p.benchmark_split, p.model
        overall, by_slice = _metrics(wh, split, model) if p.success else ({}, {})
        where: dict[str, Any] = {
            "warehouse": str(wh.duckdb_path),
            "query": f"SELECT * FROM judgements WHERE benchmark_split = '{split}' AND model = '{model}'",
        }
        if samples and p.success:
            samples_dir.mkdir(parents=True, exist_ok=True)
            target = samples_dir / samples_name(split, model)
            with open(target, "w", encoding="utf-8") as fh:  # the run artifacts' samples.jsonl lines, redacted
                stream_samples(split, model, wh, lambda name, text: fh.write(text) if name == "samples.jsonl" else None)
            where["samples_jsonl"] = str(target)
        entries.append({
            "benchmark_split": split, "model": model, "status": "ok" if p.success else "failed",
            "error": getattr(p, "error", None), "dagster_run_id": getattr(p, "run_id", None),
            "metrics": overall, "slices": by_slice, "counts": _counts(wh, split, model),
            "judge_usage": _judge_usage(by_slice),
            "fingerprints": _fingerprints(wh, split, model), "samples": where,
        })
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "run": dict(run or {}),
        "partitions": entries,
        "config": _config(cfg, sorted({p.benchmark_split for p in partitions}), sorted({p.model for p in partitions})),
        "versions": versions(),
    }
    path.write_text(json.dumps(redact_obj(doc), indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    return path
