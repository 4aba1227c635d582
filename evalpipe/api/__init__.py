"""The Python API: `evalpipe.evaluate(...)`, `await evalpipe.evaluate_async(...)`, the decorators, and thin wrappers
for the design references' calls. Every form runs on the same asset graph, Dagster instance and DuckDB warehouse as
`evalpipe run` (docs/api.md).

    import evalpipe

    @evalpipe.metric
    def same(prediction: str, target: str) -> bool:
        return prediction.strip().lower() == target.strip().lower()

    def shout(sample) -> str:
        return sample.question.upper()

    res = evalpipe.evaluate(agent=shout, dataset=[{"input": "hi", "target": "HI"}], metrics=[same])
    res.metrics, res.samples, res.partition_keys, res.viewer_url

Two forms of `evaluate`:
- Python objects (`agent=`, `dataset=`, `metrics=`): a project built in memory, no config file needed
  (evalpipe/api/python.py); returns `Results`.
- Configured benchmarks x models (`benchmarks=`, `models=`, as `evalpipe run`) over a config file
  (evalpipe/api/config_run.py); returns `EvalResult`.
"""
from __future__ import annotations

import asyncio
from typing import Any

from evalpipe.api.config_run import OPTION_NAMES, EvalResult, PartitionOutcome
from evalpipe.api.config_run import evaluate as evaluate_configured
from evalpipe.api.decorators import AgentFunction, MetricFunction, ToolFunction, agent, metric, tool
from evalpipe.api.results import Results
from evalpipe.api.run import PYTHON_OPTION_NAMES, evaluate_python, quiet_dagster, stale_status
from evalpipe.api.wrappers import GAIA, DatasetRegistry, Evaluator

__all__ = ["AgentFunction", "DatasetRegistry", "EvalResult", "Evaluator", "GAIA", "MetricFunction", "OPTION_NAMES", "PYTHON_OPTION_NAMES",
           "PartitionOutcome",
           "Results", "ToolFunction", "agent", "evaluate", "evaluate_async", "evaluate_configured", "evaluate_python",
           "metric", "stale_status", "tool"]


def _names(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))


def _forms(args: tuple, agent: Any, dataset: Any, metrics: Any, benchmarks: Any, models: Any) -> tuple:
    """Positional arguments: benchmark and model names (`evaluate("smoke", "echo")`, the configured form as it
    always was) when the first is a name or a list of names and no Python object is given by keyword; else
    (agent, dataset, metrics)."""
    if not args:
        return agent, dataset, metrics, benchmarks, models
    if _names(args[0]) and agent is None and dataset is None and metrics is None:
        if len(args) > 2:
            raise TypeError("evaluate(benchmarks, models) takes two positional arguments; give options by keyword")
        return None, None, None, args[0], (args[1] if len(args) > 1 else models)
    if len(args) > 3:
        raise TypeError("evaluate(agent, dataset, metrics) takes three positional arguments; give options by keyword")
    given = dict(zip(("agent", "dataset", "metrics"), args))
    clash = [k for k, v in (("agent", agent), ("dataset", dataset), ("metrics", metrics)) if k in given and v is not None]
    if clash:
        raise TypeError(f"evaluate() got {clash[0]!r} both by position and by keyword")
    return (given.get("agent", agent), given.get("dataset", dataset), given.get("metrics", metrics), benchmarks,
            models)


def evaluate(*args: Any, agent: Any = None, dataset: Any = None, metrics: Any = None, benchmarks: Any = None,
             models: Any = None, **options: Any) -> Results | EvalResult:
    """Evaluate `agent` on `dataset` with `metrics` (Python objects; `evaluate_python` lists the options), or
    configured `benchmarks` x `models` (names in a config file; `evaluate_configured`). Positionally,
    `evaluate(fn, data, [metric])` is the first form and `evaluate("smoke", "echo")` (names) the second."""
    agent, dataset, metrics, benchmarks, models = _forms(args, agent, dataset, metrics, benchmarks, models)
    if agent is None and dataset is None and metrics is None:
        with quiet_dagster():  # the configured form too: Dagster's notices are about our code location
            return evaluate_configured(benchmarks, models, **options)
    from evalpipe.core.errors import ConfigError

    if benchmarks is not None or models is not None:
        raise ConfigError("give either agent=/dataset=/metrics= (Python objects) or benchmarks=/models= (names in a "
                          "config file), not both")
    if agent is None or dataset is None:
        raise ConfigError(f"evaluate() needs both agent= and dataset= (got {'dataset' if agent is None else 'agent'} "
                          f"only); agent: a function, a Runner or a model string; dataset: a list of dicts, a "
                          f"DataFrame, a data file or a benchmark name")
    return evaluate_python(agent, dataset, metrics, **options)


async def evaluate_async(*args: Any, **kwargs: Any) -> Results | EvalResult:
    """`evaluate` for code already inside an event loop (Jupyter, an async app): runs it in a worker thread and
    awaits it, so the loop keeps running and the stages' own event loops don't collide with it."""
    return await asyncio.to_thread(evaluate, *args, **kwargs)
