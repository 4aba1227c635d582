"""Benchmark adapters behind a registry: `register_adapter`, `get_adapter`, `list_adapters`."""
from evalpipe.benchmarks.base import Adapter, adapter_for, dataset_header, get_adapter, list_adapters, register_adapter
from evalpipe.benchmarks import file, gaia, humaneval  # noqa: F401  (register the built-in adapters and the `gaia` metric)
from evalpipe.benchmarks import daeval, discoverybench, qrdata  # noqa: F401  (data-science benchmarks, issue 11)
from evalpipe.benchmarks import bio  # noqa: F401  (DSGym's Bio, issue 22)
from evalpipe.benchmarks import bfcl  # noqa: F401  (Berkeley Function Calling Leaderboard, issue 10)
from evalpipe.benchmarks import tool_integration  # noqa: F401  (tool-integration harness, issue 10)
from evalpipe.benchmarks import records  # noqa: F401  (records held in memory: the Python API, docs/api.md)
from evalpipe.benchmarks import inspect_log  # noqa: F401  (an Inspect AI log's samples, docs/interop.md)
from evalpipe.benchmarks import lm_eval_task  # noqa: F401  (lm-evaluation-harness tasks, issue 23)
from evalpipe.benchmarks import tau2  # noqa: F401  (tau2-bench, issue 33; registers tau2_reward)

__all__ = ["Adapter", "adapter_for", "dataset_header", "get_adapter", "list_adapters", "register_adapter"]
