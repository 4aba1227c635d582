"""Partition-level tool-integration metrics, gates and the report JSON (`report_version` 1.0.0).

`summarize(results)` turns the per-sample result records (eval_result.schema.json, the `details` of each
`tool_integration` judgement) into macro/micro metrics, counts, per-tool strict-minus-lax deltas and the span-count
histogram; `evaluate_gates(summary, header)` judges the header's gates (a gate with fewer eligible items than
`min_eligible_for_gates` is "insufficient", never a pass); `build_report(...)` assembles the JSON written with the
run artifacts (evalpipe/pipeline/tool_report.py writes it for a partition); `metric_rows(...)` the rows of the `metrics` table. Definitions: docs/metrics.md.
"""
from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

REPORT_VERSION = "1.0.0"
METRIC = "tool_integration"
NAN = float("nan")

# gate name -> (summary value, eligible-count key)
GATE_SOURCES = {
    "controls_with_integration": ("controls_with_integration", "controls"),
    "coverage": ("coverage", "eligible"),
    "grounded_coverage": ("grounded_coverage", "eligible"),
    "f1_strict_macro": ("f1_strict_macro", "grounding_eligible"),
    "f1_lax_macro": ("f1_lax_macro", "grounding_eligible"),
    "f1_strict_micro": ("f1_strict_micro", "grounding_eligible"),
    "f1_lax_micro": ("f1_lax_micro", "grounding_eligible"),
    "multi_call_parity": ("multi_call_parity", "parity_eligible"),
    "json_args_valid": ("json_args_valid", "calls"),
    "error_recovery": ("error_recovery", "recovery_eligible"),
    "negative_control_hallucination_rate": ("negative_control_hallucination_rate", "negative_controls"),
    "locale_probe_accuracy": ("locale_probe_accuracy", "locale_probes"),
    "privacy_ok_rate": ("privacy_ok_rate", "privacy_eligible"),
    "fixture_misses": ("fixture_misses", "calls"),
}
# performance budgets: judged in the report only (the run's wall time and the rollouts' latencies are known there,
# not when a sample is judged), never "insufficient": a budget holds for any number of items
BUDGET_GATES = ("wall_time_s", "latency_s_p50", "latency_s_p95", "latency_s_mean", "latency_s_max")
KNOWN_GATES = (*GATE_SOURCES, *BUDGET_GATES)


def _rate(num: float, den: float) -> float:
    return num / den if den else NAN


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else NAN


def _f1(p: float, r: float) -> float:
    if math.isnan(p) or math.isnan(r):
        return NAN
    return 2 * p * r / (p + r) if p + r else 0.0


def summarize(results: list[dict[str, Any]], span_cap: int = 8) -> dict[str, Any]:
    """Macro (mean over eligible items) and micro (pooled counts) metrics, counts, deltas and histogram."""
    R = [r for r in results if r]
    kinds = Counter(r["kind"] for r in R)
    integ = [r for r in R if r["eligible"]["coverage"]]
    ground = [r for r in R if r["eligible"]["grounding"]]
    out: dict[str, Any] = {"items": len(R)}
    out["coverage"] = _rate(sum(r["flags"]["integrated"] for r in integ), len(integ))
    out["grounded_coverage"] = _rate(sum(r["flags"]["grounded"] for r in integ), len(integ))
    for mode in ("strict", "lax"):
        g = [r["grounding"][mode] for r in ground]
        for k in ("precision", "recall", "f1"):
            out[f"{k}_{mode}_macro"] = _mean([x[k] for x in g])
        p = _rate(sum(x["matched_spans"] for x in g), sum(x["spans"] for x in g)) if g else NAN
        rr = _rate(sum(x["found_evidence"] for x in g), sum(x["evidence"] for x in [r["grounding"] for r in ground]))
        p = 0.0 if g and math.isnan(p) else p
        out[f"precision_{mode}_micro"], out[f"recall_{mode}_micro"] = p, rr
        out[f"f1_{mode}_micro"] = _f1(p, rr)
    par = [r for r in R if r["eligible"]["parity"]]
    out["multi_call_parity"] = _rate(sum(bool(r["calls"]["parity"]) for r in par), len(par))
    calls = sum(r["calls"]["observed"] for r in R)
    out["json_args_valid"] = _rate(sum(r["calls"]["valid_json"] for r in R), calls)
    rec = [r for r in R if r["eligible"]["recovery"]]
    out["error_recovery"] = _rate(sum(bool(r["flags"]["recovered"]) for r in rec), len(rec))
    controls = [r for r in R if r["kind"] == "control"]
    out["controls_with_integration"] = float(sum(bool(r["flags"]["contaminated"]) for r in controls))
    out["control_contamination_rate"] = _rate(out["controls_with_integration"], len(controls))
    neg = [r for r in R if r["kind"] == "negative_control"]
    out["negative_control_hallucination_rate"] = _rate(sum(bool(r["flags"]["hallucinated"]) for r in neg), len(neg))
    loc = [r for r in R if r["eligible"]["locale"]]
    out["locale_probe_accuracy"] = _rate(sum(bool(r["flags"]["locale_ok"]) for r in loc), len(loc))
    priv = [r for r in R if r["eligible"]["privacy"]]
    out["privacy_ok_rate"] = _rate(sum(bool(r["flags"]["privacy_ok"]) for r in priv), len(priv))
    out["span_cap_exceeded"] = float(sum(r["spans"]["over_cap"] for r in R))
    out["fixture_misses"] = float(sum(int(r["calls"].get("fixture_misses") or 0) for r in R))
    out["item_ok_rate"] = _rate(sum(r["ok"] for r in R), len(R))

    per_tool: dict[str, dict[str, float]] = {}
    for r in R:
        for tool, t in (r["calls"].get("per_tool") or {}).items():
            acc = per_tool.setdefault(tool, {"results": 0, "strict": 0, "lax": 0})
            for k in acc:
                acc[k] += t[k]
    deltas = {tool: {**t, "strict_rate": _rate(t["strict"], t["results"]), "lax_rate": _rate(t["lax"], t["results"]),
                     "delta": _rate(t["strict"] - t["lax"], t["results"])} for tool, t in sorted(per_tool.items())}
    hist = Counter(min(r["spans"]["strict"], span_cap) for r in R)
    histogram = {(f"{k}+" if k == span_cap else str(k)): hist.get(k, 0) for k in range(span_cap + 1)}
    counts = {"items": len(R), "eligible": len(integ), "grounding_eligible": len(ground), "controls": len(controls),
              "negative_controls": len(neg), "locale_probes": len(loc), "parity_eligible": len(par),
              "recovery_eligible": len(rec), "privacy_eligible": len(priv), "calls": calls,
              "by_kind": dict(sorted(kinds.items()))}
    return {"metrics": out, "counts": counts, "per_tool": deltas, "span_histogram": histogram}


def evaluate_gates(summary: dict[str, Any], header: dict[str, Any],
                   performance: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """[{gate, status: pass|fail|insufficient, value, min/max, eligible, min_eligible, blocking}] for every gate of the
    header (defaults: controls_with_integration max 0 and coverage min 0.95, both blocking; fixture_misses max 0, not
    blocking). Budget gates (BUDGET_GATES) are judged only when `performance` is given (the report), else left out."""
    min_eligible = int(header.get("min_eligible_for_gates") or 1)
    out = []
    for name, spec in (header.get("gates") or {}).items():
        row = {"gate": name, "min_eligible": min_eligible, "blocking": bool(spec.get("blocking", False)),
               "min": spec.get("min"), "max": spec.get("max")}
        if name in BUDGET_GATES:
            if performance is None:
                continue
            value = performance.get(name)
            row.update(value=value, eligible=int(summary["counts"].get("items", 0)))
            if value is None:
                row["status"] = "unknown"
            else:
                row["status"] = "pass" if _within(value, spec) else "fail"
            out.append(row)
            continue
        key, count_key = GATE_SOURCES.get(name, (name, "items"))
        value = summary["metrics"].get(key, NAN)
        eligible = int(summary["counts"].get(count_key, 0))
        row.update(value=None if value is None or math.isnan(value) else value, eligible=eligible)
        if key not in summary["metrics"]:
            row["status"] = "unknown"
        elif eligible < min_eligible or row["value"] is None:
            row["status"] = "insufficient"
        else:
            row["status"] = "pass" if _within(value, spec) else "fail"
        out.append(row)
    return out


def _within(value: float, spec: dict[str, Any]) -> bool:
    return (spec.get("min") is None or value >= spec["min"]) and (spec.get("max") is None or value <= spec["max"])


def gates_ok(gates: list[dict[str, Any]]) -> bool:
    """The report's verdict on its gates: no gate failed and every blocking gate passed (an insufficient or unknown
    blocking gate is not ok; a non-blocking one only warns)."""
    return all(g["status"] != "fail" and (g["status"] == "pass" or not g["blocking"]) for g in gates)


def performance_of(latencies: list[float], wall_time_s: float | None) -> dict[str, Any]:
    """The report's `performance`: wall time (run start to report) and per-sample rollout latency p50/p95/mean/max
    (numpy's linear percentiles); None where nothing was measured."""
    import numpy as np

    lat = np.asarray([x for x in latencies if x is not None and not math.isnan(x)], dtype=float)
    stats = ({"latency_s_p50": float(np.percentile(lat, 50)), "latency_s_p95": float(np.percentile(lat, 95)),
              "latency_s_mean": float(lat.mean()), "latency_s_max": float(lat.max())} if len(lat) else
             dict.fromkeys(("latency_s_p50", "latency_s_p95", "latency_s_mean", "latency_s_max")))
    return {"wall_time_s": wall_time_s, **stats, "samples_timed": int(len(lat))}


def metric_rows(metric: str, summary: dict[str, Any], gates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the `metrics` table: `<metric>_<name>` (slice all), per-tool deltas (slice `tool=<name>`), the span
    histogram (slice `spans=<k>`) and the gates (slice `gate=<name>`: 1 pass, 0 fail, null insufficient)."""
    c = summary["counts"]
    n_of = {"coverage": c["eligible"], "grounded_coverage": c["eligible"], "multi_call_parity": c["parity_eligible"],
            "json_args_valid": c["calls"], "error_recovery": c["recovery_eligible"],
            "controls_with_integration": c["controls"], "control_contamination_rate": c["controls"],
            "negative_control_hallucination_rate": c["negative_controls"],
            "locale_probe_accuracy": c["locale_probes"], "privacy_ok_rate": c["privacy_eligible"],
            "fixture_misses": c["calls"]}

    def row(name: str, slice_name: str, value: Any, n: int) -> dict[str, Any]:
        v = NAN if value is None else float(value)
        return {"metric": name, "slice": slice_name, "value": v, "n": int(n), "n_unscored": 0, "n_errors": 0,
                "stderr": NAN, "ci_low": NAN, "ci_high": NAN}

    rows = []
    for k, v in summary["metrics"].items():
        if k in ("items", "item_ok_rate"):
            continue
        rows.append(row(f"{metric}_{k}", "all", v, n_of.get(k, c["grounding_eligible"] if "_macro" in k or "_micro" in k
                                                              else c["items"])))
    for tool, t in summary["per_tool"].items():
        rows.append(row(f"{metric}_strict_minus_lax", f"tool={tool}", t["delta"], t["results"]))
    for k, count in summary["span_histogram"].items():
        rows.append(row(f"{metric}_span_histogram", f"spans={k}", count, c["items"]))
    for g in gates:
        v = {"pass": 1.0, "fail": 0.0}.get(g["status"])
        rows.append(row(f"{metric}_gate", f"gate={g['gate']}", v, g["eligible"]))
    return rows


def build_report(split: Any, model: Any, judgements: pd.DataFrame, wall_time_s: float | None = None,
                 fingerprints: dict[str, Any] | None = None,
                 header_settings: dict[str, Any] | None = None,
                 latencies: list[float] | None = None) -> dict[str, Any] | None:
    """The report of one partition, or None when it has no tool_integration judgements. `header_settings`: the
    dataset header over the defaults (the tool_integration adapter's `header_settings()`; {}: none).
    `fingerprints`: the partition's row of the `fingerprints` table; its `params` (the decoding params the run
    used, overrides included) fill `decoding` and `seed`, else the model's configured params."""
    j = judgements[judgements["metric"] == METRIC] if len(judgements) else judgements
    if not len(j):
        return None
    results = []
    for d in j["details"]:
        try:
            results.append(json.loads(d) if isinstance(d, str) and d else {})
        except ValueError:
            results.append({})
    header = dict(header_settings or {})
    cap = int(header.get("integration_span_cap") or 8)
    summary = summarize([r for r in results if r.get("result_version")], cap)
    performance = performance_of(list(latencies or []), wall_time_s)
    gates = evaluate_gates(summary, header, performance)
    fp = fingerprints or {}
    params = _run_params(fp.get("params"))
    if params is None:
        params = dict(getattr(model, "params", {}) or {})
    return {
        "report_version": REPORT_VERSION,
        "benchmark_split": split.key, "model": getattr(model, "key", str(model)),
        "dataset_sha256": fp.get("dataset_sha256") or header.get("file_sha256"),
        "tool_registry_sha256": fp.get("tool_registry_sha256") or _tool_registry_sha(split),
        "tokenizer_fingerprint": fp.get("tokenizer_fingerprint") or header.get("tokenizer_fingerprint"),
        "runner_fingerprint": fp.get("runner_fingerprint"), "model_fingerprint": fp.get("model_fingerprint"),
        "decoding": {k: v for k, v in params.items() if k != "seed"}, "seed": params.get("seed"),
        "integration_span_cap": cap, "min_eligible_for_gates": int(header.get("min_eligible_for_gates") or 1),
        "fail_on_fingerprint_mismatch": bool(split.options.get("fail_on_fingerprint_mismatch",
                                                               header.get("fail_on_fingerprint_mismatch", False))),
        "lax_threshold": header.get("lax_threshold"),
        "macro": {k: v for k, v in summary["metrics"].items() if k.endswith("_macro")},
        "micro": {k: v for k, v in summary["metrics"].items() if k.endswith("_micro")},
        "metrics": {k: v for k, v in summary["metrics"].items() if not k.endswith(("_macro", "_micro"))},
        "gates_ok": gates_ok(gates), "gates_failed": [g["gate"] for g in gates if g["status"] == "fail"],
        "gates": gates, "counts": summary["counts"], "per_tool_deltas": summary["per_tool"],
        "span_histogram": summary["span_histogram"], "wall_time_s": wall_time_s, "performance": performance,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _run_params(value: Any) -> dict[str, Any] | None:
    """The `params` recorded with the partition's fingerprints (JSON text), or None when none were recorded."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str) and value:
        try:
            v = json.loads(value)
        except ValueError:
            return None
        return v if isinstance(v, dict) else None
    return None


def _tool_registry_sha(split: Any) -> str | None:
    try:
        from evalpipe.tools import tool_registry_sha256

        return tool_registry_sha256(split)
    except Exception:
        return None


def write_report(report: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tool_integration_report.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str, allow_nan=False
                              ) if _finite(report) else json.dumps(_clean(report), indent=2, ensure_ascii=False,
                                                                   default=str))
    tmp.replace(path)
    return path


def _finite(obj: Any) -> bool:
    try:
        json.dumps(obj, allow_nan=False, default=str)
        return True
    except ValueError:
        return False


def _clean(obj: Any) -> Any:
    """NaN -> null, so the report is strict JSON."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj
