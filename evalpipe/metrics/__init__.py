"""Metrics behind a registry: `register_metric`, `get_metric`, `build_metric`; `aggregate` for the rollup."""
from evalpipe.metrics.base import JudgeInput, Metric, build_metric, get_metric, list_metrics, register_metric
from evalpipe.metrics.aggregate import aggregate
from evalpipe.metrics import exact_match  # noqa: F401  (registers the built-in metrics)

__all__ = ["JudgeInput", "Metric", "aggregate", "build_metric", "get_metric", "list_metrics", "register_metric"]
