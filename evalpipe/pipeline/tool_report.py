"""A partition's tool-integration report (`tool_integration_report.json` in its run folder) and its results lines
(`tool_integration_results.jsonl`, one line per sample: the result record, the model's output, its tool trace and
the run's fingerprints): the glue between the config, the warehouse, the split's adapter (its header settings) and
evalpipe/tooleval/report.py, which builds the report from them. Here, above the domain packages, because it needs
both the adapters and the tool evaluation.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.benchmarks import adapter_for
from evalpipe.core.redact import redact_obj
from evalpipe.pipeline.fingerprints import NAMES
from evalpipe.tooleval.report import METRIC, build_report, write_report

RESULTS_FILE = "tool_integration_results.jsonl"
ROLLOUT_COLUMNS = ["sample_id", "prediction", "tool_trace", "latency_s", "fingerprint"]


def _fingerprints(wh: Any, split_key: str, model_key: str) -> dict[str, Any]:
    try:
        df = wh.query(f"select * from fingerprints where benchmark_split = '{split_key}' and model = '{model_key}'")
    except Exception:  # no fingerprints table yet
        return {}
    if df is None or not len(df):
        return {}
    row = df.sort_values("recorded_at").iloc[-1].to_dict() if "recorded_at" in df else df.iloc[-1].to_dict()
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def _rollouts(wh: Any, split_key: str, model_key: str) -> pd.DataFrame:
    try:
        df = wh.read("rollouts", {"benchmark_split": split_key, "model": model_key})
    except Exception:  # no rollouts on record (a report built from judgements alone)
        return pd.DataFrame(columns=ROLLOUT_COLUMNS)
    return df[[c for c in ROLLOUT_COLUMNS if c in df.columns]]


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _loads(text: Any, default: Any) -> Any:
    if not isinstance(text, str) or not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def results_lines(judgements: pd.DataFrame, rollouts: pd.DataFrame, fps: dict[str, Any],
                  report: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per judged sample, sorted by sample_id: `id`, `model_output`, `tool_trace` (name, arguments,
    result, error per call), `scores` (the eval_result record), `score`, and `fingerprints`: the run's six, the
    sample's rollout fingerprint, its judge fingerprint, the decoding params and seed."""
    run_fps = {n: fps.get(n) for n in NAMES}
    run = {"decoding": report.get("decoding"), "seed": report.get("seed")}
    by_sample = {r["sample_id"]: r for r in rollouts.to_dict("records")} if len(rollouts) else {}
    out = []
    j = judgements[judgements["metric"] == METRIC]
    for r in sorted(j.to_dict("records"), key=lambda x: str(x["sample_id"])):
        roll = by_sample.get(r["sample_id"], {})
        trace = [{k: c.get(k) for k in ("name", "arguments", "result", "error")}
                 for c in _loads(roll.get("tool_trace"), []) if isinstance(c, dict)]
        out.append({
            "id": r["sample_id"], "model_output": _plain(roll.get("prediction")), "tool_trace": trace,
            "score": _plain(r.get("score")), "scores": _loads(r.get("details"), None),
            "fingerprints": {**run_fps, "rollout_fingerprint": _plain(roll.get("fingerprint")),
                             "judge_fingerprint": _plain(r.get("judge_fingerprint")), **run},
        })
    return out


def write_results(lines: list[dict[str, Any]], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RESULTS_FILE
    tmp = path.with_suffix(".jsonl.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for line in lines:  # masked like every other write path (secrets, PII when on)
            f.write(json.dumps(redact_obj(line), ensure_ascii=False, default=str) + "\n")
    tmp.replace(path)
    return path


def write_partition_report(cfg: Any, split_key: str, model_key: str, wh: Any, judgements: pd.DataFrame,
                           started_at: float | None, folder: Path) -> Path | None:
    """Build and write `tool_integration_report.json` and `tool_integration_results.jsonl` into the partition's
    artifact folder; None when the partition has no tool_integration judgements. Wall time: from the run's start to
    now; latencies: the rollouts'."""
    if not len(judgements) or not (judgements["metric"] == METRIC).any():
        return None
    split, model = cfg.split(split_key), cfg.model(model_key)
    wall = (time.time() - started_at) if started_at else None
    adapter = adapter_for(split)
    header = adapter.header_settings() if hasattr(adapter, "header_settings") else {}
    fps = _fingerprints(wh, split_key, model_key)
    rollouts = _rollouts(wh, split_key, model_key)
    latencies = [float(x) for x in pd.to_numeric(rollouts["latency_s"], errors="coerce").dropna()] \
        if "latency_s" in rollouts else []
    rep = build_report(split, model, judgements, wall, fps, header, latencies)
    if rep is None:
        return None
    write_results(results_lines(judgements, rollouts, fps, rep), folder)
    return write_report(rep, folder)
