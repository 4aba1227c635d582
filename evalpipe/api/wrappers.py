"""Thin wrappers for the calls of the design references (docs/design_refs.md), over `evalpipe.evaluate`:

    Evaluator(metrics=["exact_match"]).evaluate(agent, samples)          # DSGym (002_*)
    DatasetRegistry.load("qrdata").load(split="test", limit=10)          # DSGym, without a config file
    await GAIA().run(run_task, level=1, max_n=5, parallel=2, timeout=60)  # the GAIA lab (003_*)

Both return `Results` (evalpipe/api/results.py); the evaluation is an ordinary evalpipe run, in the warehouse and
the Dagster instance like any other.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable

from evalpipe.api.results import Results
from evalpipe.api.run import evaluate_python
from evalpipe.store.dsgym_layout import write_dsgym_layout

SHIPPED_GAIA = Path(__file__).resolve().parents[2] / "data" / "gaia_sample"  # the GAIA-format sample we ship


def _field(config: Any, name: str) -> Any:
    if config is None:
        return None
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def save(results: Results, output_dir: str | Path) -> Path:
    """`samples.jsonl` and `metrics.json` of `results` in `output_dir` (the references' "save results"), and DSGym's
    layout of its finished partitions beside them: `evaluation_results.json`, `metrics_summary.json`,
    `sample_predictions/` (evalpipe/store/dsgym_layout.py)."""
    out = Path(output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    finished = [(p.benchmark_split, p.model) for p in results.result.partitions if p.success]
    if finished:
        write_dsgym_layout(finished, results.result.warehouse, out)
    results.samples.to_json(out / "samples.jsonl", orient="records", lines=True, force_ascii=False)
    (out / "metrics.json").write_text(json.dumps(results.metrics.to_dict("records"), indent=2, default=str),
                                      encoding="utf-8")
    return out


class DatasetSamples(list):
    """The samples `Dataset.load` returns (dicts: `id`, `input`, `target`, `metadata`, `choices`, `files`); handed
    to `Evaluator.evaluate` they are run as the benchmark itself (its prompts and default metrics), not as records."""

    def __init__(self, rows: list[dict[str, Any]], entry: dict[str, Any], limit: int | None):
        super().__init__(rows)
        self.entry, self.limit = entry, limit


class Dataset:
    """One benchmark adapter with its options, no config file: DSGym's `DatasetRegistry.load(name)` result."""

    def __init__(self, name: str, options: dict[str, Any]):
        self.name, self.options = name, dict(options)

    def entry(self, split: str = "test") -> dict[str, Any]:
        """The benchmark entry (as in evals.yaml) for `split`."""
        return {"adapter": self.name, "splits": [split], "options": dict(self.options)}

    def _adapter(self, split: str) -> Any:
        from evalpipe.benchmarks import adapter_for
        from evalpipe.core.config import SplitConfig

        return adapter_for(SplitConfig(key=f"{self.name}/{split}", benchmark=self.name, split=split,
                                       adapter=self.name, options=dict(self.options), metrics=None,
                                       prompt_template=None, base_dir=Path.cwd()))

    def load(self, split: str = "test", limit: int | None = None) -> DatasetSamples:
        """The split's samples (the first `limit`; evaluated, the split's `limit` option, as `evaluate(limit=)`)."""
        rows = []
        for sample in self._adapter(split).load():
            if limit is not None and len(rows) >= limit:
                break
            rows.append({"id": sample.id, "input": sample.input, "target": sample.target,
                         "metadata": dict(sample.metadata), "choices": sample.choices, "files": list(sample.files)})
        return DatasetSamples(rows, self.entry(split), limit)

    def get_metrics(self, split: str = "test") -> list[Any]:
        """The metrics the benchmark is scored with by default (DSGym's `get_metrics()`)."""
        return self._adapter(split).metrics()


class DatasetRegistry:
    """DSGym's `DatasetRegistry`: `load(name, **options)` gives a benchmark adapter by name (`evalpipe adapters`
    lists them) with its options (`path`, `limit`, ...), no config file needed."""

    @staticmethod
    def list_datasets() -> list[str]:
        from evalpipe.benchmarks import list_adapters

        return list_adapters()

    @staticmethod
    def load(name: str, **options: Any) -> Dataset:
        from evalpipe.benchmarks import get_adapter

        get_adapter(name)  # an unknown name fails here, listing the known ones
        return Dataset(name, options)


class Evaluator:
    """DSGym's `Evaluator(metrics=..., dataset=...)`. `dataset`: a benchmark name of `config` (its samples and
    default metrics) used when `evaluate` gets no samples; other keyword options go to `evalpipe.evaluate`."""

    def __init__(self, metrics: list[Any] | None = None, dataset: Any = None, **options: Any):
        self.metrics, self.dataset, self.options = metrics, dataset, options

    def evaluate(self, agent: Any, samples: Any = None, config: Any = None, save_results: bool = False) -> Results:
        """Run `agent` on `samples` (a list of dicts or a DataFrame; default: the evaluator's dataset). `config`: a
        dict or object with `model_name`, `dataset_name`, `output_dir` (DSGym's EvaluationConfig fields)."""
        from evalpipe.core.errors import ConfigError

        data = samples if samples is not None else self.dataset
        if data is None:
            raise ConfigError("Evaluator.evaluate needs samples, or Evaluator(dataset=<benchmark name or "
                              "DatasetRegistry.load(name)>)")
        options = dict(self.options)
        if isinstance(data, DatasetSamples):  # run as the benchmark itself, its prompts and default metrics
            if data.limit is not None:
                options.setdefault("limit", data.limit)
            options.setdefault("name", data.entry["adapter"])
            data = data.entry
        elif isinstance(data, Dataset):
            options.setdefault("name", data.name)
            data = data.entry()
        for ours, theirs in (("model_name", "model_name"), ("name", "dataset_name")):
            if _field(config, theirs) and ours not in options:
                options[ours] = _field(config, theirs)
        results = evaluate_python(agent, data, self.metrics, **options)
        if save_results:
            save(results, _field(config, "output_dir") or "results")
        return results


class GAIA:
    """The GAIA lab's runner: `await GAIA().run(run_task, level=..., max_n=..., parallel=..., timeout=...,
    out=...)`. `path`: a GAIA folder (default: the GAIA-format sample shipped in data/gaia_sample; the real,
    gated dataset when `path=None` and `hub=True`); `split`: validation (default) or test."""

    def __init__(self, path: str | Path | None = None, split: str = "validation", hub: bool = False,
                 **options: Any):
        self.path = None if hub else Path(path or SHIPPED_GAIA)
        self.split, self.options = split, options

    async def run(self, task_runner: Callable[..., Any], level: int | list[int] | None = None,
                  max_n: int | None = None, parallel: int | None = None, timeout: float | None = None,
                  out: str | Path | None = None, **options: Any) -> Results:
        """Evaluate `task_runner` (sync or async; gets a task with `.question`, `.files`, `.metadata["Level"]`;
        returns the answer text or an object with `prediction`) with the official GAIA scorer."""
        bench_options: dict[str, Any] = {**self.options}
        if self.path is not None:
            bench_options["path"] = str(self.path)
        if level is not None:
            bench_options["levels"] = [level] if isinstance(level, int) else list(level)
        if max_n is not None:
            bench_options["max_n"] = int(max_n)
        entry = {"adapter": "gaia", "splits": [self.split], "options": bench_options, "metrics": ["gaia", "gaia_strict"]}
        run_options = {**options, "name": options.get("name", "gaia")}
        if parallel is not None:
            run_options["concurrency"] = int(parallel)
        if timeout is not None:
            run_options["timeout_s"] = float(timeout)
        results = await asyncio.to_thread(evaluate_python, task_runner, entry, None, **run_options)
        if out is not None:
            path = Path(out).expanduser()
            path.parent.mkdir(parents=True, exist_ok=True)
            results.samples.to_json(path, orient="records", lines=True, force_ascii=False)
        return results
