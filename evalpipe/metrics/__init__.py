"""Metrics behind a registry: `register_metric`, `get_metric`, `build_metric`; `aggregate` for the rollup."""
from evalpipe.metrics.base import (JudgeInput, Metric, ScoreColumns, build_metric, get_metric, judgements_version,
                                   list_metrics, register_metric)
from evalpipe.metrics.aggregate import USAGE_METRICS, aggregate
# importing the modules registers the built-in metrics
from evalpipe.metrics import code_execution, exact_match, hms, list_match, llm_judge, semantic  # noqa: F401
from evalpipe.metrics import lenient  # noqa: F401  (includes, choice, regex, last_number)
from evalpipe.metrics import bfcl_ast  # noqa: F401  (BFCL's AST checker, issue 10)
from evalpipe.metrics import tool_integration  # noqa: F401  (tool-integration harness, issue 10)
from evalpipe.metrics import dabstep, kaggle  # noqa: F401  (DSGym's domain metrics, issue 22)
from evalpipe.metrics import lm_eval_scoring  # noqa: F401  (an lm-evaluation-harness task's own scoring, issue 23)
from evalpipe.metrics import inspect_scores  # noqa: F401  (an Inspect AI log's own scores, issue 32)

__all__ = ["JudgeInput", "Metric", "ScoreColumns", "USAGE_METRICS", "aggregate", "build_metric", "get_metric", "judgements_version",
           "list_metrics", "register_metric"]
