"""evalpipe: the plain-Python core of the evaluation pipeline (adapters, runners, metrics, warehouse).

The Dagster layer (`eval_assets`, `resources`, `partitions`) wires these together.
"""
from evalpipe.benchmarks import Adapter, get_adapter, list_adapters, register_adapter
from evalpipe.config import EvalConfig, ModelConfig, SplitConfig, load_config
from evalpipe.errors import ConfigError, DataError, EvalError, WarehouseError
from evalpipe.metrics import Metric, get_metric, list_metrics, register_metric
from evalpipe.runners import Runner, get_runner, list_runners, register_runner
from evalpipe.types import Generation, RolloutRequest, Sample, Score
from evalpipe.warehouse import Warehouse
from evalpipe.api import EvalResult, evaluate, evaluate_async  # the Python API (evalpipe/api.py)

__all__ = [
    "Adapter", "ConfigError", "DataError", "EvalConfig", "EvalError", "Generation", "Metric", "ModelConfig",
    "RolloutRequest", "Runner", "Sample", "Score", "SplitConfig", "Warehouse", "WarehouseError", "get_adapter",
    "get_metric", "get_runner", "list_adapters", "list_metrics", "list_runners", "load_config", "register_adapter",
    "register_metric", "register_runner", "EvalResult", "evaluate", "evaluate_async",
]
