"""The evaluation config model: benchmarks, models and settings, as parsed from `evals.yaml` or a dict.

Loading (validation, parsing, caching) is the project floor's job (evalpipe/project/loader.py); the project
object (evalpipe/project/project.py) holds one EvalConfig. Benchmark splits and models become the
`benchmark_split` and `model` dynamic partitions (added by the sensors and by the launcher).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runner settings every model entry may carry; anything else under a model goes to `options`.
_MODEL_FIELDS = {"runner", "model", "api_base", "api_key_env", "params", "options", "description"}
_SPLIT_FIELDS = {"adapter", "splits", "options", "metrics", "prompt_template", "description", "tools", "prompt_wrapper",
                 "models"}
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
    # Models known outside the file (the checkpoint registry: evalpipe/store/models_registry.py), looked up by key;
    # handed in by the project so that this base module needs no storage import.
    model_lookup: Callable[[str], "ModelConfig | None"] | None = field(default=None, repr=False, compare=False)
    # benchmark -> the model keys meant to run it (its `models:`); a benchmark without one: `default_models`
    intended_models: dict[str, list[str]] = field(default_factory=dict)

    def models_for(self, split_key: str) -> list[str]:
        """The model keys a run evaluates on this split when no model is named: its benchmark's `models:`, else
        `default_models` (docs/config.md "Which models run which benchmarks")."""
        return list(self.intended_models.get(self.split(split_key).benchmark) or self.default_models)

    def intended_pairs(self) -> list[tuple[str, str]]:
        """Every (split, model) the config means to evaluate: each split with its `models_for`."""
        return [(s, m) for s in sorted(self.splits) for m in self.models_for(s)]

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
    def mlflow(self) -> dict[str, Any]:
        """`mlflow:` settings: metrics partitions logged as MLflow runs (docs/interop.md "MLflow")."""
        return dict(self.raw.get("mlflow") or {})

    @property
    def redact_patterns(self) -> list[str]:
        """`redact_patterns:` extra regexes masked on every write path (docs/operations.md)."""
        return [str(p) for p in self.raw.get("redact_patterns") or []]

    def model(self, key: str) -> ModelConfig:
        if key in self.models:
            return self.models[key]
        found = self.model_lookup(key) if self.model_lookup is not None else None
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
