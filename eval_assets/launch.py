"""Materialize the graph from Python (the CLI and `make run` use this): no daemon, the real instance."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

from dagster import DagsterInstance, materialize

from evalpipe import sample_progress
from evalpipe.config import EvalConfig, dagster_home
from evalpipe.errors import RunFailed
from evalpipe.redact import install_log_redaction
from eval_assets.assets import EVAL_ASSETS
from partitions import MODEL, eval_key
from resources import default_resources

CHAIN = ["prompts", "rollouts", "judgements", "metrics"]
# Dagster's console logger prints every step event at DEBUG; runs launched from Python only show warnings
# (the CLI shows its own progress). EVALS_DAGSTER_LOG_LEVEL=DEBUG brings the events back.
CONSOLE_LOG_LEVEL_ENV = "EVALS_DAGSTER_LOG_LEVEL"

install_log_redaction()


def asset_checks() -> list[Any]:
    """The asset checks defined in `eval_assets/checks.py`, if that module exists (they gate `evalpipe run`)."""
    try:
        from eval_assets import checks
    except ImportError:
        return []
    from dagster import AssetChecksDefinition

    seen, out = set(), []
    for v in vars(checks).values():
        items = v if isinstance(v, (list, tuple)) else [v]
        for c in items:
            if isinstance(c, AssetChecksDefinition) and id(c) not in seen:
                seen.add(id(c))
                out.append(c)
    return out


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
    """Materialize `selection` (for one partition) in this process, recorded on the real instance.
    The asset checks of the selected assets run too."""
    level = (os.environ.get(CONSOLE_LOG_LEVEL_ENV) or "WARNING").upper()
    return materialize([*EVAL_ASSETS, *asset_checks()], selection=selection, partition_key=partition_key,
                       instance=instance or get_instance(), resources={**default_resources(), **(resources or {})},
                       raise_on_error=False, tags=tags,
                       run_config={"loggers": {"console": {"config": {"log_level": level}}}})


@dataclass
class CheckResult:
    run_id: str
    asset: str
    partition: str | None
    check: str
    passed: bool
    severity: str
    description: str = ""


def check_results(instance: DagsterInstance, run_ids: list[str]) -> list[CheckResult]:
    """Asset check evaluations recorded by these runs (empty when no checks are defined)."""
    from dagster import DagsterEventType

    out = []
    for run_id in run_ids:
        for rec in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
            ev = rec.dagster_event.event_specific_data
            out.append(CheckResult(run_id=run_id, asset=ev.asset_key.to_user_string(), partition=ev.partition,
                                   check=ev.check_name, passed=bool(ev.passed), severity=ev.severity.value,
                                   description=str(ev.description or "")))
    return out


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
    """One line for the first failed step: the step, the root cause (the exception chain's messages, below
    Dagster's wrappers) and where the full traceback was saved (docs/operations.md#when-a-run-fails)."""
    from evalpipe.errors import describe_error_info

    for ev in result.all_events:
        if ev.is_step_failure and ev.step_failure_data and ev.step_failure_data.error:
            err = ev.step_failure_data.error
            saved = save_traceback(result.run_id, ev.step_key, err.to_string())
            return f"{ev.step_key}: {describe_error_info(err)}" + (f" (full traceback: {saved})" if saved else "")
    return "failed"


def save_traceback(run_id: str, step: str | None, text: str) -> str | None:
    """Keep a failed step's full traceback (redacted) in `$DAGSTER_HOME/logs/<run_id>.txt`; the run's event log
    in the UI has it too. Returns the path, or None if it can't be written (a full or read-only disk)."""
    from evalpipe.redact import redact

    try:
        folder = dagster_home() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{run_id}.txt"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(redact(f"run {run_id} step {step or '-'} failed:\n{text}\n"))
        return str(path)
    except OSError:
        return None


def _threads_safe(instance: DagsterInstance) -> bool:
    """Dagster 1.13 calls `logging.config.dictConfig` at the start of every run whenever dagster.yaml has any
    setting (to collect `python_logs.dagster_handler_config` handlers); that holds logging's module lock while
    closing every handler, and deadlocks against another run in this process that is logging an event. Without
    handler config the call yields no handler at all, so it is skipped; with one, runs stay one at a time."""
    if instance.get_python_log_dagster_handler_config():
        return False
    instance.get_yaml_python_handlers = lambda: []  # what dictConfig with no handlers would have returned
    return True


DEFAULT_CONCURRENT_PARTITIONS = 2  # like the `evals/calls_models` run limit in dagster_home/dagster.yaml


def concurrent_partitions(cfg: EvalConfig, override: int | None = None) -> int:
    """How many partitions of one `evalpipe run` go at once: the argument, else the config's top-level
    `max_concurrent_partitions`, else 2."""
    value = override or cfg.raw.get("max_concurrent_partitions") or DEFAULT_CONCURRENT_PARTITIONS
    return max(1, int(value))


def evaluate(cfg: EvalConfig, splits: list[str], models: list[str], resources: dict[str, Any] | None = None,
             instance: DagsterInstance | None = None, on_event: Callable[[str], None] | None = None,
             tags: dict[str, str] | None = None,
             on_progress: Callable[[int, int, str], None] | None = None,
             on_sample: Callable[[str, str, int, int], None] | None = None,
             max_concurrent: int | None = None) -> EvaluateResult:
    """dataset per split, the chain per (split, model), then the leaderboard: the fewest Dagster runs the graph
    allows (assets with different partitions can't share a run), all in this process on the real instance.
    Up to `concurrent_partitions(cfg, max_concurrent)` runs go at once (threads: model calls and a local model
    overlap); a split's chains start as soon as its dataset is loaded. Failures are collected, not raised.
    `on_progress(done, total, label)` is called when a run starts (done = runs finished so far) and at the end;
    `on_sample(split, model, done, total)` as each sample of a partition's rollouts finishes. Callbacks may come
    from worker threads, one at a time. Results are in (split, model) order whatever the finishing order."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    for s in splits:
        cfg.split(s)
    for m in models:
        cfg.model(m)
    instance = instance or get_instance()
    say = on_event or (lambda msg: None)
    sync_model_partitions(instance, models)
    out = EvaluateResult()
    total, done = len(splits) * (1 + len(models)) + 1, 0
    lock = threading.RLock()
    results: dict[tuple[str, str], PartitionResult] = {}

    def step(label: str) -> None:
        with lock:
            say(label)
            if on_progress:
                on_progress(done, total, label)

    def finished(n: int = 1) -> None:
        nonlocal done
        with lock:
            done += n

    def chain(split: str, model: str) -> None:
        key = eval_key(split, model)
        if on_sample is not None:
            def listener(d: int, t: int, e: int | None = None) -> None:
                with lock:
                    on_sample(split, model, d, t) if e is None else on_sample(split, model, d, t, e)  # e: errors
            sample_progress.listen(key, listener)
        try:
            step(f"evaluate {split} x {model}")
            r = run_assets(CHAIN, key, instance, resources, tags)
        finally:
            sample_progress.unlisten(key)
        finished()
        res = PartitionResult(split, model, r.success, r.run_id, "" if r.success else _first_error(r))
        with lock:
            results[(split, model)] = res
        if not r.success:
            step(f"{split} x {model} failed: {res.error}")

    def load(split: str, pool: ThreadPoolExecutor) -> list:
        step(f"dataset {split}")
        r = run_assets(["dataset"], split, instance, resources, tags)
        finished()
        if not r.success:
            err = _first_error(r)
            with lock:
                for m in models:
                    results[(split, m)] = PartitionResult(split, m, False, r.run_id, err)
            finished(len(models))
            step(f"dataset {split} failed: {err}")
            return []
        return [pool.submit(chain, split, m) for m in models]

    workers = concurrent_partitions(cfg, max_concurrent) if _threads_safe(instance) else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evalpipe-partition") as pool, \
            ThreadPoolExecutor(max_workers=min(workers, max(1, len(splits))), thread_name_prefix="evalpipe-dataset") as loaders:
        chains = [f for fut in [loaders.submit(load, s, pool) for s in splits] for f in fut.result()]
        for f in chains:
            f.result()  # a bug in the launcher itself surfaces here; a failed run is a result, not an exception
    out.partitions = [results[(s, m)] for s in splits for m in models]
    step("leaderboard")
    r = run_assets(["leaderboard"], None, instance, resources, tags)
    finished()
    if on_progress:
        on_progress(done, total, "done")
    out.leaderboard_ok = r.success
    if not r.success:  # one line; a partition that failed too is named after it (often the same cause)
        failed = [p for p in out.partitions if not p.success]
        also = (f"; {len(failed)} partition(s) failed too, first {failed[0].benchmark_split} x {failed[0].model}: "
                f"{failed[0].error}") if failed else ""
        raise RunFailed(f"leaderboard failed: {_first_error(r)}{also}")
    return out
