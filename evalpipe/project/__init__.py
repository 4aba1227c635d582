"""The project floor: the project object, reading and checking the config, loading plugins
(docs/architecture.md, docs/configuration.md#the-project-object).

The names below are imported on first use (PEP 562): the config's schema and loader pull in pydantic and, when a
config is checked, every adapter, runner and metric, which a command that only reads results never needs."""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evalpipe.project import plugins  # noqa: F401  (installs the plugin loader on registry misses)

if TYPE_CHECKING:
    from evalpipe.project.loader import config_from_dict, load_config, parse_config
    from evalpipe.project.project import Project

_LAZY = {"Project": "evalpipe.project.project", "config_from_dict": "evalpipe.project.loader",
         "load_config": "evalpipe.project.loader", "parse_config": "evalpipe.project.loader"}

__all__ = ["Project", "config_from_dict", "load_config", "parse_config"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
