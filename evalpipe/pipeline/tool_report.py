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
    rep["ci_gates"] = partition_ci_gates(judged_results(judgements))  # reported, not part of gates_ok
    write_results(results_lines(judgements, rollouts, fps, rep), folder)
    return write_report(rep, folder)


# ---- CI gates (the harness's CI hooks; docs/tools.md "CI gates") ---------------------------------------------------
# Each returns {gate, status: pass|fail|warn|insufficient, value, limit, detail}; `make ci-*` exits 1 on "fail".
PARITY_MAX_DELTA = 0.03      # runner parity: |macro F1 (OpenAI-compatible) - macro F1 (local)|
LOCALE_MAX_DELTA = 0.05      # locale probes: strict-lax delta per locale
LOCALES = ("es", "de", "fr")
TEACHER_HEAVY_MIN_RESULTS = 2  # an item is teacher-heavy when the model integrates >= this many tool results
TEACHER_HEAVY_MIN_F1 = 0.7   # when the dataset header has no f1_strict_macro gate


def judged_results(judgements: pd.DataFrame) -> list[dict[str, Any]]:
    """The per-sample result records (the `details` of the tool_integration judgements)."""
    j = judgements[judgements["metric"] == METRIC] if len(judgements) else judgements
    recs = [_loads(d, {}) for d in (j["details"] if len(j) else [])]
    return [r for r in recs if isinstance(r, dict) and r.get("result_version")]


def runner_parity_gate(a: dict[str, Any], b: dict[str, Any], max_delta: float = PARITY_MAX_DELTA) -> dict[str, Any]:
    """Two reports of one dataset (the OpenAI-compatible runner's, the local runner's): both macro F1s (strict and
    lax) within `max_delta`. The value is the larger of the two deltas."""
    deltas = {}
    for k in ("f1_strict_macro", "f1_lax_macro"):
        x, y = (a.get("macro") or {}).get(k), (b.get("macro") or {}).get(k)
        if any(v is None or (isinstance(v, float) and math.isnan(v)) for v in (x, y)):
            return {"gate": "runner_parity", "status": "insufficient", "value": None, "limit": max_delta,
                    "detail": f"{k} missing from a report"}
        deltas[k] = abs(float(x) - float(y))
    worst = max(deltas.values())
    return {"gate": "runner_parity", "status": "pass" if worst <= max_delta + 1e-12 else "fail", "value": worst,
            "limit": max_delta, "detail": {"models": [a.get("model"), b.get("model")], "deltas": deltas}}


def locale_gate(results: list[dict[str, Any]], max_delta: float = LOCALE_MAX_DELTA,
                locales: tuple[str, ...] = LOCALES) -> dict[str, Any]:
    """The locale-probe shard: per locale, the strict-minus-lax delta of the tool results the answers integrate
    (the report's per-tool delta, pooled over that locale's probes), |delta| <= max_delta for every locale."""
    per: dict[str, dict[str, Any]] = {}
    for loc in locales:
        probes = [r for r in results if r.get("kind") == "locale_probe" and r.get("locale") == loc]
        n = {"results": 0, "strict": 0, "lax": 0}
        for r in probes:
            for t in ((r.get("calls") or {}).get("per_tool") or {}).values():
                for k in n:
                    n[k] += int(t.get(k) or 0)
        delta = (n["strict"] - n["lax"]) / n["results"] if n["results"] else None
        per[loc] = {"probes": len(probes), **n, "delta": delta}
    judged = [v["delta"] for v in per.values() if v["delta"] is not None]
    if len(judged) < len(locales):
        missing = [loc for loc, v in per.items() if v["delta"] is None]
        return {"gate": "locale_strict_lax", "status": "insufficient", "value": max(map(abs, judged), default=None),
                "limit": max_delta, "detail": {"per_locale": per, "without_tool_results": missing}}
    worst = max(abs(d) for d in judged)
    return {"gate": "locale_strict_lax", "status": "pass" if worst <= max_delta + 1e-12 else "fail", "value": worst,
            "limit": max_delta, "detail": {"per_locale": per}}


def teacher_heavy_gate(results: list[dict[str, Any]], min_f1: float = TEACHER_HEAVY_MIN_F1,
                       min_results: int = TEACHER_HEAVY_MIN_RESULTS) -> dict[str, Any]:
    """The teacher-heavy slice: grounding items whose answer draws on >= `min_results` tool results. Fails when the
    slice's strict macro F1 is below `min_f1`; warns (status "warn") when an item of the slice exceeds the span cap."""
    heavy = [r for r in results if (r.get("eligible") or {}).get("grounding")
             and sum(int(t.get("results") or 0) for t in ((r.get("calls") or {}).get("per_tool") or {}).values())
             >= min_results]
    over_cap = [r.get("id") for r in heavy if (r.get("spans") or {}).get("over_cap")]
    detail = {"items": len(heavy), "ids": [r.get("id") for r in heavy], "span_cap_exceeded": over_cap,
              "min_results": min_results}
    if not heavy:
        return {"gate": "teacher_heavy", "status": "insufficient", "value": None, "limit": min_f1, "detail": detail}
    f1 = sum(float(r["grounding"]["strict"]["f1"]) for r in heavy) / len(heavy)  # macro: the mean over items
    status = "fail" if f1 < min_f1 else ("warn" if over_cap else "pass")
    return {"gate": "teacher_heavy", "status": status, "value": f1, "limit": min_f1, "detail": detail}


def header_min_f1(results: list[dict[str, Any]]) -> float:
    """The dataset header's f1_strict_macro gate minimum (the threshold the teacher-heavy slice is held to)."""
    gates = ((results[0].get("settings") or {}).get("gates") or {}) if results else {}
    spec = gates.get("f1_strict_macro") or {}
    return float(spec["min"]) if spec.get("min") is not None else TEACHER_HEAVY_MIN_F1


def partition_ci_gates(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The CI gates one partition can judge alone (runner parity needs two): for the report and the asset check."""
    return [locale_gate(results), teacher_heavy_gate(results, header_min_f1(results))]
