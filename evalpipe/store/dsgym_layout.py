"""DSGym's output layout for finished partitions (`evalpipe run --output-dir DIR`, `Evaluator.evaluate(...,
save_results=True)`), as DSGym's evaluation README describes it:

    DIR/evaluation_results.json   {"sample_results": [...], "aggregated_metrics": {...}, "metadata": {...}}
    DIR/metrics_summary.json      the aggregated metrics only
    DIR/sample_predictions/<NNNNN>_<sample_id>.json   one sample's result each

A sample result: `sample_index`, `sample_id`, `query` (the prompt's last user message), `prediction`,
`ground_truth`, `trajectory` (the agent's steps, when it has some), `metric_results` (metric -> score; None when
unscored), `execution_time` (seconds), `success` (the rollout finished), and `error` when it did not.
`aggregated_metrics`: per metric `mean_score` and `total_samples` (DSGym's README), with our `n_unscored`,
`n_errors`, `ci_low`, `ci_high` beside them. With several partitions each gets its own folder,
`DIR/<benchmark>/<split>/<model>/` (DSGym writes one dataset x model per folder).

The records come from `artifacts.stream_samples`, so what is masked in the run artifacts (secrets, PII) is masked
here too.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from evalpipe.store.artifacts import partition_dir, stream_samples

RESULTS, SUMMARY, PREDICTIONS = "evaluation_results.json", "metrics_summary.json", "sample_predictions"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _query(prompt: Any) -> Any:
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            return users[-1]
    return prompt


def sample_result(record: dict[str, Any]) -> dict[str, Any]:
    """One samples.jsonl record as a DSGym sample result."""
    usage = record.get("usage") or {}
    result = {
        "sample_index": record.get("sample_index"),
        "sample_id": record.get("sample_id"),
        "query": _query(record.get("prompt")),
        "prediction": record.get("prediction"),
        "ground_truth": record.get("target"),
        "trajectory": record.get("trajectory") or [],
        "metric_results": {m: s.get("score") for m, s in (record.get("scores") or {}).items()},
        "execution_time": usage.get("latency_s"),
        "success": record.get("status") == "ok",
    }
    if record.get("error"):
        result["error"] = record["error"]
    return result


def _aggregates(wh: Any, split_key: str, model_key: str) -> dict[str, dict[str, Any]]:
    rows = wh.query("SELECT metric, value, n, n_unscored, n_errors, ci_low, ci_high FROM metrics "
                    "WHERE benchmark_split = ? AND model = ? AND slice = 'all' ORDER BY metric",
                    [split_key, model_key])
    out = {}
    for r in rows.to_dict("records"):
        clean = {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}  # NaN -> null
        out[clean.pop("metric")] = {"mean_score": clean.pop("value"), "total_samples": clean.pop("n"), **clean}
    return out


def evaluation_results(split_key: str, model_key: str, wh: Any) -> dict[str, Any]:
    """DSGym's results dict of one partition: `sample_results`, `aggregated_metrics`, `metadata` (what
    `evaluation_results.json` holds and `Results["aggregated_metrics"]` reads)."""
    lines: list[str] = []
    stream_samples(split_key, model_key, wh, lambda name, text: lines.extend(
        text.splitlines()) if name == "samples.jsonl" else None)
    results = [sample_result(json.loads(line)) for line in lines if line.strip()]
    results.sort(key=lambda r: (r["sample_index"] is None, r["sample_index"] or 0, str(r["sample_id"])))
    from evalpipe.core.run_marks import is_limited

    # DSGym's `model_name` is the name the user gave; a try's key (`@limit<N>`, `@ids-`, `@subset-`) says it is one
    metadata = {"dataset_name": split_key, "model_name": model_key.split("@", 1)[0] if is_limited(model_key)
                else model_key, "model_key": model_key, "is_try": is_limited(model_key),
                "total_execution_time": sum(r["execution_time"] or 0.0 for r in results)}
    return {"sample_results": results, "aggregated_metrics": _aggregates(wh, split_key, model_key),
            "metadata": metadata}


def write_partition(split_key: str, model_key: str, wh: Any, folder: Path) -> Path:
    body = evaluation_results(split_key, model_key, wh)
    results, aggregated, metadata = body["sample_results"], body["aggregated_metrics"], body["metadata"]
    predictions = folder / PREDICTIONS
    predictions.mkdir(parents=True, exist_ok=True)
    for stale in predictions.glob("*.json"):  # an earlier write's samples must not linger beside these
        stale.unlink()
    for i, r in enumerate(results):
        name = f"{i:05d}_{_UNSAFE.sub('_', str(r['sample_id']))[:80]}.json"
        (predictions / name).write_text(json.dumps(r, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    (folder / RESULTS).write_text(json.dumps(body, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    (folder / SUMMARY).write_text(json.dumps({"aggregated_metrics": aggregated, "metadata": metadata}, indent=2,
                                             ensure_ascii=False, default=str), encoding="utf-8")
    return folder


def write_dsgym_layout(partitions: list[tuple[str, str]], wh: Any, out_dir: str | Path) -> list[Path]:
    """DSGym's files for each (benchmark_split, model) in `out_dir` (one partition) or a folder per partition under
    it; returns the folders written."""
    root = Path(out_dir).expanduser()
    if len(partitions) == 1:
        return [write_partition(*partitions[0], wh, root)]
    return [write_partition(s, m, wh, partition_dir(root, s, m)) for s, m in partitions]
