"""What `evalpipe.evaluate(agent=..., dataset=..., metrics=...)` returns: the run's numbers as frames, read back
from the warehouse the CLI and the viewer read."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from evalpipe.api.config_run import EvalResult

# the metrics table's columns a reader wants first (the rest follow: kind, direction, ...)
METRIC_COLUMNS = ["benchmark_split", "model", "metric", "slice", "value", "n", "stderr", "ci_low", "ci_high"]


@dataclass
class Results:
    """One Python-API evaluation.

    - `metrics`: one row per metric and slice, with `n`, `stderr` and the bootstrap 95% interval `ci_low`..`ci_high`
    - `samples`: one row per sample: `sample_id`, `prompt` (`messages`), `target`, `prediction`, `status`, `error`,
      usage, and `<metric>_score` / `<metric>_correct` per metric
    - `partitions`: the (benchmark_split, model) pairs evaluated; `partition_keys`: the same as Dagster's
      multi-partition keys (the UI's partition names)
    - `viewer_url`: the samples page of `evalpipe view --web` for each partition
    - `result`: the underlying `EvalResult` (run ids, run folders, leaderboard, the warehouse)
    """

    result: EvalResult
    metrics: pd.DataFrame
    samples: pd.DataFrame
    viewer_urls: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.result.success

    @property
    def errors(self) -> dict[tuple[str, str], str]:
        """The failed partitions' one-line errors."""
        return {(p.benchmark_split, p.model): p.error for p in self.result.partitions if not p.success}

    @property
    def partitions(self) -> list[tuple[str, str]]:
        return [(p.benchmark_split, p.model) for p in self.result.partitions]

    @property
    def partition_keys(self) -> list[str]:
        from dagster import MultiPartitionKey

        return [str(MultiPartitionKey({"benchmark_split": s, "model": m})) for s, m in self.partitions]

    @property
    def viewer_url(self) -> str | None:
        """The viewer link of the first partition (most calls have one)."""
        return next(iter(self.viewer_urls.values()), None)

    @property
    def run_dirs(self) -> dict[tuple[str, str], Any]:
        return self.result.run_dirs

    def score(self, metric: str, slice: str = "all") -> float | None:
        """The value of `metric` (slice `all` unless given) for the first partition."""
        if not self.partitions:
            return None
        split, model = self.partitions[0]
        return self.result.metric(split, model, metric, slice)

    # DSGym's result dict (002_*: "Results object returned by evaluator.evaluate()"), read as a mapping
    DSGYM_KEYS = ("sample_results", "aggregated_metrics", "metadata")

    def evaluation_results(self) -> dict[str, Any]:
        """DSGym's results dict of the call's one partition: `sample_results` (per sample: `query`, `prediction`,
        `ground_truth`, `trajectory`, `metric_results`, `execution_time`, `success`), `aggregated_metrics` (per
        metric `mean_score`, `total_samples`, ...), `metadata` (evalpipe/store/dsgym_layout.py)."""
        from evalpipe.core.errors import ConfigError
        from evalpipe.store.dsgym_layout import evaluation_results

        finished = [(p.benchmark_split, p.model) for p in self.result.partitions if p.success]
        if len(self.result.partitions) != 1 or not finished:
            why = (f"{len(self.result.partitions)} partitions" if len(self.result.partitions) != 1
                   else f"its partition failed: {next(iter(self.errors.values()), '')}")
            raise ConfigError(f"DSGym's result dict describes one finished partition; this call has {why} "
                              f"(read results.metrics / results.samples instead)")
        if getattr(self, "_dsgym", None) is None:
            self._dsgym = evaluation_results(*finished[0], self.result.warehouse)
        return self._dsgym

    def __getitem__(self, key: str) -> Any:
        if key not in self.DSGYM_KEYS:
            raise KeyError(f"{key!r}: Results reads DSGym's keys {', '.join(self.DSGYM_KEYS)}; the frames are "
                           f"results.metrics and results.samples")
        return self.evaluation_results()[key]

    def __contains__(self, key: object) -> bool:
        return key in self.DSGYM_KEYS

    def keys(self) -> tuple[str, ...]:
        return self.DSGYM_KEYS

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self.DSGYM_KEYS else default

    def __repr__(self) -> str:
        overall = self.metrics[self.metrics["slice"] == "all"] if len(self.metrics) else self.metrics
        shown = ", ".join(f"{r.metric}={r.value:.3g}" for r in overall.itertuples(index=False)
                          if isinstance(r.value, float) and not r.metric.endswith(("_total", "_p50", "_p95", "_mean")))
        state = "ok" if self.success else f"{len(self.errors)} failed partition(s)"
        return f"<Results {state}; {len(self.samples)} sample(s); {shown or 'no metrics'}>"


def read_results(result: EvalResult) -> Results:
    """The frames of `result`'s partitions, from its warehouse."""
    from evalpipe.viewer.links import viewer_url

    metrics = result.metrics
    first = [c for c in METRIC_COLUMNS if c in metrics.columns]
    metrics = metrics[first + [c for c in metrics.columns if c not in first]].reset_index(drop=True)
    frames = []
    for p in result.partitions:
        rows = result.samples(p.benchmark_split, p.model) if p.success else []
        if rows:
            frames.append(pd.DataFrame(rows).assign(benchmark_split=p.benchmark_split, model=p.model))
    samples = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["benchmark_split", "model", "sample_id", "prediction", "target", "status"])
    lead = [c for c in ("benchmark_split", "model", "sample_id") if c in samples.columns]
    samples = samples[lead + [c for c in samples.columns if c not in lead]]
    urls = {(p.benchmark_split, p.model): viewer_url(p.benchmark_split, p.model) for p in result.partitions}
    return Results(result=result, metrics=metrics, samples=samples, viewer_urls=urls)
