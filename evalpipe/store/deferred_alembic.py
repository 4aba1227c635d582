"""Dagster's SQLite storages without importing alembic until a migration needs it.

`dagster._core.storage.sql` imports alembic at its top (~0.3 s of CPU with the mako, pygments and SQL dialect modules
it pulls in: a sixth of a cold one-sample `evalpipe run`), yet an existing instance at the head revision only needs
two facts from it per storage: the database's revision (one row of `alembic_version`) and the head revision of the
installed Dagster (fixed per Dagster version). So:

- `import_sql_module()` imports that module with the seven alembic names it binds standing in for themselves: each
  one imports the real object on first use (creating, stamping or migrating a database) and puts it in its place;
- `use_config_refs(module)` gives a Dagster storage module `get_alembic_config` returning a `ConfigRef` (the file
  and script location only); the alembic calls that take a config (`stamp_alembic_rev`, `run_alembic_upgrade`,
  `run_alembic_downgrade`) get the real config in its place, so they work as before;
- `head_revision(ref)`: the head, kept in `<folder of the database>/.template/alembic-head-<dagster version>.txt`
  once alembic has found it (the instance's creation does that, before any run).
"""
from __future__ import annotations

import importlib
import os
import sys
import threading
import types
from typing import Any

_NAMES = {  # what dagster._core.storage.sql takes from alembic at import
    "alembic.command": ("downgrade", "stamp", "upgrade"),
    "alembic.config": ("Config",),
    "alembic.runtime.environment": ("EnvironmentContext",),
    "alembic.runtime.migration": ("MigrationContext",),
    "alembic.script": ("ScriptDirectory",),
}
_SQL = "dagster._core.storage.sql"
_import_lock = threading.Lock()


class Deferred:
    """One alembic name in Dagster's sql module until its first use: calling it or reading an attribute imports the
    real object, which then replaces this one in the module."""

    def __init__(self, module: str, name: str):
        self._module, self._name = module, name

    def resolve(self) -> Any:
        real = getattr(importlib.import_module(self._module), self._name)
        sql = sys.modules.get(_SQL)
        if sql is not None and getattr(sql, self._name, None) is self:
            setattr(sql, self._name, real)
        return real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and inspect probe dunders: not a reason to import alembic
            raise AttributeError(attr)
        return getattr(self.resolve(), attr)

    def __repr__(self) -> str:
        return f"<deferred {self._module}.{self._name}>"


def import_sql_module() -> types.ModuleType:
    """`dagster._core.storage.sql`, imported without alembic when neither is imported yet (else as it is)."""
    with _import_lock:
        if _SQL in sys.modules or "alembic" in sys.modules:
            return importlib.import_module(_SQL)
        stubs: dict[str, types.ModuleType] = {}
        for name in ("alembic", "alembic.runtime"):
            stubs[name] = types.ModuleType(name)
            stubs[name].__path__ = []  # a package, so its submodules resolve to the stubs below
        for module, names in _NAMES.items():
            stub = stubs[module] = types.ModuleType(module)
            for n in names:
                setattr(stub, n, Deferred(module, n))
        sys.modules.update(stubs)
        try:
            return importlib.import_module(_SQL)
        finally:  # the real alembic imports normally from now on
            for name, stub in stubs.items():
                if sys.modules.get(name) is stub:
                    del sys.modules[name]


class ConfigRef:
    """What `get_alembic_config(dunder_file, ...)` was asked for, without building alembic's Config."""

    def __init__(self, dunder_file: str, config_path: str = "alembic/alembic.ini", script_location: str | None = None):
        self.args = (dunder_file, config_path, script_location)
        self.location = script_location or sys.modules[_SQL].ALEMBIC_SCRIPTS_LOCATION

    def real(self) -> Any:
        return sys.modules[_SQL].get_alembic_config(*self.args)

    def get_main_option(self, name: str, default: Any = None) -> Any:
        return self.location if name == "script_location" else self.real().get_main_option(name, default)


def real_config(config: Any) -> Any:
    return config.real() if isinstance(config, ConfigRef) else config


def _with_real_config(fn: Any) -> Any:
    def call(alembic_config: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(real_config(alembic_config), *args, **kwargs)

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "call")
    return call


def use_config_refs(module: types.ModuleType) -> None:
    """A Dagster storage module's alembic config becomes a ConfigRef, resolved by the calls that use alembic."""
    module.get_alembic_config = ConfigRef
    for name in ("stamp_alembic_rev", "run_alembic_upgrade", "run_alembic_downgrade"):
        if hasattr(module, name):
            setattr(module, name, _with_real_config(getattr(sys.modules[_SQL], name)))


_heads: dict[tuple[str, str], str] = {}


def _heads_file(folder: str) -> str:
    from dagster import __version__ as dagster_version

    if os.path.basename(folder) != ".template":  # (the run template itself is made inside .template)
        folder = os.path.join(folder, ".template")
    return os.path.join(folder, f"alembic-head-{dagster_version}.txt")


def head_revision(config: Any, db_path: str | None) -> Any:
    """The head revision of `config`'s migrations: from memory, else the file beside the database (`db_path`'s
    folder), else alembic's ScriptDirectory (then written to that file)."""
    location = config.get_main_option("script_location")
    folder = os.path.dirname(os.path.abspath(db_path)) if db_path and db_path != ":memory:" else None
    key = (location, folder or "")
    if key in _heads:
        return _heads[key]
    path = _heads_file(folder) if folder else None
    head = None
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                saved_location, _, saved = fh.read().partition("\n")
            head = saved.strip() if saved_location == location and saved.strip() else None
        except OSError:
            pass
    if head is None:
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(real_config(config)).as_revision_number("head")
        if path and isinstance(head, str):
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(f"{location}\n{head}\n")
                os.replace(tmp, path)  # atomic: a concurrent reader sees the whole file or none
            except OSError:  # a read-only home: found again next time
                pass
    _heads[key] = head
    return head
