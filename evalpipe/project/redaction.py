"""What the project hands the redactor (evalpipe.core.redact): the credentials written in the config, the env
var names its models' `api_key_env` give, its `redact_patterns`, its `pii:` setting (the entities to mask), and
the same for the models the checkpoint sensor discovered. Every entry point (the CLI, the code location, the
Python API) installs one with `install_redaction` before it writes anything.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Callable, Hashable, Iterable

from evalpipe.core.config import config_path
from evalpipe.core.redact import install_secret_source, secrets_in_config
from evalpipe.project.loader import load_config
from evalpipe.project.project import Project
from evalpipe.store.models_registry import discovered_models, registry_dir


def _mtime(path: Any) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return -1.0


def _discovered_inputs(secrets: set[str], names: list[str]) -> None:
    try:
        models = discovered_models().values()
    except Exception:
        return
    for m in models:
        secrets_in_config(dataclasses.asdict(m), None, secrets)
        if m.api_key_env:
            names.append(m.api_key_env)


def _tracing_secret_names(cfg: Any) -> list[str]:
    """The env var holding Azure Monitor's connection string (tracing.connection_string_env; Azure's default name
    always): its value is a secret though its name does not look like one."""
    return ["APPLICATIONINSIGHTS_CONNECTION_STRING", *filter(None, [cfg.tracing.get("connection_string_env")])]


class ConfigFileSecrets:
    """The config file the environment names (`EVALS_CONFIG`, else evals.yaml), followed as it changes: read
    leniently, so an invalid config (the CLI's error about it included) still has its secrets masked."""

    def __init__(self) -> None:
        self._paths: dict[int, tuple[str, str]] = {}

    def _paths_for(self, env_key: int) -> tuple[str, str]:
        paths = self._paths.get(env_key)
        if paths is None:  # resolving paths is slow; they depend only on the env
            if len(self._paths) > 64:
                self._paths.clear()
            paths = self._paths.setdefault(env_key, (str(config_path()), str(registry_dir())))
        return paths

    def signature(self, env_key: int) -> Hashable:
        cfg, models = self._paths_for(env_key)
        return (cfg, models, _mtime(cfg), _mtime(models))

    def inputs(self) -> tuple[Iterable[str], Iterable[str], Iterable[str]]:
        secrets: set[str] = set()
        names: list[str] = []
        try:
            import yaml

            p = config_path()
            if p.exists():
                # libyaml's loader when built in: this parse runs on every CLI start, ~6x faster than pure Python
                loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
                secrets_in_config(yaml.load(p.read_text(encoding="utf-8"), Loader=loader), None, secrets)
        except Exception:  # unreadable YAML: the key-name and shape rules still apply
            pass
        patterns: Any = ()
        try:
            cfg = load_config()
            names += [m.api_key_env for m in cfg.models.values() if m.api_key_env]
            names += _tracing_secret_names(cfg)
            patterns = cfg.raw.get("redact_patterns") or []
        except Exception:  # no config yet (or an invalid one): the name-based rule still applies
            pass
        _discovered_inputs(secrets, names)
        return secrets, names, patterns

    def pii(self) -> Any:
        """The config's `pii:` value (read leniently, like the secrets: an invalid config still masks PII)."""
        try:
            return load_config().raw.get("pii")
        except Exception:
            pass
        try:
            import yaml

            p = config_path()
            raw = yaml.safe_load(p.read_text(encoding="utf-8")) if p.exists() else None
            return raw.get("pii") if isinstance(raw, dict) else None
        except Exception:
            return None


class ProjectSecrets:
    """One project's (e.g. built in memory by the Python API), together with the environment's config file and
    discovered models (masked before there was a project object: masking them too costs nothing)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._file = ConfigFileSecrets()

    def signature(self, env_key: int) -> Hashable:
        return self._file.signature(env_key)

    def inputs(self) -> tuple[Iterable[str], Iterable[str], Iterable[str]]:
        secrets, names, patterns = self._file.inputs()
        if isinstance(patterns, str):
            patterns = [patterns]
        secrets = set(secrets) | set(self.project.secrets)
        names = list(names) + [m.api_key_env for m in self.project.config.models.values() if m.api_key_env]
        names += _tracing_secret_names(self.project.config)
        return secrets, names, [*patterns, *self.project.redact_patterns]

    def pii(self) -> Any:
        """The project's `pii:` (an in-memory project's wins over the environment's config file)."""
        own = self.project.config.raw.get("pii")
        return own if own is not None else self._file.pii()


_installed: tuple[str, int] | None = None


def install_redaction(project: Project | None = None) -> None:
    """Mask the project's secrets on every write path of this process from now on. No project, or one from a
    file: the config file of the environment, followed as it changes (the CLI and the code location)."""
    global _installed
    in_memory = project is not None and project.config_path is None
    key = ("project", id(project)) if in_memory else ("file", 0)
    if key == _installed:  # the same source: keep the compiled redactor
        return
    install_secret_source(ProjectSecrets(project) if in_memory else ConfigFileSecrets())
    _installed = key



class GivenSecrets:
    """Secrets handed over as values (a spawned worker gets those of an in-memory project this way)."""

    def __init__(self, secrets: Iterable[str], key_env_names: Iterable[str], patterns: Iterable[str],
                 pii: Any = None) -> None:
        self._inputs = (tuple(secrets), tuple(key_env_names), tuple(patterns))
        self._pii = pii

    def signature(self, env_key: int) -> Hashable:
        return None

    def inputs(self) -> tuple[Iterable[str], Iterable[str], Iterable[str]]:
        return self._inputs

    def pii(self) -> Any:
        return self._pii


def prepare_worker(given: tuple[Any, ...] | None = None) -> None:
    """First thing in a spawned worker process (rollout_shards): the plugins, and the secrets of the project of
    the process that spawned it (a spawned process starts with neither). None: the environment's config file."""
    from evalpipe.project.plugins import load_plugins

    load_plugins()
    if given is None:
        install_redaction()
    else:
        install_secret_source(GivenSecrets(*given))


def worker_init_for(project: Project) -> Callable[[], None]:
    """`prepare_worker` bound to what `project` masks, picklable (a Project is not)."""
    if project.config_path is not None:
        return functools.partial(prepare_worker, None)
    source = ProjectSecrets(project)
    secrets, names, patterns = source.inputs()
    return functools.partial(prepare_worker, (tuple(secrets), tuple(names), tuple(patterns), source.pii()))
