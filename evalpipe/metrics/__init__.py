"""Metrics behind a registry: `register_metric`, `get_metric`, `build_metric`; `aggregate` for the rollup.

The built-in metrics (base.BUILTIN_MODULES) register themselves at the registry's first use (base.py
`_load_builtins`), not when this package is imported, and `aggregate` is imported on first use (PEP 562): reading
results (the leaderboard ranks by direction with aggregate.py) does not import the sandbox, tools and judges that
scoring needs (issue 31)."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evalpipe.metrics.base import (BUILTIN_MODULES, JudgeInput, Metric, ScoreColumns, build_metric, get_metric,
                                   judgements_version, list_metrics, register_metric)

if TYPE_CHECKING:
    from evalpipe.metrics.aggregate import USAGE_METRICS, aggregate

__all__ = ["JudgeInput", "Metric", "ScoreColumns", "USAGE_METRICS", "aggregate", "build_metric", "get_metric", "judgements_version",
           "list_metrics", "register_metric"]


def __getattr__(name: str) -> Any:
    if name in ("USAGE_METRICS", "aggregate"):
        value = getattr(importlib.import_module("evalpipe.metrics.aggregate"), name)
    elif name in BUILTIN_MODULES:  # `evalpipe.metrics.exact_match` and the like, as when they were imported here
        value = importlib.import_module(f"evalpipe.metrics.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), "USAGE_METRICS", "aggregate", *BUILTIN_MODULES})
