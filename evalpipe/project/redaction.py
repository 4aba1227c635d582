"""What the project hands the redactor (evalpipe.core.redact): the credentials written in the config, the env
var names its models' `api_key_env` give, its `redact_patterns`, its `pii:` setting (the entities to mask), and
the same for the models the checkpoint sensor discovered. Every entry point (the CLI, the code location, the
Python API) installs one with `install_redaction` before it writes anything.

The config file is read here as raw YAML, never validated: what the redactor needs (the credential values, the
`api_key_env` and `tracing.connection_string_env` names, `redact_patterns`, `pii`) are plain values of the file,
the same ones the validated config carries; validating would import every adapter, runner and metric (~0.5 s of
each CLI start, `evalpipe sql` included), and an invalid config must be masked all the same.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable

from evalpipe.core.config import config_path
from evalpipe.core.redact import install_secret_source, secrets_in_config
from evalpipe.store.models_registry import discovered_models, registry_dir

if TYPE_CHECKING:
    from evalpipe.project.project import Project


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


def _tracing_secret_names(tracing: Any) -> list[str]:
    """The env var holding Azure Monitor's connection string (tracing.connection_string_env; Azure's default name
    always): its value is a secret though its name does not look like one."""
    name = tracing.get("connection_string_env") if isinstance(tracing, dict) else None
    return ["APPLICATIONINSIGHTS_CONNECTION_STRING", *([name] if isinstance(name, str) and name else [])]


def _key_env_names(raw: Any) -> list[str]:
    """The `api_key_env` of each model under `models:` of a raw config (as ModelConfig.from_dict reads them)."""
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, dict):
        return []
    return [m["api_key_env"] for m in models.values()
            if isinstance(m, dict) and isinstance(m.get("api_key_env"), str) and m["api_key_env"]]


def _patterns_of(raw: Any) -> list[str]:
    """`redact_patterns` of a raw config: one regex or a list of them (the schema's shapes; any other is ignored)."""
    pats = raw.get("redact_patterns") if isinstance(raw, dict) else None
    if isinstance(pats, str):
        return [pats]
    return list(pats) if isinstance(pats, list) and all(isinstance(p, str) for p in pats) else []


_RAW: dict[tuple[str, float], Any] = {}


def raw_config(path: Any) -> Any:
    """The config file at `path` as plain YAML data (None: missing or unreadable), cached by path and mtime."""
    key = (str(path), _mtime(path))
    if key not in _RAW:
        if len(_RAW) > 16:
            _RAW.clear()
        try:
            import yaml

            # libyaml's loader when built in: this parse runs on every CLI start, ~6x faster than pure Python
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            with open(path, encoding="utf-8") as fh:
                _RAW[key] = yaml.load(fh.read(), Loader=loader)
        except Exception:  # unreadable YAML: the key-name and shape rules still apply
            _RAW[key] = None
    return _RAW[key]


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
        raw = raw_config(config_path())
        if raw is not None:
            try:
                secrets_in_config(raw, None, secrets)
            except Exception:  # an odd shape: the key-name and shape rules still apply
                pass
        names = _key_env_names(raw)
        names += _tracing_secret_names(raw.get("tracing") if isinstance(raw, dict) else None)
        _discovered_inputs(secrets, names)
        return secrets, names, _patterns_of(raw)

    def pii(self) -> Any:
        """The config's `pii:` value (read leniently, like the secrets: an invalid config still masks PII)."""
        raw = raw_config(config_path())
        return raw.get("pii") if isinstance(raw, dict) else None


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
        names += _tracing_secret_names(self.project.config.tracing)
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
