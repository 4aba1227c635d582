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
