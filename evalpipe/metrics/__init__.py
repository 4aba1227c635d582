"""Metrics behind a registry: `register_metric`, `get_metric`, `build_metric`; `aggregate` for the rollup.

The built-in metrics (base.BUILTIN_MODULES) register themselves at the registry's first use (base.py
`_load_builtins`), not when this package is imported, and `aggregate` is imported on first use (PEP 562): reading
results (the leaderboard ranks by direction with aggregate.py) does not import the sandbox, tools and judges that
scoring needs (issue 31)."""
from __future__ import annotations

import importlib
from typing import Any

from evalpipe.metrics.base import (BUILTIN_MODULES, JudgeInput, Metric, ScoreColumns, build_metric, get_metric,
                                   judgements_version, list_metrics, register_metric)

# Bound here, not lazily: importing the submodule `evalpipe.metrics.aggregate` anywhere would otherwise set this
# package's `aggregate` to the module (the import system does), and `metrics.aggregate(...)` would call a module.
# aggregate.py imports only numpy and pandas, which every reader has loaded anyway.
from evalpipe.metrics.aggregate import USAGE_METRICS, aggregate  # noqa: E402

__all__ = ["JudgeInput", "Metric", "ScoreColumns", "USAGE_METRICS", "aggregate", "build_metric", "get_metric", "judgements_version",
           "list_metrics", "register_metric"]


def __getattr__(name: str) -> Any:
    if name in BUILTIN_MODULES:  # `evalpipe.metrics.exact_match` and the like, as when they were imported here
        value = importlib.import_module(f"evalpipe.metrics.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), "USAGE_METRICS", "aggregate", *BUILTIN_MODULES})
