"""The Python API: `evalpipe.evaluate(...)` and `await evalpipe.evaluate_async(...)`.

The same Dagster assets, instance (`$DAGSTER_HOME`) and warehouse as `evalpipe run` and the UI: a call is an
`evalpipe run` without a terminal.

    import evalpipe
    result = evalpipe.evaluate(benchmarks=["smoke"], models=["echo"], limit=5)
    result.metrics            # DataFrame: benchmark_split, model, metric, slice, value, n, ...
    result.samples("smoke/test", "echo")   # per-sample records (prompt, prediction, verdicts, usage)

`limit=5` is a try, as `evalpipe run --limit 5`: the first 5 samples under the model key `echo@limit5` (kept apart
from `echo`'s full results, never ranked); `result.metric`/`result.samples` read it under either name.
    result.run_dirs           # {(split, model): Path of the run's artifact folder}

`evaluate_async` runs the same call in a worker thread, so it works inside a running event loop (Jupyter, an
async web app); the stages' own `asyncio.run` calls then get a loop of their own in that thread.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

OPTION_NAMES = ("limit", "concurrency", "timeout_s", "experiment", "run_id", "prompt_wrapper", "num_shards",
                "shard_index", "fail_on_fingerprint_mismatch", "benchmark_options", "runner_options", "splits",
                "config", "instance", "reload_datasets", "epochs", "epochs_reducer", "sample_ids",
                "output_path")


@dataclass
class PartitionOutcome:
    benchmark_split: str
    model: str
    success: bool
    error: str
    run_id: str
    run_dir: Path | None


@dataclass
class EvalResult:
    """What `evaluate` returns."""

    partitions: list[PartitionOutcome]
    metrics: pd.DataFrame  # the `metrics` rows of the evaluated partitions (every slice)
    leaderboard: pd.DataFrame
    warehouse: Any = field(repr=False, default=None)
    limit: int | None = None  # the call's `limit`: its partitions are the `<model>@limit<N>` keys
    sample_ids: list[str] | None = None  # the call's `sample_ids`: its partitions are the `<model>@ids-<h>` keys

    def _model_key(self, model: str) -> str:
        """`model` as this call evaluated it: with a limit, `echo` is read as `echo@limit<N>` (the try's key)."""
        from evalpipe.core.run_marks import is_limited, limited_key

        if self.limit and not is_limited(model) and model not in {p.model for p in self.partitions}:
            return limited_key(model, self.limit)
        if self.sample_ids and not is_limited(model) and model not in {p.model for p in self.partitions}:
            from evalpipe.core.run_marks import selected_key

            return selected_key(model, self.sample_ids)
        return model

    @property
    def success(self) -> bool:
        return all(p.success for p in self.partitions)

    @property
    def run_dirs(self) -> dict[tuple[str, str], Path | None]:
        return {(p.benchmark_split, p.model): p.run_dir for p in self.partitions}

    def metric(self, split: str, model: str, metric: str, slice: str = "all") -> float | None:
        m, model = self.metrics, self._model_key(model)
        row = m[(m["benchmark_split"] == split) & (m["model"] == model) & (m["metric"] == metric) & (m["slice"] == slice)]
        return None if row.empty or pd.isna(row["value"].iloc[0]) else float(row["value"].iloc[0])

    def samples(self, split: str, model: str) -> list[dict[str, Any]]:
        """Per-sample records of one partition: id, prompt, target, prediction, status, error, usage, and one
        `<metric>_score` / `<metric>_correct` pair per metric."""
        wh, model = self.warehouse, self._model_key(model)
        df = wh.query("""
            SELECT p.sample_id, p.sample_index, p.messages, p.target, r.prediction, r.raw_output, r.status, r.error,
                   r.input_tokens, r.output_tokens, r.latency_s, r.cost, r.fingerprint
            FROM prompts p LEFT JOIN rollouts r USING (benchmark_split, model, sample_id)
            WHERE p.benchmark_split = ? AND p.model = ? ORDER BY p.sample_index""", [split, model])
        j = wh.query("SELECT sample_id, metric, score, correct, status FROM judgements "
                     "WHERE benchmark_split = ? AND model = ?", [split, model])
        out = []
        verdicts: dict[str, dict[str, Any]] = {}
        for r in j.itertuples(index=False):
            v = verdicts.setdefault(r.sample_id, {})
            v[f"{r.metric}_score"] = None if pd.isna(r.score) else float(r.score)
            v[f"{r.metric}_correct"] = None if pd.isna(r.correct) else bool(r.correct)
        for rec in df.to_dict("records"):
            rec = {k: (None if not isinstance(v, (list, dict)) and pd.isna(v) else v) for k, v in rec.items()}
            rec.update(verdicts.get(rec["sample_id"], {}))
            out.append(rec)
        return out


def _choose_splits(cfg: Any, benchmarks: Iterable[str] | None, splits: Iterable[str] | None) -> list[str]:
    from evalpipe.core.errors import ConfigError

    if isinstance(benchmarks, str):
        benchmarks = [benchmarks]
    if isinstance(splits, str):
        splits = [splits]
    benchmarks, splits = list(benchmarks or []), list(splits or [])
    chosen = []
    for b in benchmarks:  # a benchmark name, or a full split key
        if b in cfg.splits:
            chosen.append(b)
            continue
        keys = [k for k, s in cfg.splits.items() if s.benchmark == b and (not splits or s.split in splits)]
        if not keys:
            raise ConfigError(f"unknown benchmark {b!r}; configured: {', '.join(sorted({s.benchmark for s in cfg.splits.values()}))}")
        chosen += keys
    if not benchmarks:
        chosen = [k for k, s in cfg.splits.items()
                  if (s.benchmark in cfg.default_benchmarks or k in splits) and (not splits or s.split in splits or k in splits)]
    return list(dict.fromkeys(chosen))


def evaluate(benchmarks: Iterable[str] | str | None = None, models: Iterable[str] | str | None = None,
             **options: Any) -> EvalResult:
    """Evaluate benchmarks x models through the Dagster assets; returns an `EvalResult` (failures are in it, not
    raised). `benchmarks`: benchmark names or split keys (default: the config's default_benchmarks); `models`:
    model keys (default: default_models). Options, as in `evalpipe run`: `splits`, `limit` (a try under the keys
    `<model>@limit<N>`; `benchmark_options={"limit": N}` is the same), `concurrency`,
    `timeout_s`, `experiment`, `run_id`, `prompt_wrapper`, `num_shards` + `shard_index`,
    `fail_on_fingerprint_mismatch`, `epochs` (each sample N times) and `epochs_reducer`
    (docs/metrics.md#epochs-and-sample-selection), `sample_ids` (a try over these samples, under the keys
    `<model>@ids-<h>`), `output_path` (one portable results file of the run, docs/interop.md),
    `benchmark_options` (dict), `runner_options` (dict, `params.K` for decoding
    params), `reload_datasets` (load every split again even when its dataset on record is current), `config` (a
    config file path: its splits and models become partitions of the shared instance), `instance`."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        from evalpipe.project.schema import did_you_mean
        from evalpipe.core.errors import ConfigError

        raise ConfigError(f"evaluate() got unknown option {unknown[0]!r}{did_you_mean(unknown[0], OPTION_NAMES)}"
                          + (f" (and {unknown[1:]})" if len(unknown) > 1 else ""))
    from evalpipe.repro.run_request import RunOptions, check_declared_options, check_judge_keys, runner_overrides
    from evalpipe.project import Project
    from evalpipe.store.warehouse import Warehouse
    from eval_assets.launch import evaluate as launch_evaluate
    from evalpipe.api.instance import project_instance
    from resources import EvalConfigResource

    # the entry point: `config` (else the environment's config), the environment's home and warehouse
    project = Project.from_file(options.get("config"))
    cfg = project.config
    if isinstance(models, str):
        models = [models]
    rp = RunOptions.from_kwargs({k: options.get(k) for k in ("num_shards", "shard_index", "prompt_wrapper",
                                                             "experiment", "run_id", "epochs", "epochs_reducer",
                                                             "sample_ids", "output_path")}
                                | {"no_fail_on_fingerprint_mismatch": options.get("fail_on_fingerprint_mismatch") is False})
    chosen = _choose_splits(cfg, benchmarks, options.get("splits"))
    split_options = {**dict(options.get("benchmark_options") or {}), **rp.split_options()}
    # the try rule (evalpipe/project/tries.py): limit=N (or benchmark_options={"limit": N}) and sample_ids are the
    # model keys <model>@limit<N> / <model>@ids-<h>, as `evalpipe run`; the dataset partition and the full results
    # are never touched
    limit = rp.run_try(options.get("limit"), split_options, "limit={}", "benchmark_options limit={}",
                       "sample_ids").limit
    # none named: each split's intended models (its benchmark's `models:`, else default_models)
    per_split = rp.models_per_split(cfg, chosen, list(models) if models else None, limit)
    model_keys = list(dict.fromkeys(m for s in chosen for m in per_split[s]))
    resources: dict[str, Any] = {
        "model_runner": runner_overrides({**dict(options.get("runner_options") or {}), **rp.runner_options()},
                                         options.get("concurrency"), options.get("timeout_s")),
        **rp.resources()}
    from evalpipe.project.schema import check_overrides

    check_overrides(split_options, "benchmark_options")  # types and ranges, then what each adapter/runner declares
    check_declared_options(cfg, chosen, model_keys, split_options, resources["model_runner"], "benchmark_options",
                           "runner_options")
    check_judge_keys(cfg, chosen)  # a judge's missing API key: before the rollouts are paid for
    if split_options:
        resources["eval_config"] = EvalConfigResource(split_options=split_options)
    instance = project_instance(project, options.get("instance"))
    result = launch_evaluate(project, chosen, per_split, resources=resources, instance=instance, tags=rp.tags() or None,
                             reload_datasets=bool(options.get("reload_datasets")))
    if result.success:
        for s in chosen:
            rp.after_run(cfg, [s], per_split[s], instance)
    wh = Warehouse(project.warehouse)
    rp.write_results_file(result.partitions, wh, cfg, "evalpipe.evaluate()")  # output_path=: the results file
    report_tracking(cfg, wh, instance, result.partitions)  # [interop] failed partitions in MLflow, as the CLI logs them
    from evalpipe.store.artifacts import LATEST, artifacts_root, partition_dir

    outcomes = []
    for p in result.partitions:
        d = partition_dir(artifacts_root(cfg), p.benchmark_split, p.model) / LATEST
        outcomes.append(PartitionOutcome(p.benchmark_split, p.model, p.success, p.error, p.run_id,
                                         d.resolve() if p.success and d.exists() else None))
    keys = {(p.benchmark_split, p.model) for p in outcomes}
    metrics = wh.query("SELECT * FROM metrics ORDER BY benchmark_split, model, metric, slice")
    metrics = metrics[[(s, m) in keys for s, m in zip(metrics["benchmark_split"], metrics["model"])]].reset_index(drop=True)
    from partitions import try_kind

    metrics = metrics.assign(**{"try": metrics["model"].map(try_kind) if "model" in metrics else None})  # limit, ids, subset; None: a real result
    return EvalResult(partitions=outcomes, metrics=metrics, leaderboard=wh.read_table("leaderboard"), warehouse=wh,
                      limit=limit, sample_ids=rp.sample_ids or None)


def report_tracking(cfg: Any, wh: Any, instance: Any, partitions: list[Any]) -> None:
    """Failed partitions as FAILED MLflow runs (evalpipe/pipeline/tracking.py, as `evalpipe run` logs them), and the
    tracker's failure in one line on stderr, as the CLI prints it."""
    import sys

    from evalpipe.pipeline.tracking import report_run

    for line in report_run(cfg, wh, instance, partitions):
        print(line, file=sys.stderr)


async def evaluate_async(benchmarks: Iterable[str] | str | None = None, models: Iterable[str] | str | None = None,
                         **options: Any) -> EvalResult:
    """`evaluate` for code already inside an event loop: runs it in a worker thread and awaits it."""
    return await asyncio.to_thread(evaluate, benchmarks, models, **options)
