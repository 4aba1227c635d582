"""The project object: one evaluation setup (the config, where the instance, warehouse and artifacts live, what
to mask), built once by an entry point and handed down.

    Project.from_file()                     # the CLI and the code location: EVALS_CONFIG / DAGSTER_HOME /
                                            # EVALS_WAREHOUSE, else evals.yaml and ./dagster_home
    Project.from_dict({...}, base_dir=".")  # the Python API: a config built in memory, no file

`from_file` is where the process environment is read; everything below the entry points gets the project (or
the part it needs) as an argument. eval_assets/factory.py turns a project into Dagster Definitions.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.config import EvalConfig, config_path, dagster_home, warehouse_path
from evalpipe.core.redact import secrets_in_config
from evalpipe.project.loader import IN_MEMORY_NAME, config_from_dict, load_config

ARTIFACTS_ENV = "EVALS_ARTIFACTS"  # (same name as evalpipe/store/artifacts.py reads today)


@dataclass(frozen=True, eq=False)
class Project:
    """An evaluation project. Frozen: a different config is a different project (build another)."""

    config: EvalConfig
    config_path: Path | None  # None: built in memory (Project.from_dict)
    home: Path  # the Dagster instance's home (run storage, journals, model registry)
    warehouse: Path  # the DuckDB warehouse file
    artifacts_root: Path  # run folders (docs/operations.md)
    secrets: tuple[str, ...] = field(default=(), repr=False)  # credential values written in the config
    redact_patterns: tuple[str, ...] = ()  # `redact_patterns:` regexes

    @classmethod
    def from_file(cls, path: str | os.PathLike | None = None, home: str | os.PathLike | None = None,
                  warehouse: str | os.PathLike | None = None) -> "Project":
        """The project of a config file. Unset arguments come from the environment: `EVALS_CONFIG` (else
        evals.yaml at the repo root), `DAGSTER_HOME` (else ./dagster_home of the repo), `EVALS_WAREHOUSE` (else
        warehouse.duckdb in the home)."""
        p = Path(path).expanduser().resolve() if path else config_path()
        return cls._build(load_config(p), p, home, warehouse)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], base_dir: str | os.PathLike = ".", home: str | os.PathLike | None = None,
                  warehouse: str | os.PathLike | None = None) -> "Project":
        """A project whose config is built in Python (the same keys as evals.yaml), checked like a file. Relative
        paths in it resolve against `base_dir`."""
        return cls._build(config_from_dict(raw, base_dir), None, home, warehouse)

    @classmethod
    def for_config(cls, cfg: EvalConfig, home: str | os.PathLike | None = None,
                   warehouse: str | os.PathLike | None = None) -> "Project":
        """The project of an already parsed config (from a file, or in memory)."""
        path = None if cfg.path.name == IN_MEMORY_NAME else cfg.path
        return cls._build(cfg, path, home, warehouse)

    @classmethod
    def _build(cls, cfg: EvalConfig, path: Path | None, home: Any, warehouse: Any) -> "Project":
        home_dir = Path(home).expanduser().resolve() if home else dagster_home()
        if warehouse:
            wh = Path(warehouse).expanduser().resolve()
        elif home:  # a home given without a warehouse: the warehouse lives in it
            wh = home_dir / "warehouse.duckdb"
        else:
            wh = warehouse_path()
        return cls(config=cfg, config_path=path, home=home_dir, warehouse=wh,
                   artifacts_root=_artifacts_root(cfg, home_dir), secrets=_config_secrets(cfg),
                   redact_patterns=tuple(cfg.redact_patterns))

    def reload(self) -> "Project":
        """The project as its file reads now (the loader caches by mtime: cheap when unchanged); an in-memory
        project is returned as it is."""
        if self.config_path is None:
            return self
        cfg = load_config(self.config_path)
        return self if cfg is self.config else dataclasses.replace(
            self, config=cfg, artifacts_root=_artifacts_root(cfg, self.home), secrets=_config_secrets(cfg),
            redact_patterns=tuple(cfg.redact_patterns))

    @property
    def base_dir(self) -> Path:
        """Where relative paths of the config resolve: the config file's folder, or from_dict's base_dir."""
        return self.config.path.parent

    @property
    def split_keys(self) -> list[str]:
        return sorted(self.config.splits)

    def __repr__(self) -> str:
        where = self.config_path or f"in memory, base {self.base_dir}"
        return f"Project({where}; home={self.home}; {len(self.config.splits)} split(s), {len(self.config.models)} model(s))"


def _artifacts_root(cfg: EvalConfig, home: Path) -> Path:
    """`EVALS_ARTIFACTS`, else `artifacts.dir` of the config (relative to its folder), else <home>/artifacts."""
    env = os.environ.get(ARTIFACTS_ENV)
    if env:
        return Path(env).expanduser().resolve()
    configured = cfg.artifacts.get("dir")
    if configured:
        p = Path(os.path.expandvars(str(configured))).expanduser()
        return p if p.is_absolute() else (cfg.path.parent / p).resolve()
    return home / "artifacts"


def _config_secrets(cfg: EvalConfig) -> tuple[str, ...]:
    """Credential values written in the config (api keys, URL passwords, ...): masked on every write path."""
    found: set[str] = set()
    secrets_in_config(cfg.raw, None, found)
    return tuple(sorted(found))
