"""Thin wrappers for the calls of the design references (docs/design_refs.md), over `evalpipe.evaluate`:

    Evaluator(metrics=["exact_match"]).evaluate(agent, samples)          # DSGym (002_*)
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

SHIPPED_GAIA = Path(__file__).resolve().parents[2] / "data" / "gaia_sample"  # the GAIA-format sample we ship


def _field(config: Any, name: str) -> Any:
    if config is None:
        return None
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def save(results: Results, output_dir: str | Path) -> Path:
    """`samples.jsonl` and `metrics.json` of `results` in `output_dir` (the references' "save results")."""
    out = Path(output_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    results.samples.to_json(out / "samples.jsonl", orient="records", lines=True, force_ascii=False)
    (out / "metrics.json").write_text(json.dumps(results.metrics.to_dict("records"), indent=2, default=str),
                                      encoding="utf-8")
    return out


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
            raise ConfigError("Evaluator.evaluate needs samples, or Evaluator(dataset=<benchmark name>)")
        options = dict(self.options)
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
        entry = {"adapter": "gaia", "splits": [self.split], "options": bench_options, "metrics": ["gaia"]}
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
