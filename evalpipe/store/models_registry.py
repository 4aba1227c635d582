"""Models found at run time (e.g. new checkpoints), kept beside the instance so every process sees them.

The config file declares models up front; the checkpoint sensor adds the ones it discovers here, one JSON
file per model under `$DAGSTER_HOME/models/`, so a run in any process can look up their runner settings.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

from evalpipe.core.config import ModelConfig, dagster_home
from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import folder_name


def registry_dir(home: Path | None = None) -> Path:
    return (home or dagster_home()) / "models"


def registry_file(key: str, home: Path | None = None) -> Path:
    """Where a discovered model's entry lives (in `home`'s registry, default $DAGSTER_HOME's)."""
    return registry_dir(home) / (folder_name(key) + ".json")


def register_model(model: ModelConfig) -> Path:
    """Record a discovered model atomically (a reader never sees half a file)."""
    d = registry_dir()
    d.mkdir(parents=True, exist_ok=True)
    target = registry_file(model.key)
    held = _key_in(target)
    if held is not None and held != model.key:
        raise ConfigError(f"model {model.key!r} would replace the registered model {held!r} (both are stored as "
                          f"{target.name}: '/' is spelled '__'); give one of them another name")
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(asdict(model), fh, indent=2, sort_keys=True)
    os.replace(tmp, target)
    return target


def _key_in(entry: Path) -> str | None:
    try:
        return str(json.loads(entry.read_text(encoding="utf-8"))["key"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none yet, or a damaged file the new entry may replace


def discovered_models() -> dict[str, ModelConfig]:
    d = registry_dir()
    out: dict[str, ModelConfig] = {}
    if not d.is_dir():
        return out
    for f in sorted(d.glob("*.json")):
        try:
            raw = json.loads(f.read_text(encoding="utf-8"))
            out[raw["key"]] = ModelConfig(**raw)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a foreign or damaged file is not a model; the sensor logs what it writes
    return out


def unregister_model(key: str, home: Path | None = None) -> bool:
    """Forget a registered model (an ad-hoc one whose runs produced nothing); True if it was there."""
    try:
        registry_file(key, home).unlink()
        return True
    except FileNotFoundError:
        return False
