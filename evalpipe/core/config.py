"""The evaluation config: benchmarks and models declared in one YAML file.

The file is `evals.yaml` at the repo root unless `EVALS_CONFIG` names another. Adding a model or a benchmark
is a config change only: benchmark splits become `benchmark_split` partitions, models become `model`
dynamic partitions (synced by a sensor and by the `run` command).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key, split_key

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runner settings every model entry may carry; anything else under a model goes to `options`.
_MODEL_FIELDS = {"runner", "model", "api_base", "api_key_env", "params", "options", "description"}
_SPLIT_FIELDS = {"adapter", "splits", "options", "metrics", "prompt_template", "description", "tools", "prompt_wrapper"}
# Benchmark-level keys that are stored in each split's options (docs/interfaces.md); a split may override them.
_OPTION_FIELDS = ("tools", "prompt_wrapper")


def config_path() -> Path:
    env = os.environ.get("EVALS_CONFIG")
    if env:
        return Path(env).expanduser().resolve()
    return REPO_ROOT / "evals.yaml"


def dagster_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME") or REPO_ROOT / "dagster_home").expanduser().resolve()


def warehouse_path() -> Path:
    env = os.environ.get("EVALS_WAREHOUSE")
    return Path(env).expanduser().resolve() if env else dagster_home() / "warehouse.duckdb"


@dataclass(frozen=True)
class ModelConfig:
    """One model to evaluate: which runner, which model string, how to decode."""

    key: str
    runner: str = "echo"
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None  # the NAME of an env var; the key itself is never stored
    params: dict[str, Any] = field(default_factory=dict)  # temperature, max_tokens, seed, stop, ...
    options: dict[str, Any] = field(default_factory=dict)  # runner-specific settings
    description: str = ""

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def with_overrides(self, params: dict | None = None, options: dict | None = None) -> "ModelConfig":
        return ModelConfig(
            key=self.key, runner=self.runner, model=self.model, api_base=self.api_base,
            api_key_env=self.api_key_env, params={**self.params, **(params or {})},
            options={**self.options, **(options or {})}, description=self.description,
        )

    @classmethod
    def from_dict(cls, name: str, raw: dict[str, Any]) -> "ModelConfig":
        if not isinstance(raw, dict):
            raise ConfigError(f"model {name!r}: expected a mapping with at least 'runner', got {type(raw).__name__}")
        extra = {k: v for k, v in raw.items() if k not in _MODEL_FIELDS}
        return cls(
            key=sanitize_key(name),
            runner=str(raw.get("runner", "echo")),
            model=raw.get("model"),
            api_base=raw.get("api_base"),
            api_key_env=raw.get("api_key_env"),
            params=dict(raw.get("params") or {}),
            options={**extra, **dict(raw.get("options") or {})},
            description=str(raw.get("description", "")),
        )


@dataclass(frozen=True)
class SplitConfig:
    """One benchmark split: the unit of the `benchmark_split` partition dimension."""

    key: str  # e.g. "gaia/validation"
    benchmark: str
    split: str
    adapter: str
    options: dict[str, Any]
    metrics: list[Any] | None  # None: the adapter's defaults
    prompt_template: str | None
    base_dir: Path  # relative paths in options resolve against the config file's folder

    def resolve(self, path: str | os.PathLike) -> Path:
        p = Path(os.path.expandvars(str(path))).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()


@dataclass
class EvalConfig:
    path: Path
    splits: dict[str, SplitConfig]
    models: dict[str, ModelConfig]
    default_models: list[str]
    default_benchmarks: list[str]
    judges: dict[str, Any]
    settings: dict[str, Any]
    raw: dict[str, Any]

    def split(self, key: str) -> SplitConfig:
        try:
            return self.splits[key]
        except KeyError:
            known = ", ".join(sorted(self.splits)) or "none"
            raise ConfigError(f"unknown benchmark split {key!r} (configured: {known}); add it under 'benchmarks' in {self.path}") from None

    @property
    def checkpoints(self) -> dict[str, Any]:
        """`checkpoints:` settings of the checkpoint sensor (docs/operations.md)."""
        return dict(self.raw.get("checkpoints") or {})

    @property
    def artifacts(self) -> dict[str, Any]:
        """`artifacts:` settings: where run artifacts go (docs/operations.md)."""
        return dict(self.raw.get("artifacts") or {})

    @property
    def tracing(self) -> dict[str, Any]:
        """`tracing:` settings: OpenTelemetry export (docs/operations.md)."""
        return dict(self.raw.get("tracing") or {})

    @property
    def redact_patterns(self) -> list[str]:
        """`redact_patterns:` extra regexes masked on every write path (docs/operations.md)."""
        return [str(p) for p in self.raw.get("redact_patterns") or []]

    def model(self, key: str) -> ModelConfig:
        from evalpipe.store.models_registry import discovered_models

        if key in self.models:
            return self.models[key]
        found = discovered_models().get(key)
        if found is not None:
            return found
        same = [k for k in self.models if k.split("@", 1)[0] == key]
        if "@" not in key and len(same) == 1:  # an entry with `experiment:` named without its suffix
            return self.models[same[0]]
        if "@" in key:  # [reproducibility] `<model>@<experiment>` (evalpipe run --experiment): its own partition
            base, experiment = key.split("@", 1)
            try:
                m = self.model(base)
            except ConfigError:  # `name@exp1` configured, `name@exp2` asked for: the same entry, another experiment
                same = [v for k, v in self.models.items() if k.split("@", 1)[0] == base]
                m = same[0] if len(same) == 1 else None
            if m is not None and experiment:
                return ModelConfig(key=key, runner=m.runner, model=m.model, api_base=m.api_base,
                                   api_key_env=m.api_key_env, params=dict(m.params),
                                   options={**m.options, "experiment": experiment}, description=m.description)
        known = ", ".join(sorted(self.models)) or "none"
        raise ConfigError(f"unknown model {key!r} (configured: {known}); add it under 'models' in {self.path}")


def _load_yaml(path: Path) -> dict[str, Any]:
    """Read and validate the config file (evalpipe/project/schema.py): every mistake is a `file:line:` error."""
    from evalpipe.project.schema import validate_file

    return validate_file(path)


def parse_config(data: dict[str, Any], path: Path) -> EvalConfig:
    base_dir = path.parent
    splits: dict[str, SplitConfig] = {}
    benchmarks = data.get("benchmarks") or {}
    if not isinstance(benchmarks, dict):
        raise ConfigError(f"{path}: 'benchmarks' must be a mapping of benchmark name to settings")
    for name, raw in benchmarks.items():
        if not isinstance(raw, dict) or "adapter" not in raw:
            raise ConfigError(f"{path}: benchmark {name!r} needs an 'adapter' (see `evalpipe adapters`)")
        unknown = set(raw) - _SPLIT_FIELDS
        if unknown:
            raise ConfigError(f"{path}: benchmark {name!r} has unknown keys {sorted(unknown)}; allowed: {sorted(_SPLIT_FIELDS)}")
        split_entries = raw.get("splits") or {"test": {}}
        if isinstance(split_entries, list):
            split_entries = {s: {} for s in split_entries}
        for split, overrides in split_entries.items():
            overrides = dict(overrides or {})
            options = copy.deepcopy(dict(raw.get("options") or {}))
            for opt in _OPTION_FIELDS:
                if raw.get(opt) is not None:
                    options[opt] = copy.deepcopy(raw[opt])
            metrics = overrides.pop("metrics", raw.get("metrics"))
            template = overrides.pop("prompt_template", raw.get("prompt_template"))
            options.update(overrides)
            key = split_key(name, split)
            if key in splits:
                raise ConfigError(f"{path}: benchmark split key {key!r} is declared twice")
            splits[key] = SplitConfig(
                key=key, benchmark=str(name), split=str(split), adapter=str(raw["adapter"]),
                options=options, metrics=list(metrics) if metrics is not None else None,
                prompt_template=template, base_dir=base_dir,
            )
    models_raw = data.get("models") or {}
    if not isinstance(models_raw, dict):
        raise ConfigError(f"{path}: 'models' must be a mapping of model name to settings")
    models: dict[str, ModelConfig] = {}
    for name, raw in models_raw.items():
        m = ModelConfig.from_dict(str(name), raw)
        experiment = m.options.get("experiment")
        if experiment and not m.key.endswith(f"@{sanitize_key(str(experiment))}"):
            # [reproducibility] an experiment gets its own `model` partition key: <model>@<experiment>
            m = ModelConfig(key=f"{m.key}@{sanitize_key(str(experiment))}", runner=m.runner, model=m.model,
                            api_base=m.api_base, api_key_env=m.api_key_env, params=m.params, options=m.options,
                            description=m.description)
        if m.key in models:
            raise ConfigError(f"{path}: models {name!r} and another one both map to partition key {m.key!r}")
        models[m.key] = m
    defaults = data.get("default_models") or list(models)[:1]
    if isinstance(defaults, str):
        defaults = [defaults]
    default_models = [sanitize_key(d) for d in defaults]
    # a default named without its @experiment suffix: the one model entry of that name
    default_models = [d if d in models else next((k for k in models if k.split("@", 1)[0] == d), d)
                      for d in default_models]
    for d in default_models:
        if d not in models:
            raise ConfigError(f"{path}: default model {d!r} is not under 'models'")
    default_benchmarks = data.get("default_benchmarks") or sorted({s.benchmark for s in splits.values()})
    if isinstance(default_benchmarks, str):
        default_benchmarks = [default_benchmarks]
    for b in default_benchmarks:
        if b not in benchmarks:
            raise ConfigError(f"{path}: default benchmark {b!r} is not under 'benchmarks'")
    # Operations settings (docs/operations.md); their contents are checked where they are used.
    for key, kind in (("checkpoints", dict), ("artifacts", dict), ("tracing", dict), ("redact_patterns", list)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise ConfigError(f"{path}: '{key}' must be a {'mapping' if kind is dict else 'list'} (see docs/operations.md)")
    return EvalConfig(
        path=path, splits=splits, models=models, default_models=default_models,
        default_benchmarks=[str(b) for b in default_benchmarks],
        judges=dict(data.get("judges") or {}), settings=dict(data.get("settings") or {}), raw=data,
    )


_CACHE: dict[tuple[str, float], EvalConfig] = {}


def load_config(path: str | os.PathLike | None = None) -> EvalConfig:
    """Load (and cache by path and mtime) the evaluation config."""
    p = Path(path).expanduser().resolve() if path else config_path()
    mtime = p.stat().st_mtime if p.exists() else -1.0
    cached = _CACHE.get((str(p), mtime))
    if cached is None:
        cached = parse_config(_load_yaml(p), p)
        _CACHE[(str(p), mtime)] = cached
    return cached
