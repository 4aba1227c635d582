"""A partition of an `adapter: lm_eval` split as lm-evaluation-harness writes its results (`--output_path` with
`--log_samples`): `results_<date>.json` (per task `<metric>,<filter>` values and stderrs, `higher_is_better`,
`configs`, `versions`, `n-shot`, `n-samples`) and `samples_<task>_<date>.jsonl` (doc_id, doc, target, arguments,
resps, filtered_resps, filter, metrics, hashes and the metric values), both written by lm-eval's own
EvaluationTracker under `<out>/<model>/`. docs/interop.md "lm-evaluation-harness tasks and results".
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError, WarehouseError
from evalpipe.metrics.lm_eval_scoring import load_task, responses, score_doc, task_aggregates


def _loads(value: Any, default: Any) -> Any:
    if isinstance(value, str) and value:
        return json.loads(value)
    return default


def lm_eval_samples(split_key: str, model_key: str, wh: Any) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """(the task, its samples as lm-eval logs them, the settings the requests were built with) from the
    partition's prompts, rollouts and `lm_eval` judgements."""
    from lm_eval.utils import handle_non_serializable, hash_string

    part = {"benchmark_split": split_key, "model": model_key}
    try:
        prompts = wh.read("prompts", part, columns=["sample_id", "metadata"])
        rollouts = wh.read("rollouts", part, columns=["sample_id", "status", "raw_output"])
        judgements = wh.read("judgements", part, columns=["sample_id", "metric", "details"])
    except WarehouseError:
        raise WarehouseError(f"no prompts, rollouts and judgements for {split_key} x {model_key}; run the partition "
                             f"first (evalpipe run)") from None
    details = {sid: _loads(d, {}) for sid, m, d in judgements[["sample_id", "metric", "details"]].itertuples(index=False)
               if m == "lm_eval"}
    if not details:
        raise ConfigError(f"{split_key} x {model_key} has no lm_eval judgements; --format lm-eval exports splits of "
                          f"`adapter: lm_eval` only")
    task_spec = next(d["lm_eval_task"] for d in details.values() if d.get("lm_eval_task"))
    several = sorted({d["lm_eval_task"][0] for d in details.values() if d.get("lm_eval_task")})
    if len(several) > 1:
        raise ConfigError(f"{split_key} x {model_key} holds several lm-eval tasks ({', '.join(several)}); "
                          "--format lm-eval exports one-task splits: give each task its own split")
    task = load_task(*task_spec)
    outputs = {sid: (status, raw) for sid, status, raw in rollouts.itertuples(index=False)}
    samples = []
    settings: dict[str, Any] = {}
    for sid, meta in zip(prompts["sample_id"], prompts["metadata"]):
        info = _loads(meta, {}).get("lm_eval")
        settings = settings or (info or {}).get("settings") or {}
        status, raw = outputs.get(sid, (None, None))
        values = (details.get(sid) or {}).get("lm_eval")
        if not info or status != "ok" or not isinstance(values, dict):
            continue  # a failed rollout: lm-eval has no such sample (our metrics count it as an error)
        resps = responses(info, raw)
        _, filtered = score_doc(task, info, resps)
        raw_resps = [[r] for r in resps]  # one response per request (lm-eval: a list of repeats)
        for filter_key, filtered_resps in filtered.items():
            metrics = {k.partition(",")[0]: v for k, v in values.items() if k.partition(",")[2] == filter_key}
            arguments = [tuple(a) for a in info["arguments"]]
            context = arguments[0][0]
            context = context[0] if isinstance(context, list) else context  # a chat: [its JSON], as lm-eval logs it
            samples.append({
                "doc_id": info["doc_id"], "doc": info["doc"], "target": info["target"], "arguments": arguments,
                "resps": raw_resps, "filtered_resps": filtered_resps, "filter": filter_key, "metrics": list(metrics),
                "doc_hash": hash_string(json.dumps(info["doc"], indent=2, default=handle_non_serializable,
                                                   ensure_ascii=False)),
                "prompt_hash": hash_string(context), "target_hash": hash_string(str(info["target"])),
                **metrics})
    return task, samples, settings


def results_dict(task: Any, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """lm-eval's results dict (`lm_eval.evaluator.evaluate`'s return value without `samples`) for one task."""
    name = task.config.task
    per_doc = [{f"{m},{s['filter']}": s[m] for m in s["metrics"]} for s in samples]
    merged: dict[int, dict[str, Any]] = {}
    for s, values in zip(samples, per_doc):  # one row per doc and filter: one dict per doc
        merged.setdefault(s["doc_id"], {}).update(values)
    aggregates, n = task_aggregates(task, list(merged.values()))
    config = dict(task.dump_config())
    return {
        "results": {name: {"name": name, "alias": config.get("task_alias", name), "sample_len": n, **aggregates}},
        "group_subtasks": {name: []},
        "configs": {name: config},
        "versions": {name: task.VERSION},
        "n-shot": {name: config.get("num_fewshot", 0)},
        "higher_is_better": {name: task.higher_is_better()},
        "n-samples": {name: {"original": len(task.eval_docs), "effective": n}},
    }


def _started_at(split_key: str, model_key: str, wh: Any) -> float | None:
    """When the partition's rollouts were recorded (its latest fingerprints row), as lm-eval's `date`: epoch seconds."""
    import pandas as pd

    try:
        fps = wh.read("fingerprints", {"benchmark_split": split_key, "model": model_key}, columns=["recorded_at"])
    except WarehouseError:
        return None
    if fps.empty or fps["recorded_at"].isna().all():
        return None
    return float(pd.Timestamp(fps["recorded_at"].dropna().iloc[-1]).timestamp())


def write_results(split_key: str, model_key: str, wh: Any, out_dir: str | Path) -> list[Path]:
    """Write the partition's results JSON and per-sample JSONL with lm-eval's EvaluationTracker; their paths. Every
    key `lm_eval --output_path --log_samples` writes is there, with this run's values: `config` (lm-eval's keys;
    ours beside them), the build settings (`fewshot_as_multiturn`, `chat_template`, `system_instruction`), `date`,
    `git_hash` and lm-eval's environment keys. The tokenizer keys are written only by lm-eval models that hold a
    tokenizer: our runners keep theirs to themselves, as lm-eval's API models do, so they are absent as there."""
    try:
        from lm_eval.loggers import EvaluationTracker
        from lm_eval.loggers.utils import add_env_info, get_git_commit_hash
    except ImportError:
        raise ConfigError("--format lm-eval needs lm-eval: pip install 'evalpipe[interop]' (lm-eval==0.4.13)") from None
    task, samples, settings = lm_eval_samples(split_key, model_key, wh)
    results = results_dict(task, samples)
    tracker = EvaluationTracker(output_path=str(out_dir))
    chat = bool(settings.get("apply_chat_template"))
    tracker.general_config_tracker.log_experiment_args(
        model_source="evalpipe", model_args=f"model={model_key}",
        system_instruction=settings.get("system_instruction"),
        chat_template="" if chat else None,  # what lm-eval's API chat models write: the server applies its own
        fewshot_as_multiturn=bool(settings.get("fewshot_as_multiturn", False)))
    results["config"] = {
        "model": model_key, "model_args": f"model={model_key}", "batch_size": None, "batch_sizes": [],
        "device": None, "use_cache": None, "limit": None, "bootstrap_iters": 100000,
        "gen_kwargs": None, "random_seed": 0, "numpy_seed": 1234, "torch_seed": 1234,
        "fewshot_seed": settings.get("fewshot_seed", 1234), "benchmark_split": split_key}
    results["git_hash"] = get_git_commit_hash()
    results["date"] = _started_at(split_key, model_key, wh)
    add_env_info(results)
    tracker.save_results_aggregated(results=results, samples={task.config.task: samples})
    tracker.save_results_samples(task_name=task.config.task, samples=samples)
    folder = Path(out_dir) / tracker.general_config_tracker.model_name_sanitized
    return sorted(p for p in folder.iterdir() if tracker.date_id in p.name)
