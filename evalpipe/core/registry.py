"""A tiny name -> factory registry, shared by adapters, runners and metrics."""
from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

from evalpipe.core.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str, factory: Callable[..., T] | None = None, *, replace: bool = False):
        """Register `factory` under `name`; usable as `register(name, f)` or as a decorator `@register(name)`."""

        def add(f: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories and not replace and self._factories[name] is not f:
                raise ValueError(f"{self.kind} {name!r} is already registered; pass replace=True to override it")
            self._factories[name] = f
            return f

        return add(factory) if factory is not None else add

    def get(self, name: str) -> Callable[..., T]:
        if name not in self._factories:
            _load_plugins()  # an adapter/metric/runner from a plugin (evalpipe/project/plugins.py)
        try:
            return self._factories[name]
        except KeyError:
            raise ConfigError(f"unknown {self.kind} {name!r}; available: {', '.join(sorted(self._factories))}"
                              f"{unknown_hint(self.kind)}") from None

    def names(self) -> list[str]:
        _load_plugins()
        return sorted(self._factories)


# Run on a registry miss before giving up: the project floor installs its plugin loader here when it is imported
# (evalpipe/project/plugins.py), so this base module imports nothing above it.
_MISS_HOOKS: list[Callable[[], None]] = []


def on_miss(hook: Callable[[], None]) -> None:
    """Install `hook` (idempotent): called when a name is not registered, e.g. to load plugins."""
    if hook not in _MISS_HOOKS:
        _MISS_HOOKS.append(hook)


_UNKNOWN_HINTS: list[Callable[[str], str]] = []


def on_unknown(hint: Callable[[str], str]) -> None:
    """Install `hint(kind)` (idempotent): text added to an unknown-name error, e.g. what the plugins registered."""
    if hint not in _UNKNOWN_HINTS:
        _UNKNOWN_HINTS.append(hint)


def unknown_hint(kind: str) -> str:
    return "".join(hint(kind) for hint in _UNKNOWN_HINTS)


def _load_plugins() -> None:
    for hook in list(_MISS_HOOKS):
        hook()


def import_callable(spec: str, label: str) -> Callable[..., Any]:
    """The callable named by `package.module:attr.path`; ConfigError messages start with `label` (e.g. "agent 'x'")."""
    import importlib

    module_name, _, attr = spec.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{label}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"{label}: {module_name!r} has no attribute {attr!r}")
    if not callable(obj):
        raise ConfigError(f"{label} is not callable")
    return obj
