"""Plugins: adapters, metrics and runners from the user's own code, with no edit of this project.

Two ways in (docs/reproducibility.md#plugins):

1. `plugins:` in the config: a list of importable module names. Each is imported by the config check, the code
   location and the CLI; a module registers what it defines at import (`@register_adapter("name")`, ...).
2. Entry points of installed packages, in the groups `evalpipe.adapters`, `evalpipe.metrics`,
   `evalpipe.runners` (PEP 621 `[project.entry-points."evalpipe.adapters"]`): the entry's name is the registry
   name and its value the factory (`pkg.module:MyAdapter`); an entry that points at a module (no `:attr`) is
   imported for its own registrations.

`load_plugins()` does both, once per process (and again for a config file not seen before). The registries
call it before listing their names or failing a lookup, so `evalpipe adapters`, the config check, Dagster and
worker processes all see the same plugins.

A `plugins:` module is looked up on the import path and then in the config file's folder (appended to `sys.path`
for the process), so a module next to the config loads in every process that reads that config (the webserver,
the daemon, run and celery workers) with no PYTHONPATH. What each module registered is kept, so that an unknown
adapter, runner or metric can say that the plugins loaded but registered none of that kind.
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from evalpipe.core import registry
from evalpipe.core.errors import ConfigError

GROUPS = ("evalpipe.adapters", "evalpipe.metrics", "evalpipe.runners")
_LOCK = threading.RLock()
_loaded_entry_points = False
_loaded_configs: set[str] = set()
_busy = False
LOADED: dict[str, str] = {}  # what was loaded: "<group>:<name>" or "module:<name>" -> where from
# plugin module -> {registry kind ("benchmark adapter", "model runner", "metric"): names its import registered}
REGISTERED_BY: dict[str, dict[str, list[str]]] = {}
# the registries' own `kind` words (evalpipe/core/registry.py Registry(kind)), per entry point group
KIND_OF_GROUP = {"evalpipe.adapters": "benchmark adapter", "evalpipe.metrics": "metric",
                 "evalpipe.runners": "model runner"}


def _registrar(group: str):
    if group == "evalpipe.adapters":
        from evalpipe.benchmarks.base import register_adapter

        return register_adapter
    if group == "evalpipe.metrics":
        from evalpipe.metrics.base import register_metric

        return register_metric
    from evalpipe.runners.base import register_runner

    return register_runner


def _registered(group: str) -> set[str]:
    if group == "evalpipe.adapters":
        from evalpipe.benchmarks import list_adapters as names
    elif group == "evalpipe.metrics":
        from evalpipe.metrics import list_metrics as names
    else:
        from evalpipe.runners import list_runners as names
    return set(names())  # no recursion: the hook is a no-op while plugins load


def load_entry_points() -> list[str]:
    """Register every installed package's `evalpipe.*` entry points (once per process)."""
    global _loaded_entry_points
    out: list[str] = []
    if _loaded_entry_points:
        return out
    _loaded_entry_points = True
    from importlib import metadata as importlib_metadata  # (~30 ms to import: only when plugins are loaded)

    for group in GROUPS:
        for ep in importlib_metadata.entry_points(group=group):
            try:
                obj = ep.load()
            except Exception as exc:
                raise ConfigError(f"plugin entry point {ep.name!r} ({ep.value}) in group {group} cannot be loaded: "
                                  f"{type(exc).__name__}: {exc}; fix or uninstall that package") from None
            LOADED[f"{group}:{ep.name}"] = ep.value
            out.append(f"{group}:{ep.name}")
            if isinstance(obj, ModuleType):
                continue  # imported for its own @register_* calls
            if ep.name not in _registered(group):
                _registrar(group)(ep.name, obj)
    return out


def config_plugin_modules(path: str | os.PathLike | None = None) -> list[str]:
    """The `plugins:` list of the config file, read without building the config (no recursion into the check)."""
    import yaml

    from evalpipe.core.config import config_path

    p = Path(path) if path else config_path()
    try:
        # libyaml's loader when built in: read on every CLI start, ~6x faster than pure Python
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except (OSError, yaml.YAMLError):
        return []
    mods = data.get("plugins") if isinstance(data, dict) else None
    return [str(m) for m in mods] if isinstance(mods, list) else []


def add_config_folder_to_path(config_file: str | os.PathLike | None) -> None:
    """Make modules next to the config file importable (appended: an installed module of the same name wins)."""
    from evalpipe.core.config import config_path

    folder = str(Path(config_file or config_path()).expanduser().resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)


def _snapshot() -> dict[str, set[str]]:
    return {KIND_OF_GROUP[g]: _registered(g) for g in GROUPS}


def import_module(name: str, config_file: str | os.PathLike | None = None) -> ModuleType:
    """Import one `plugins:` module (the config file's folder on the import path) and note what it registered.
    Raises what the import raises: the callers word the error."""
    global _busy
    add_config_folder_to_path(config_file)
    if name in sys.modules:  # imported before: what it registered is known already, or can't be told any more
        return sys.modules[name]
    with _LOCK:
        busy, _busy = _busy, True  # the registries' miss hook must not load plugins again while one imports
        try:
            before = _snapshot()
            module = importlib.import_module(name)
            after = _snapshot()
        finally:
            _busy = busy
    REGISTERED_BY[name] = {kind: sorted(after[kind] - before[kind]) for kind in after}
    return module


def import_modules(names: list[str], config_file: str | os.PathLike | None = None) -> list[str]:
    out = []
    for name in names:
        try:
            import_module(name, config_file)
        except Exception as exc:
            raise ConfigError(f"cannot import plugin module {name!r}: {type(exc).__name__}: {exc}; check `plugins:` "
                              "in the config (the module must be installed, on PYTHONPATH or in the config file's "
                              "folder)") from None
        LOADED[f"module:{name}"] = name
        out.append(name)
    return out


def nothing_registered_hint(kind: str) -> str:
    """For an unknown name of a registry `kind`: which `plugins:` modules loaded and what of that kind each
    registered ("" when no plugin module loaded). `kind` is the registry's word or its last word ("adapter")."""
    full = next((k for k in KIND_OF_GROUP.values() if k == kind or k.endswith(" " + kind)), None)
    if full is None or not REGISTERED_BY:
        return ""
    word = full.split()[-1]
    empty = [m for m, regs in REGISTERED_BY.items() if not regs.get(full)]
    some = [f"{m} registered {', '.join(regs[full])}" for m, regs in REGISTERED_BY.items() if regs.get(full)]
    parts = []
    if empty:
        parts.append(f"plugin module{'s' if len(empty) > 1 else ''} {', '.join(empty)} loaded but registered no "
                     f"{word} (a plugin registers one when imported: @register_{word}(\"name\") in that module or "
                     "one it imports)")
    parts += some
    return "; " + "; ".join(parts)


def load_plugins(config_file: str | os.PathLike | None = None) -> list[str]:
    """Entry points, then the config's `plugins:` modules. Safe to call often; re-entrant calls are no-ops."""
    global _busy
    with _LOCK:
        if _busy:
            return []
        _busy = True
        try:
            out = load_entry_points()
            from evalpipe.core.config import config_path

            key = str(Path(config_file).resolve() if config_file else config_path())
            if key not in _loaded_configs:
                _loaded_configs.add(key)
                out += import_modules(config_plugin_modules(key), key)
            return out
        finally:
            _busy = False


def ensure_loaded(*_: Any) -> None:
    """The registries' hook: load plugins, ignoring failures here (the config check reports them in its own words)."""
    try:
        load_plugins()
    except ConfigError:
        pass


registry.on_miss(ensure_loaded)  # a registry miss (an adapter, runner or metric from a plugin) loads plugins
registry.on_unknown(nothing_registered_hint)  # ... and a name still unknown after that says what the plugins gave
