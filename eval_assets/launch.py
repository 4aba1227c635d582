"""Materialize the graph from Python (the CLI and `make run` use this): no daemon, the real instance."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from dagster import DagsterInstance, materialize

from evalpipe.config import EvalConfig, dagster_home
from evalpipe.errors import EvalError
from eval_assets.assets import EVAL_ASSETS
from partitions import MODEL, eval_key
from resources import default_resources

CHAIN = ["prompts", "rollouts", "judgements", "metrics"]


def get_instance() -> DagsterInstance:
    os.environ.setdefault("DAGSTER_HOME", str(dagster_home()))
    home = os.environ["DAGSTER_HOME"]
    os.makedirs(home, exist_ok=True)
    return DagsterInstance.get()


def sync_model_partitions(instance: DagsterInstance, models: list[str]) -> list[str]:
    """Add missing `model` partitions; returns the ones added."""
    new = [m for m in models if m not in set(instance.get_dynamic_partitions(MODEL))]
    if new:
        instance.add_dynamic_partitions(MODEL, new)
    return new


def run_assets(selection: list[str], partition_key: Any = None, instance: DagsterInstance | None = None,
               resources: dict[str, Any] | None = None, tags: dict[str, str] | None = None):
    """Materialize `selection` (for one partition) in this process, recorded on the real instance."""
    return materialize(EVAL_ASSETS, selection=selection, partition_key=partition_key,
                       instance=instance or get_instance(), resources={**default_resources(), **(resources or {})},
                       raise_on_error=False, tags=tags)


@dataclass
class PartitionResult:
    benchmark_split: str
    model: str
    success: bool
    run_id: str
    error: str = ""


@dataclass
class EvaluateResult:
    partitions: list[PartitionResult] = field(default_factory=list)
    leaderboard_ok: bool = False

    @property
    def success(self) -> bool:
        return self.leaderboard_ok and all(p.success for p in self.partitions)


def _first_error(result: Any) -> str:
    for ev in result.all_events:
        if ev.is_step_failure and ev.step_failure_data and ev.step_failure_data.error:
            err = ev.step_failure_data.error
            while err.cause is not None and err.cls_name in ("DagsterExecutionStepExecutionError",):
                err = err.cause
            return err.message.strip().splitlines()[-1] if err.message else err.cls_name
    return "failed"


def evaluate(cfg: EvalConfig, splits: list[str], models: list[str], resources: dict[str, Any] | None = None,
             instance: DagsterInstance | None = None, on_event: Callable[[str], None] | None = None,
             tags: dict[str, str] | None = None) -> EvaluateResult:
    """dataset per split, the chain per (split, model), then the leaderboard. Failures are collected, not raised."""
    for s in splits:
        cfg.split(s)
    for m in models:
        cfg.model(m)
    instance = instance or get_instance()
    say = on_event or (lambda msg: None)
    sync_model_partitions(instance, models)
    out = EvaluateResult()
    for split in splits:
        say(f"dataset {split}")
        r = run_assets(["dataset"], split, instance, resources, tags)
        if not r.success:
            err = _first_error(r)
            out.partitions += [PartitionResult(split, m, False, r.run_id, err) for m in models]
            say(f"dataset {split} failed: {err}")
            continue
        for model in models:
            say(f"evaluate {split} x {model}")
            r = run_assets(CHAIN, eval_key(split, model), instance, resources, tags)
            out.partitions.append(PartitionResult(split, model, r.success, r.run_id, "" if r.success else _first_error(r)))
            if not r.success:
                say(f"{split} x {model} failed: {out.partitions[-1].error}")
    r = run_assets(["leaderboard"], None, instance, resources, tags)
    out.leaderboard_ok = r.success
    if not r.success:
        raise EvalError(f"leaderboard failed: {_first_error(r)}")
    return out
