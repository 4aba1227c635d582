"""Metric `lm_eval`: an lm-evaluation-harness task's own scoring (docs/interop.md "lm-evaluation-harness tasks and
results"). lm-eval (optional, pinned) is imported only when a task is loaded.

Per sample, the model's answer becomes lm-eval `Instance` responses (a generation cut at the task's `until`
strings, or the (log-likelihood, is-greedy) pairs the runner computed), the task's filters run over them, and
`task.process_results(doc, filtered)` gives the sample's metric values. The judgement's score is the first metric
under the first filter (for a `loglikelihood_rolling` task, whose metrics are (log-likelihood, words or bytes)
pairs: the document's log-likelihood); `details.lm_eval` holds every `<metric>,<filter>` value. Over a partition,
`summary_rows` applies the task's own `aggregation()` to each metric (rows `lm_eval_<metric>,<filter>`), with
lm-eval's stderr and, for right/wrong or mean aggregations, our 95% interval.
"""
from __future__ import annotations

import functools
import json
import os
from typing import Any

import numpy as np

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import LmEvalSettings

LOGLIKELIHOOD_TYPES = ("loglikelihood", "multiple_choice", "loglikelihood_rolling")
DEFAULT_FEWSHOT_SEED = 1234  # lm_eval.simple_evaluate's fewshot_random_seed


def _task_manager(include_path: str | None) -> Any:
    """lm-eval's TaskManager over `include_path` (or lm-eval's bundled tasks), lm-eval's absence one line."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise ConfigError("adapter lm_eval needs lm-eval: pip install 'evalpipe[interop]' (lm-eval==0.4.13)") from None
    if include_path is not None and not os.path.isdir(include_path):
        raise ConfigError(f"lm_eval include_path {include_path} is not a folder; give the folder of your task YAMLs")
    return TaskManager(include_path=include_path, include_defaults=include_path is None)


@functools.lru_cache(maxsize=16)
def load_task(task: str, include_path: str | None = None) -> Any:
    """lm-eval's own task object for `task` (its YAML under `include_path` or lm-eval's bundled tasks), loaded once
    per process. Its data is read by Hugging Face datasets: local files, the cache, or the Hub when online."""
    from lm_eval.tasks import get_task_dict

    manager = _task_manager(include_path)
    if task not in manager.all_tasks:
        where = f"under {include_path}" if include_path else "among lm-eval's tasks"
        raise ConfigError(f"lm_eval task {task!r} not found {where}; check `task:` (or set include_path)")
    try:
        found = get_task_dict([task], manager)
    except Exception as exc:  # lm-eval raises bare exceptions for dataset problems
        raise DataError(f"lm_eval task {task!r}: cannot load it: {' '.join(str(exc).split())[:300]}") from None
    obj = found.get(task)
    if obj is None or not hasattr(obj, "process_results"):
        raise ConfigError(f"lm_eval task {task!r} is a group; name one of its tasks in `task:`")
    return _default_fewshot(obj)


def _default_fewshot(task: Any) -> Any:
    """A task whose config sets no num_fewshot gets 0, as lm_eval.simple_evaluate sets it (its exported config
    says so)."""
    if task.get_config("num_fewshot") is None:
        task.set_config(key="num_fewshot", value=0)
    return task


def task_names(value: Any) -> tuple[str, ...]:
    """`task:`/`tasks:` as lm-eval's `--tasks` takes them: a name, a comma-separated string, or a list."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    return tuple(str(t).strip() for t in items if str(t).strip())


@functools.lru_cache(maxsize=16)
def load_tasks(names: tuple[str, ...], include_path: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """lm-eval task names (tasks or groups, as `lm_eval --tasks` takes them) resolved by lm-eval's TaskManager:
    ({leaf task name: task object}, [lm-eval Group objects, outermost first])."""
    from lm_eval.tasks import get_task_dict

    manager = _task_manager(include_path)
    missing = [n for n in names if n not in manager.all_tasks]
    if missing or not names:
        where = f"under {include_path}" if include_path else "among lm-eval's tasks"
        raise ConfigError(f"lm_eval task(s) {missing} not found {where}; check `task:` (or set include_path)")
    try:
        found = get_task_dict(list(names), manager)
    except Exception as exc:  # lm-eval raises bare exceptions for dataset problems
        raise DataError(f"lm_eval tasks {list(names)}: cannot load them: {' '.join(str(exc).split())[:300]}") from None
    leaves: dict[str, Any] = {}
    groups: list[Any] = []

    def walk(tree: dict) -> None:
        for key, value in tree.items():
            if isinstance(value, dict):
                groups.append(key)
                walk(value)
            else:
                leaves[str(key)] = _default_fewshot(value)

    walk(found)
    return leaves, groups


def cut_at_until(text: str, until: list[str]) -> str:
    """The generation up to the first stop string, as lm-eval's HFLM cuts it."""
    for stop in until:
        if stop:
            text = text.split(stop)[0]
    return text


def responses(info: dict[str, Any], raw_output: str | None) -> list[Any]:
    """One response per request of the sample (lm-eval's `resps` before filtering)."""
    if info["output_type"] == "loglikelihood_rolling":  # one log-likelihood per text (is_greedy: none, as lm-eval)
        values = json.loads(raw_output or "null")
        if not isinstance(values, list) or len(values) != len(info["requests"]) \
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise ValueError(f"expected {len(info['requests'])} log-likelihoods, got {raw_output!r:.80}")
        return [float(v) for v in values]
    if info["output_type"] in LOGLIKELIHOOD_TYPES:
        pairs = json.loads(raw_output or "null")
        if not isinstance(pairs, list) or len(pairs) != len(info["requests"]):
            raise ValueError(f"expected {len(info['requests'])} [loglikelihood, is_greedy] pairs, got {raw_output!r:.80}")
        return [(float(ll), bool(greedy)) for ll, greedy in pairs]
    until = (info.get("gen_kwargs") or {}).get("until") or []
    return [cut_at_until(raw_output or "", [until] if isinstance(until, str) else list(until))]


def score_doc(task: Any, info: dict[str, Any], resps: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """({"<metric>,<filter>": value}, {filter: filtered responses}) for one doc: the task's filters, then its
    process_results, exactly as lm_eval.evaluator.evaluate does."""
    from lm_eval.api.instance import Instance

    doc = info["doc"]
    meta = (info["task"], info["doc_id"], 1)
    request_type = "loglikelihood" if info["output_type"] == "multiple_choice" else info["output_type"]
    instances = [Instance(request_type=request_type, doc=doc, arguments=(), idx=i, metadata=meta, resps=[r])
                 for i, r in enumerate(resps)]
    for f in task._filters:
        f.apply(instances)
    values: dict[str, Any] = {}
    filtered: dict[str, Any] = {}
    for name in instances[0].filtered_resps:
        got = [inst.filtered_resps[name] for inst in instances]
        filtered[name] = got
        for metric, value in task.process_results(doc, got).items():
            values[f"{metric},{name}"] = value
    return values, filtered


def _number(value: Any) -> float | None:
    if isinstance(value, (bool, int, float, np.number)):
        return float(value)
    return None


@register_metric("lm_eval")
class LmEvalMetric(Metric):
    """The task's process_results per sample; set by `adapter: lm_eval` with its `task` and `include_path`."""

    name = "lm_eval"
    requires_target = False  # the doc holds the ground truth, in whatever form the task reads it
    inputs = frozenset({"metadata", "raw_output"})
    option_schema = LmEvalSettings

    def __init__(self, task: str | None = None, include_path: str | None = None, **settings: Any):
        if not task:
            raise ConfigError("metric lm_eval needs `task:` (it is set by `adapter: lm_eval`; use that adapter)")
        super().__init__(task=task, include_path=include_path, **settings)
        self.task_name, self.include_path = task, include_path

    def identity(self) -> dict[str, Any]:
        """Also the task YAMLs' text: a changed metric_list or filter changes the verdicts (read without lm-eval)."""
        ident = super().identity()
        if self.include_path and os.path.isdir(self.include_path):
            from pathlib import Path

            from evalpipe.core.fingerprint import fingerprint

            ident["yaml"] = fingerprint([[str(p.relative_to(self.include_path)), p.read_text(encoding="utf-8")]
                                         for p in sorted(Path(self.include_path).rglob("*.yaml"))])
        return ident

    def score(self, item: JudgeInput) -> Score:
        info = item.metadata.get("lm_eval")
        if not isinstance(info, dict):
            return Score.error("no lm_eval request in the sample's metadata; the split's adapter must be lm_eval")
        leaf = str(info.get("task") or self.task_name)
        names = task_names(self.task_name)
        task = load_task(leaf, self.include_path) if names != (leaf,) else load_task(self.task_name, self.include_path)
        try:
            resps = responses(info, item.raw_output)
        except (ValueError, TypeError) as exc:
            return Score(value=0.0, correct=False, status="parse_error", reason=str(exc))
        values, filtered = score_doc(task, info, resps)
        first = next(iter(values.values()), None)
        # a perplexity task's metrics are (log-likelihood, weight) pairs, aggregated over the partition only: the
        # sample's score is the document's log-likelihood (row `lm_eval`: their mean)
        value = sum(resps) if info.get("output_type") == "loglikelihood_rolling" else _number(first)
        return Score(value=value, correct=(bool(value) if value in (0.0, 1.0) else None), reason="lm_eval",
                     normalized_prediction=json.dumps(next(iter(filtered.values()), None), default=str)[:500],
                     normalized_target=str(info.get("target")),
                     details={"lm_eval": values, "lm_eval_task": [leaf, self.include_path],
                              "lm_eval_tasks": [list(names), self.include_path]})

    @staticmethod
    def summary_rows(metric: str, counted: Any, details: list[dict], seed: int) -> list[dict]:
        """`<metric>_<lm-eval metric>,<filter>` per metric of the task: the task's own aggregation over the samples'
        process_results values, lm-eval's stderr, and our 95% interval where the values are per-sample means."""
        from evalpipe.metrics.aggregate import interval

        details = [d for d in details if isinstance(d, dict) and isinstance(d.get("lm_eval"), dict)]
        if not details:
            return []
        names, include_path = details[0].get("lm_eval_tasks") or [[details[0]["lm_eval_task"][0]], None]
        leaves, groups = load_tasks(tuple(names), include_path) if details[0].get("lm_eval_tasks") else ({}, [])
        if len(leaves) <= 1 and not groups:  # one task: rows `<metric>_<lm-eval metric>,<filter>`
            task = load_task(*details[0]["lm_eval_task"])
            return [{"metric": f"{metric}_{key}", "slice": "all", **row}
                    for key, row in aggregate_task(task, [d["lm_eval"] for d in details], seed, interval).items()]
        # several tasks (or a group): rows `<metric>_<task>/<lm-eval metric>,<filter>` per task, then each group's
        # aggregate by lm-eval's own Group.aggregate (aggregate_subtask_metrics, pooled stderr) over them
        rows: list[dict] = []
        task_metrics: dict[str, dict[str, Any]] = {}
        hib: dict[str, Any] = {}
        for name, task in leaves.items():
            per_doc = [d["lm_eval"] for d in details if d["lm_eval_task"][0] == name]
            if not per_doc:
                continue
            aggregates, _ = task_aggregates(task, per_doc)
            task_metrics[name] = {**aggregates, "sample_len": len(per_doc)}
            hib.update(task.higher_is_better())
            rows += [{"metric": f"{metric}_{name}/{key}", "slice": "all", **row}
                     for key, row in aggregate_task(task, per_doc, seed, interval).items()]
        for group in groups:
            got = group.aggregate(task_metrics)
            for key, value in got.items():
                m, _, filter_key = key.partition(",")
                if not filter_key or m.endswith("_stderr") or _number(value) is None:
                    continue
                stderr = got.get(f"{m}_stderr,{filter_key}")
                rows.append({"metric": f"{metric}_{group.name}/{key}", "slice": "all", "value": float(value),
                             "n": int((got.get("sample_count") or {}).get(key, got.get("sample_len", 0))),
                             "n_unscored": 0, "n_errors": 0,
                             "stderr": float(stderr) if _number(stderr) is not None else float("nan"),
                             "ci_low": float("nan"), "ci_high": float("nan"), "higher_is_better": hib.get(m),
                             "kind": "score"})
        return rows


def task_aggregates(task: Any, per_doc: list[dict[str, Any]]) -> tuple[dict[str, Any], int]:
    """lm-eval's own aggregation of per-doc `{"<metric>,<filter>": value}`: ({"<metric>,<filter>": value,
    "<metric>_stderr,<filter>": stderr or "N/A"}, docs counted), by the function lm_eval.evaluator.evaluate calls
    (its aggregation functions, `mean` for a metric without one, and its stderr, 100000 bootstrap iterations)."""
    from lm_eval.evaluator_utils import _compute_task_aggregations  # private, but pinned (lm-eval==0.4.13)

    raw: dict[tuple[str, str], list[Any]] = {}
    for doc in per_doc:
        for key, value in doc.items():
            metric, _, filter_key = key.partition(",")
            raw.setdefault((metric, filter_key), []).append(value)
    return _compute_task_aggregations(task, raw, bootstrap_iters=100000)


def aggregate_task(task: Any, per_doc: list[dict[str, Any]], seed: int = 0, interval: Any = None) -> dict[str, dict]:
    """{"<metric>,<filter>": a metrics-table row (value, n, stderr, ci_low, ci_high, higher_is_better, kind)} from
    `task_aggregates`; the 95% interval is ours where the aggregate is the mean of numeric per-sample values."""
    aggregates, _ = task_aggregates(task, per_doc)
    hib = task.higher_is_better()
    out: dict[str, dict] = {}
    for key, value in aggregates.items():
        metric, _, filter_key = key.partition(",")
        if metric.endswith("_stderr"):
            continue
        items = [d[key] for d in per_doc if key in d]
        stderr = aggregates.get(f"{metric}_stderr,{filter_key}")
        numbers = [_number(v) for v in items]
        lo = hi = float("nan")
        if interval is not None and items and None not in numbers and np.isclose(np.mean(numbers), float(value)):
            lo, hi = interval(np.array(numbers, dtype=float), seed)  # the aggregate is the per-sample mean
        out[key] = {"value": float(value), "n": len(items), "n_unscored": 0, "n_errors": 0,
                    "stderr": float(stderr) if _number(stderr) is not None else float("nan"),
                    "ci_low": lo, "ci_high": hi, "higher_is_better": hib.get(metric), "kind": "score"}
    return out
