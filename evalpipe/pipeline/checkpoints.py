"""Discovering model checkpoints: which folders are complete, which models a registry file lists, and what to
run for each. Plain Python; the Dagster sensor (`eval_assets/sensors.py`) only wraps `plan_tick`.

A checkpoint is complete when (checked in this order):
- it holds a marker file (`COMPLETE`, `.complete` or `_COMPLETE`): the writer says so; or
- nothing in it looks half-written (`*.tmp`, `*.part`, `*.partial`, `*.incomplete`, `*.lock`), and
  - it is a `.gguf` file, or a folder with a `.gguf` file, or a folder with a valid `config.json` and weights
    (`*.safetensors` / `pytorch_model*.bin`; with an `*.index.json`, every shard it names must exist), and
  - the names, sizes and modification times of its files are the same as at the previous tick (so a
    checkpoint is picked up on the second tick that sees it whole, never while it is being copied).
Anything else is skipped with a reason and looked at again on the next tick.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from evalpipe.core.config import EvalConfig, ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key

MARKERS = ("COMPLETE", ".complete", "_COMPLETE")
PARTIAL_SUFFIXES = (".tmp", ".part", ".partial", ".incomplete", ".lock")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")
_SETTINGS_KEYS = {"dir", "registry_file", "runner", "params", "options", "benchmarks", "key_prefix", "api_base",
                  "api_key_env"}


@dataclass
class CheckpointSettings:
    dir: Path | None
    registry_file: Path | None
    runner: str
    params: dict[str, Any]
    options: dict[str, Any]
    splits: list[str]  # benchmark_split keys every new checkpoint is evaluated on
    key_prefix: str = ""
    api_base: str | None = None
    api_key_env: str | None = None


def checkpoint_settings(cfg: EvalConfig) -> CheckpointSettings | None:
    """The `checkpoints:` section, validated; None when the config has none."""
    raw = cfg.checkpoints
    if not raw:
        return None
    unknown = set(raw) - _SETTINGS_KEYS
    if unknown:
        raise ConfigError(f"{cfg.path}: checkpoints has unknown keys {sorted(unknown)}; allowed: {sorted(_SETTINGS_KEYS)}")
    if not raw.get("dir") and not raw.get("registry_file"):
        raise ConfigError(f"{cfg.path}: checkpoints needs 'dir' (a folder of checkpoints) and/or 'registry_file'")

    def resolve(p: Any) -> Path | None:
        if not p:
            return None
        q = Path(os.path.expandvars(str(p))).expanduser()
        return q if q.is_absolute() else (cfg.path.parent / q).resolve()

    wanted = raw.get("benchmarks") or cfg.default_benchmarks
    if isinstance(wanted, str):
        wanted = [wanted]
    splits: list[str] = []
    for w in wanted:
        matched = [k for k, s in cfg.splits.items() if k == w or s.benchmark == w]
        if not matched:
            raise ConfigError(f"{cfg.path}: checkpoints.benchmarks names {w!r}, which is neither a benchmark nor a "
                              f"benchmark split; configured: {', '.join(cfg.splits)}")
        splits += [m for m in matched if m not in splits]
    return CheckpointSettings(
        dir=resolve(raw.get("dir")), registry_file=resolve(raw.get("registry_file")),
        runner=str(raw.get("runner") or "local"), params=dict(raw.get("params") or {}),
        options=dict(raw.get("options") or {}), splits=splits, key_prefix=str(raw.get("key_prefix") or ""),
        api_base=raw.get("api_base"), api_key_env=raw.get("api_key_env"),
    )


# ---- completeness -------------------------------------------------------------------------------------------------
def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())


def signature(path: Path) -> str:
    """Names, sizes and mtimes of a checkpoint's files: equal across two ticks means nobody is writing."""
    base = path.parent if path.is_file() else path
    return json.dumps([[str(f.relative_to(base)), st.st_size, st.st_mtime_ns]
                       for f in _files(path) for st in [f.stat()]])


def check_checkpoint(path: Path) -> tuple[bool, str]:
    """(ready-apart-from-stability, reason). `True, "marker"` means complete without waiting a tick."""
    if path.is_file():
        if path.suffix != ".gguf":
            return False, "not a checkpoint (a loose file that is not .gguf)"
        if path.stat().st_size == 0:
            return False, "empty .gguf file"
        return True, "gguf"
    if any((path / m).exists() for m in MARKERS):
        return True, "marker"
    files = _files(path)
    partial = [f.name for f in files if f.name.endswith(PARTIAL_SUFFIXES)]
    if partial:
        return False, f"still being written ({partial[0]})"
    if any(f.suffix == ".gguf" and f.stat().st_size > 0 for f in files):
        return True, "gguf"
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        return False, "no config.json yet"
    try:
        json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False, "config.json is not valid JSON (yet)"
    weights = [f for g in WEIGHT_GLOBS for f in path.glob(g) if f.stat().st_size > 0]
    if not weights:
        return False, "no weights file yet (*.safetensors, pytorch_model*.bin)"
    for index in path.glob("*.index.json"):
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values())
        except (OSError, ValueError, AttributeError):
            return False, f"{index.name} is not valid JSON (yet)"
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            return False, f"shard {missing[0]} named by {index.name} is missing"
    return True, "hf"


def scan_dir(root: Path, previous: dict[str, str]) -> tuple[list[tuple[str, Path]], list[tuple[str, str]], dict[str, str]]:
    """(ready [(name, path)], skipped [(name, reason)], signatures to remember for the next tick)."""
    ready, skipped, sigs = [], [], {}
    if not root.is_dir():
        return ready, [(str(root), "checkpoint folder does not exist (yet)")], sigs
    for entry in sorted(root.iterdir()):
        if entry.name.startswith((".", "_")):
            continue  # hidden or temporary (a writer's staging folder)
        try:
            ok, why = check_checkpoint(entry)
            if not ok:
                skipped.append((entry.name, why))
                continue
            if why == "marker":
                ready.append((entry.name, entry))
                continue
            sig = signature(entry)
        except OSError as exc:  # a file vanished while we looked: it is being written or moved
            skipped.append((entry.name, f"changed while reading ({exc.__class__.__name__})"))
            continue
        sigs[entry.name] = sig
        if previous.get(entry.name) == sig:
            ready.append((entry.name, entry))
        else:
            skipped.append((entry.name, "files changed since the last tick (or first seen): waiting one more tick"))
    return ready, skipped, sigs


def read_registry(path: Path, settings: CheckpointSettings) -> list[ModelConfig]:
    """Models listed in a registry file: a YAML/JSON list of {name, runner, model, ...} or a mapping name ->
    settings. Missing runner: the checkpoints' runner. A relative `model` path that exists beside the file is
    made absolute. Raises ConfigError (the sensor logs it and tries again next tick) if it doesn't parse."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"models registry {path} is unreadable ({str(exc).splitlines()[0]})") from None
    if data is None:
        return []
    if isinstance(data, dict):
        entries = [{"name": k, **(v or {})} for k, v in data.items()]
    elif isinstance(data, list):
        entries = data
    else:
        raise ConfigError(f"models registry {path} must hold a list of models or a mapping of name to settings")
    out = []
    for e in entries:
        if not isinstance(e, dict) or not e.get("name"):
            raise ConfigError(f"models registry {path}: every entry needs a 'name' (got {e!r:.80})")
        e = dict(e)
        name = str(e.pop("name"))
        e.setdefault("runner", settings.runner)
        m = e.get("model")
        if isinstance(m, str) and not os.path.isabs(m) and (path.parent / m).exists():
            e["model"] = str((path.parent / m).resolve())
        out.append(ModelConfig.from_dict(settings.key_prefix + name, e))
    return out


# ---- one sensor tick ---------------------------------------------------------------------------------------------------
@dataclass
class Request:
    job: str  # "evaluate" or "load_dataset"
    split: str
    model: str | None
    run_key: str


@dataclass
class TickPlan:
    register: list[ModelConfig] = field(default_factory=list)  # new models to record and add as partitions
    requests: list[Request] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    cursor: dict[str, Any] = field(default_factory=dict)


def plan_tick(cfg: EvalConfig, settings: CheckpointSettings, cursor: dict[str, Any],
              dataset_ready: set[str]) -> TickPlan:
    """What one tick does. `cursor` is the previous tick's (or {}); `dataset_ready` the split keys whose
    `dataset` partition exists. Every (model, split) is requested once; a split's dataset is loaded first."""
    sigs_before: dict[str, str] = dict(cursor.get("signatures") or {})
    known: dict[str, str] = dict(cursor.get("models") or {})  # key -> source (path or registry)
    requested: set[str] = set(cursor.get("requested") or [])
    datasets_requested: set[str] = set(cursor.get("datasets_requested") or [])
    plan = TickPlan()
    found: list[tuple[ModelConfig, str]] = []
    sigs: dict[str, str] = {}
    if settings.dir is not None:
        ready, skipped, sigs = scan_dir(settings.dir, sigs_before)
        for name, why in skipped:
            plan.logs.append(f"skipping checkpoint {name}: {why}")
        for name, path in ready:
            try:
                key = sanitize_key(settings.key_prefix + name)
            except ValueError as exc:
                plan.logs.append(f"skipping checkpoint {name}: {exc}")
                continue
            found.append((ModelConfig(key=key, runner=settings.runner, model=str(path.resolve()),
                                      api_base=settings.api_base, api_key_env=settings.api_key_env,
                                      params=dict(settings.params), options=dict(settings.options),
                                      description=f"checkpoint {path.resolve()}"), str(path.resolve())))
    if settings.registry_file is not None and settings.registry_file.exists():
        try:
            for m in read_registry(settings.registry_file, settings):
                found.append((m, f"registry:{settings.registry_file}"))
        except ConfigError as exc:
            plan.logs.append(f"skipping the models registry this tick: {exc}")
    for model, source in found:
        if model.key in cfg.models:
            plan.logs.append(f"skipping {source}: model key {model.key!r} is already declared in {cfg.path}")
            continue
        if model.key in known:
            if known[model.key] != source:
                plan.logs.append(f"skipping {source}: its key {model.key!r} is taken by {known[model.key]}")
            continue
        known[model.key] = source
        plan.register.append(model)
        plan.logs.append(f"new model {model.key} ({source})")
    for key in known:
        for split in settings.splits:
            pair = f"{key}|{split}"
            if pair in requested:
                continue
            if split not in dataset_ready:
                if split not in datasets_requested:
                    datasets_requested.add(split)
                    plan.requests.append(Request("load_dataset", split, None, f"checkpoint-dataset:{split}"))
                    plan.logs.append(f"loading dataset {split} first; {key} runs once it exists")
                continue
            requested.add(pair)
            plan.requests.append(Request("evaluate", split, key, f"checkpoint:{pair}"))
    plan.cursor = {"signatures": sigs, "models": known, "requested": sorted(requested),
                   "datasets_requested": sorted(datasets_requested - dataset_ready)}
    return plan
