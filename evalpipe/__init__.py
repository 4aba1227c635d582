"""evalpipe: the plain-Python core of the evaluation pipeline (adapters, runners, metrics, warehouse).

The Dagster layer (`eval_assets`, `resources`, `partitions`) wires these together. The public names below are
imported on first use (PEP 562), so `import evalpipe.<module>` and the `evalpipe` command do not pay for pandas,
the adapters and the metrics until they are needed.
"""
from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "evalpipe.benchmarks": ("Adapter", "get_adapter", "list_adapters", "register_adapter"),
    "evalpipe.core.config": ("EvalConfig", "ModelConfig", "SplitConfig"),
    "evalpipe.project": ("Project", "load_config"),  # the project object (docs/configuration.md)
    "evalpipe.core.errors": ("ConfigError", "DataError", "EvalError", "WarehouseError"),
    "evalpipe.metrics": ("Metric", "get_metric", "list_metrics", "register_metric"),
    "evalpipe.runners": ("Runner", "get_runner", "list_runners", "register_runner"),
    "evalpipe.core.types": ("Generation", "RolloutRequest", "Sample", "Score"),
    "evalpipe.store.warehouse": ("Warehouse",),
    # the Python API (evalpipe/api/, docs/api.md)
    "evalpipe.api": ("DatasetRegistry", "EvalResult", "Evaluator", "GAIA", "Results", "agent", "evaluate", "evaluate_async", "metric",
                     "stale_status", "tool"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
