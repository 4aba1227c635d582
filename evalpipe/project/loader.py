"""Loading the evaluation config: from a file (validated with `file:line:` errors, parsed, cached by path and
mtime) or from a dict built in Python. The model it yields lives in evalpipe/core/config.py."""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from evalpipe.core.config import (_MODEL_FIELDS, _OPTION_FIELDS, _SPLIT_FIELDS, EvalConfig, ModelConfig,  # noqa: F401
                                  SplitConfig, config_path)
from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import folder_name, sanitize_key, split_key
from evalpipe.store.models_registry import discovered_models

# (the schema, evalpipe/project/schema.py, is imported where a config is checked: it pulls in pydantic, ~0.1 s, which
# parsing a config already known to have passed its check does not need: evalpipe/project/listing.py)

# the file name an in-memory config reports in messages (its folder is the base of relative paths)
IN_MEMORY_NAME = "<in-memory config>"


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
        twin = next((k for k in models if folder_name(k) == folder_name(m.key)), None)
        if twin is not None:
            raise ConfigError(f"{path}: models {twin!r} and {m.key!r} would share the folder {folder_name(m.key)!r} of "
                              f"run artifacts and the models registry ('/' is spelled '__'); rename one")
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
    # [partition space] a benchmark's `models:`: the models meant to run it (names resolved as default_models are)
    intended_models: dict[str, list[str]] = {}
    for name, raw in benchmarks.items():
        wanted = raw.get("models") if isinstance(raw, dict) else None
        if wanted is None:
            continue
        keys = [sanitize_key(d) for d in ([wanted] if isinstance(wanted, str) else wanted)]
        keys = [d if d in models else next((k for k in models if k.split("@", 1)[0] == d), d) for d in keys]
        for d in keys:
            if d not in models:
                raise ConfigError(f"{path}: benchmark {name!r} lists model {d!r} under its 'models:', which is not "
                                  f"under 'models' (configured: {', '.join(models) or 'none'})")
        intended_models[str(name)] = list(dict.fromkeys(keys))
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
        model_lookup=lambda key: discovered_models().get(key), intended_models=intended_models,
    )


_CACHE: dict[tuple[str, float], EvalConfig] = {}


def load_config(path: str | os.PathLike | None = None) -> EvalConfig:
    """Load (and cache by path and mtime) the evaluation config file: validated (evalpipe/project/schema.py: every
    mistake is a `file:line:` error), then parsed. No path: `EVALS_CONFIG`, else `evals.yaml` at the repo root."""
    p = Path(path).expanduser().resolve() if path else config_path()
    mtime = p.stat().st_mtime if p.exists() else -1.0
    cached = _CACHE.get((str(p), mtime))
    if cached is None:
        from evalpipe.project.schema import validate_file

        cached = parse_config(validate_file(p), p)
        _CACHE[(str(p), mtime)] = cached
    return cached


def config_from_dict(raw: dict[str, Any], base_dir: str | os.PathLike) -> EvalConfig:
    """An EvalConfig built in memory (no file), validated like a file. Relative paths in it resolve against
    `base_dir`; messages name `<base_dir>/<in-memory config>` where a file's would name the file."""
    path = Path(base_dir).expanduser().resolve() / IN_MEMORY_NAME
    data = copy.deepcopy(dict(raw or {}))
    from evalpipe.project.schema import validate_config

    validate_config(data, path)
    return parse_config(data, path)
