"""Benchmark adapters behind a registry: `register_adapter`, `get_adapter`, `list_adapters`."""
from evalpipe.benchmarks.base import Adapter, adapter_for, get_adapter, list_adapters, register_adapter
from evalpipe.benchmarks import file  # noqa: F401  (registers the built-in adapters)

__all__ = ["Adapter", "adapter_for", "get_adapter", "list_adapters", "register_adapter"]
