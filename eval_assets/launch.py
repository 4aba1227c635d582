"""Materialize the graph from Python (the CLI, the Python API and `make run` use this): no daemon, the real
instance. Everything here works on an explicit project (evalpipe/project/project.py): its graph
(eval_assets/factory.py), its resources, its instance home and warehouse."""
from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dagster import DagsterInstance, materialize

from evalpipe.pipeline import sample_progress
from evalpipe.core.config import EvalConfig, dagster_home
from evalpipe.core.errors import RunFailed
from evalpipe.core.redact import install_log_redaction
from evalpipe.project import Project
from eval_assets.assets import eval_assets, record_metric_settings
from eval_assets.batch import batch_run_config, batch_size, batches, evaluate_batch_job
from eval_assets.sweep_settings import sweep_processes
from eval_assets.sweep_workers import even_batches, worker_spec
from partitions import BENCHMARK_SPLIT, MODEL, eval_key, partition_dims
from resources import EvalConfigResource, project_resources

CHAIN = ["prompts", "rollouts", "judgements", "metrics"]
DATASET_VERSION_TAG = "evalpipe/dataset_version"  # on `dataset` runs: what the materialized samples were read from
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


PREPARED_INSTANCE: DagsterInstance | None = None  # made once by the warm server (evalpipe/cli/warm.py) before it forks


def as_project(project: Project | EvalConfig | None) -> Project:
    """The project to run. An EvalConfig (older callers) becomes the project of that config with the
    environment's home and warehouse; None, the project of the environment (Project.from_file())."""
    if isinstance(project, Project):
        return project
    if project is None:
        return Project.from_file()
    return Project.for_config(project)


def get_instance(project: Project | None = None) -> DagsterInstance:
    """The Dagster instance of the project's home (default: the environment's)."""
    home = str(project.home if project is not None else dagster_home())
    # lower modules still find journals and registries through DAGSTER_HOME (docs/configuration.md lists them)
    os.environ.setdefault("DAGSTER_HOME", home)
    prepared = PREPARED_INSTANCE
    if prepared is not None and os.path.abspath(prepared.root_directory) == os.path.abspath(home):
        return prepared
    os.makedirs(home, exist_ok=True)
    from evalpipe.store.instance_storage import open_instance  # made once under a file lock (concurrent first runs)

    # Runs executed in this process don't capture its stdout/stderr into Dagster's compute logs: the capture points
    # the whole process's fds 1/2 at log files (wrong for partitions running in threads: their swaps interleave),
    # costs two `tail` processes and two Python interpreters per Dagster run (~0.1 s of CPU), and holds nothing of
    # evalpipe's own (its steps log through Dagster's event log, which the UI shows as before). The terminal or
    # notebook that started the run shows the output. Runs the UI launches are not affected.
    return open_instance(home, capture_compute_logs=False)


def sync_partitions(instance: DagsterInstance, dimension: str, keys: list[str]) -> list[str]:
    """Add the missing keys of a dynamic partition dimension (`benchmark_split` or `model`); returns the added. In
    chunks (evalpipe/store/partition_keys.py): one call with ~33k new keys fails on SQLite (dagster#16260)."""
    from evalpipe.store.partition_keys import add_in_chunks

    return add_in_chunks(instance, dimension, keys)


def sync_model_partitions(instance: DagsterInstance, models: list[str]) -> list[str]:
    """Add missing `model` partitions; returns the ones added."""
    return sync_partitions(instance, MODEL, models)


def sync_split_partitions(instance: DagsterInstance, splits: list[str]) -> list[str]:
    """Add missing `benchmark_split` partitions (a split run from Python that no config file names, too)."""
    return sync_partitions(instance, BENCHMARK_SPLIT, splits)


def forget_empty_models(instance: DagsterInstance, project: Project, keys: list[str]) -> list[str]:
    """Remove the `model` partitions this run added that produced nothing (every chain failed, no metrics in the
    warehouse from anyone): an ad-hoc model with a wrong endpoint, a try that failed. Configured keys stay (the
    config-sync sensor owns them); an ad-hoc model's registry entry goes with its last partition. Returns the
    keys removed."""
    from evalpipe.core.run_marks import is_adhoc
    from evalpipe.store.warehouse import Warehouse

    keys = [k for k in keys if k not in project.config.models]
    if not keys:
        return []
    try:
        m = Warehouse(project.warehouse).query("SELECT DISTINCT model FROM metrics")
        measured = set(m["model"]) if len(m) else set()
    except Exception:  # no metrics table yet: nothing was measured
        measured = set()
    gone = [k for k in keys if k not in measured]
    for k in gone:
        instance.delete_dynamic_partition(MODEL, k)
    left = set(instance.get_dynamic_partitions(MODEL))
    for base in {k.split("@", 1)[0] for k in gone if is_adhoc(k)}:
        if not any(p.split("@", 1)[0] == base for p in left):
            from evalpipe.store.models_registry import unregister_model

            unregister_model(base)
    return gone


# The graph depends on the project's config only (the judgements code version): built once per config object (the
# loader returns the same object while the file is unchanged). The config is kept with it so its id stays unique.
_GRAPHS: dict[int, tuple[EvalConfig, list]] = {}


def project_graph(project: Project) -> list:
    """The assets and asset checks of a project."""
    hit = _GRAPHS.get(id(project.config))
    if hit is None or hit[0] is not project.config:
        if len(_GRAPHS) > 16:
            _GRAPHS.clear()
        from eval_assets.checks import eval_checks  # the project's checks, as the factory declares them

        hit = _GRAPHS[id(project.config)] = (project.config, [*eval_assets(project), *eval_checks(project)])
    return hit[1]


def bind_resources(project: Project, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The project's resources with the caller's overrides; an `eval_config` override made with split options
    only (EvalConfigResource(split_options=...)) is bound to the project."""
    out = {**project_resources(project), **(overrides or {})}
    given = out["eval_config"]
    if isinstance(given, EvalConfigResource) and given.project is None:
        out["eval_config"] = EvalConfigResource(project=project, split_options=dict(given.split_options))
    return out


_ASSET_NAME = re.compile(r"[A-Za-z0-9_]+")


def asset_selection(selection: Any) -> Any:
    """Plain asset names as Dagster's key selection: given strings, Dagster parses each one with its ANTLR
    selection grammar, which costs a cold run ~0.1-0.5 s of imports and parsing for the same
    `AssetSelection.assets(...)`. Anything else (a selection object, a string with operators) is passed as is."""
    if type(selection) in (list, tuple) and selection and all(  # (Dagster's selections are tuples underneath)
            isinstance(s, str) and _ASSET_NAME.fullmatch(s) for s in selection):
        from dagster import AssetSelection

        return AssetSelection.assets(*selection)
    return selection


def run_assets(selection: Any, partition_key: Any = None, instance: DagsterInstance | None = None,
               resources: dict[str, Any] | None = None, tags: dict[str, str] | None = None,
               project: Project | EvalConfig | None = None):
    """Materialize `selection` (for one partition) of the project's graph in this process, recorded on the real
    instance; the partition's keys are added to the dynamic partitions first. The asset checks of the selected
    assets run too."""
    project = as_project(project)
    instance = instance or get_instance(project)
    if partition_key is not None:
        dims = partition_dims(partition_key)
        sync_split_partitions(instance, [dims[BENCHMARK_SPLIT]])
        if MODEL in dims:
            sync_model_partitions(instance, [dims[MODEL]])
        # judgements and metrics record the split's metric settings they were computed with (its observation)
        record_metric_settings(project, instance, [dims[BENCHMARK_SPLIT]])
    level = (os.environ.get(CONSOLE_LOG_LEVEL_ENV) or "WARNING").upper()
    with _sigterm_kept():
        return materialize(project_graph(project), selection=asset_selection(selection), partition_key=partition_key,
                           instance=instance, resources=bind_resources(project, resources),
                           raise_on_error=False, tags=tags,
                           run_config={"loggers": {"console": {"config": {"log_level": level}}}})


def run_batch(keys: list, instance: DagsterInstance, resources: dict[str, Any], tags: dict[str, str] | None,
              project: Project, max_concurrent: int | None = None):
    """[sweeps] One Dagster run of the `evaluate_batch` job for these (split, model) keys (eval_assets/batch.py):
    each partition materialized, checked or failed on its own. Their splits' datasets must be loaded."""
    from eval_assets.batch import BATCH_TAG

    level = (os.environ.get(CONSOLE_LOG_LEVEL_ENV) or "WARNING").upper()
    run_config = {**batch_run_config(keys, max_concurrent), "loggers": {"console": {"config": {"log_level": level}}}}
    with _sigterm_kept():
        return evaluate_batch_job.execute_in_process(
            run_config=run_config, instance=instance, resources=bind_resources(project, resources),
            raise_on_error=False, tags={**(tags or {}), BATCH_TAG: str(len(keys))})


def batch_outcome(instance: DagsterInstance, run_id: str) -> dict[str, str]:
    """{partition key: "" (materialized) or its error} for the partitions a batch run reached."""
    from dagster import DagsterEventType

    out: dict[str, str] = {}
    events = instance.all_logs(run_id, of_type={DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.STEP_FAILURE})
    for ev in (rec.dagster_event for rec in events):
        if ev.event_type == DagsterEventType.ASSET_MATERIALIZATION and ev.asset_key.path[-1] == "metrics":
            out.setdefault(str(ev.partition), "")
        elif ev.event_type == DagsterEventType.STEP_FAILURE:  # the op's Failure lists each failed partition's error
            data = ev.step_failure_data.user_failure_data
            errors = data.metadata.get("errors") if data is not None else None
            for key, error in ((errors.value if errors is not None else None) or {}).items():
                out[str(key)] = str(error)
    return out


def batch_in_worker(spec: Any, keys: list[str]) -> tuple[str, bool, str]:
    """[sweeps] In a worker process of `evaluate` (eval_assets/sweep_workers.py): one batch run of the caller's
    project; (run id, success, the first error when the run failed)."""
    from eval_assets.batch import parse_key
    from eval_assets.sweep_workers import sample_listener, worker_project, worker_resources

    project = worker_project(spec)
    mks = [parse_key(k) for k in keys]
    for key in mks:
        listener = sample_listener(key)
        if listener is not None:
            sample_progress.listen(key, listener)
    try:
        r = run_batch(mks, get_instance(project), worker_resources(spec), spec.tags, project, spec.max_concurrent)
    finally:
        for key in mks:
            sample_progress.unlisten(key)
    return r.run_id, bool(r.success), "" if r.success else _first_error(r, project.home)


@contextmanager
def _sigterm_kept() -> Iterator[None]:
    """Give SIGTERM its handler back after a run on the main thread. Dagster's interrupt handling
    (dagster._utils.interrupts) leaves SIGTERM with whatever handler SIGINT has when the run ends; a process started in
    the background by a shell has SIGINT ignored, so it (and every process it starts later, which inherits the
    ignore) would no longer stop on SIGTERM."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield  # Dagster leaves signals alone off the main thread
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None:  # None: set outside Python, and Python can't put it back
            signal.signal(signal.SIGTERM, before)


def dataset_version(split: Any) -> str | None:
    """One hash of everything a split's `dataset` materialization depends on: the adapter and its effective options,
    the prompt template, the adapter's `source_version()` (e.g. data files' size and mtime) and the code that loads
    it. None when the adapter can't tell what it reads without loading it (then the split is loaded every run)."""
    import inspect

    from evalpipe.pipeline import stages as pipeline
    from evalpipe.benchmarks import adapter_for
    from evalpipe.core.fingerprint import fingerprint

    adapter = adapter_for(split)
    source = adapter.source_version()
    if source is None:
        return None
    from evalpipe.benchmarks.base import files_version

    code = files_version(sorted({inspect.getfile(type(adapter)), inspect.getfile(pipeline)}))
    template = split.prompt_template
    if isinstance(template, str) and template.strip() and "\n" not in template:  # a template file: its stat too
        template = f"{template}|{files_version([split.resolve(template.strip())])}"
    return fingerprint({"adapter": split.adapter, "options": split.options, "template": template,
                        "source": source, "code": code})


def current_dataset_run(instance: DagsterInstance, split_key: str, version: str | None,
                        project: Project) -> str | None:
    """The run whose `dataset` materialization of this split is still current (same `dataset_version`, its
    warehouse partition still there); None when the split must be loaded again."""
    if version is None:
        return None
    from dagster import AssetKey, AssetRecordsFilter

    from evalpipe.core.schema import ASSET_TABLES
    from evalpipe.store.warehouse import Warehouse

    recs = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=AssetKey("dataset"), asset_partitions=[split_key]), limit=1).records
    if not recs:
        return None
    run = instance.get_run_by_id(recs[0].run_id)
    if run is None or run.tags.get(DATASET_VERSION_TAG) != version:
        return None
    if not Warehouse(project.warehouse).partition_file(ASSET_TABLES["dataset"], {"benchmark_split": split_key}).exists():
        return None
    return run.run_id


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
    """Asset check evaluations recorded by these runs (empty when no checks are defined). A run named more than
    once (a batch run carries many partitions) is read once."""
    from dagster import DagsterEventType

    out = []
    for run_id in dict.fromkeys(run_ids):
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


def _first_error(result: Any, home: Any = None) -> str:
    """One line for the first failed step: the step, the root cause (the exception chain's messages, below
    Dagster's wrappers) and where the full traceback was saved (docs/operations.md#when-a-run-fails)."""
    from evalpipe.core.errors import describe_error_info

    for ev in result.all_events:
        if ev.is_step_failure and ev.step_failure_data and ev.step_failure_data.error:
            err = ev.step_failure_data.error
            saved = save_traceback(result.run_id, ev.step_key, err.to_string(), home)
            return f"{ev.step_key}: {describe_error_info(err)}" + (f" (full traceback: {saved})" if saved else "")
    return "failed"


from evalpipe.store.run_logs import save_traceback  # noqa: E402  (batch runs save theirs too)


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


def evaluate(project: Project | EvalConfig, splits: list[str], models: list[str] | dict[str, list[str]],
             resources: dict[str, Any] | None = None,
             instance: DagsterInstance | None = None, on_event: Callable[[str], None] | None = None,
             tags: dict[str, str] | None = None,
             on_progress: Callable[[int, int, str], None] | None = None,
             on_sample: Callable[[str, str, int, int], None] | None = None,
             max_concurrent: int | None = None, reload_datasets: bool = False) -> EvaluateResult:
    """dataset per split, the chain per (split, model), then the leaderboard: the fewest Dagster runs the graph
    allows, all in this process on the real instance. Assets with different partitions can't share a run, but
    - a split's `dataset` is not materialized again while it is current (`dataset_version`: same adapter,
      options, source files and loading code as the materialization on record; `reload_datasets` forces it);
    - the unpartitioned `leaderboard` rides in the run of the last chain when there is only one (split, model).
    So a re-run of one partition is one Dagster run, and a first run two.
    Up to `concurrent_partitions(cfg, max_concurrent)` runs go at once (threads: model calls and a local model
    overlap); a split's chains start as soon as its dataset is loaded. More than one chain: batches of partitions,
    one Dagster run each, in `sweep_processes` worker processes when there are several batches and the project
    can be loaded again there (eval_assets/sweep_workers.py). Failures are collected, not raised.
    `on_progress(done, total, label)` is called when a run starts (done = runs finished so far) and at the end;
    `on_sample(split, model, done, total)` as each sample of a partition's rollouts finishes. Callbacks may come
    from worker threads, one at a time. Results are in (split, model) order whatever the finishing order.
    `project`: the Project to run (an EvalConfig is taken as the environment's project of that config); its
    splits and models become partitions here, so a project built in memory runs splits no config file names.
    `models`: the model keys for every split, or per split ({split: keys}: only the intended pairs)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    project = as_project(project)
    cfg = project.config
    per_split = {s: list(models[s]) for s in splits} if isinstance(models, dict) else {s: list(models) for s in splits}
    models = list(dict.fromkeys(m for s in splits for m in per_split[s]))  # every model key of the run, once
    for s in splits:
        cfg.split(s)
    for m in models:
        cfg.model(m)
    given_resources, given_instance = resources, instance
    instance = instance or get_instance(project)
    resources = bind_resources(project, resources)
    say = on_event or (lambda msg: None)
    sync_split_partitions(instance, splits)
    added = sync_model_partitions(instance, models)
    out = EvaluateResult()
    n_chains = sum(len(per_split[s]) for s in splits)
    fold_leaderboard = n_chains == 1  # one chain: the leaderboard joins its run
    effective = resources["eval_config"].get()
    total, done = len(splits) + n_chains + (0 if fold_leaderboard else 1), 0
    lock = threading.RLock()
    results: dict[tuple[str, str], PartitionResult] = {}
    board_failures: list[Any] = []  # a folded leaderboard step that failed (its run)

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
            r = run_assets(CHAIN + (["leaderboard"] if fold_leaderboard else []), key, instance, resources, tags,
                           project)
        finally:
            sample_progress.unlisten(key)
        finished()
        # a folded leaderboard that failed alone leaves the partition itself good (reported as the leaderboard's)
        board_only = (fold_leaderboard and not r.success
                      and {ev.step_key for ev in r.all_events if ev.is_step_failure} == {"leaderboard"})
        ok = r.success or board_only
        res = PartitionResult(split, model, ok, r.run_id, "" if ok else _first_error(r, project.home))
        with lock:
            results[(split, model)] = res
            if board_only:
                board_failures.append(r)
        if not ok:
            step(f"{split} x {model} failed: {res.error}")

    def listen(keys: list[tuple[str, str]]) -> list:
        mks = [eval_key(s, m) for s, m in keys]
        if on_sample is not None:
            for (s, m), key in zip(keys, mks):
                def listener(d: int, t: int, e: int | None = None, s=s, m=m) -> None:
                    with lock:
                        on_sample(s, m, d, t) if e is None else on_sample(s, m, d, t, e)
                sample_progress.listen(key, listener)
        return mks

    def started(keys: list[tuple[str, str]]) -> None:
        step(f"evaluate {len(keys)} partition(s): {keys[0][0]} x {keys[0][1]}"
             + (f" .. {keys[-1][0]} x {keys[-1][1]}" if len(keys) > 1 else ""))

    def settle(keys: list[tuple[str, str]], run_id: str, success: bool, first_error: Callable[[], str]) -> None:
        """Each partition's result of the batch run `run_id` (success: the run's; first_error: its first error)."""
        finished(len(keys))
        outcome = batch_outcome(instance, run_id) if run_id else {}
        for (s, m), key in zip(keys, [eval_key(s, m) for s, m in keys]):
            err = outcome.get(str(key))
            if err is None and not success and str(key) not in outcome:
                err = first_error()  # the batch failed before this partition (e.g. a config error)
            ok = err == ""
            res = PartitionResult(s, m, ok, run_id, "" if ok else err)
            with lock:
                results[(s, m)] = res
            if not ok:
                step(f"{s} x {m} failed: {res.error}")

    def batch(keys: list[tuple[str, str]]) -> None:
        # [sweeps] many partitions in one Dagster run (eval_assets/batch.py), each still materialized on its own
        mks = listen(keys)
        try:
            started(keys)
            r = run_batch(mks, instance, resources, tags, project, max_concurrent)
        finally:
            for key in mks:
                sample_progress.unlisten(key)
        settle(keys, r.run_id, r.success, lambda: _first_error(r, project.home))

    def in_workers(parts: list, spec: Any, workers: int) -> None:
        """[sweeps] the batches in worker processes (eval_assets/sweep_workers.py)."""
        from eval_assets.sweep_workers import run_in_workers

        names = {str(eval_key(s, m)): (s, m) for part in parts for s, m in part}

        def sample(key: str, d: int, t: int, e: int | None) -> None:
            s, m = names[key]
            with lock:
                on_sample(s, m, d, t) if e is None else on_sample(s, m, d, t, e)
        run_in_workers(spec, [[eval_key(s, m) for s, m in part] for part in parts], workers, batch_in_worker,
                       lambda mks, run_id, ok, error: settle([names[str(k)] for k in mks], run_id, ok, lambda: error),
                       sample if on_sample is not None else None,
                       lambda mks: started([names[str(k)] for k in mks]))

    def load(split: str, pool: ThreadPoolExecutor) -> list:
        version = dataset_version(effective.split(split))
        current = None if reload_datasets else current_dataset_run(instance, split, version, project)
        if current is not None:
            step(f"dataset {split} unchanged (loaded by run {current[:8]})")
            finished()
            return [pool.submit(chain, split, m) for m in per_split[split]]
        step(f"dataset {split}")
        r = run_assets(["dataset"], split, instance, resources,
                       {**(tags or {}), **({DATASET_VERSION_TAG: version} if version else {})}, project)
        finished()
        if not r.success:
            err = _first_error(r, project.home)
            with lock:
                for m in per_split[split]:
                    results[(split, m)] = PartitionResult(split, m, False, r.run_id, err)
            finished(len(per_split[split]))
            step(f"dataset {split} failed: {err}")
            return []
        return [pool.submit(chain, split, m) for m in per_split[split]]

    def ready(split: str, pool: Any) -> list:
        """The split's dataset loaded (or current): its chains, to be batched; [] when it failed."""
        loaded: list = []
        load(split, type("Collect", (), {"submit": staticmethod(lambda f, s, m: loaded.append((s, m)))})())
        return loaded

    if not fold_leaderboard:  # [sweeps] more than one chain: batches of partitions, one Dagster run each
        workers = min(concurrent_partitions(cfg, max_concurrent), max(1, len(splits))) \
            if _threads_safe(instance) else 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evalpipe-dataset") as loaders:
            keys = [k for fut in [loaders.submit(ready, s, None) for s in splits] for k in fut.result()]
        parts = batches(keys, batch_size(cfg))
        workers = sweep_processes(cfg, len(parts))
        spec = worker_spec(project, given_resources, given_instance, tags, max_concurrent, models) \
            if workers > 1 else None
        if spec is None:
            for part in parts:
                batch(part)
        else:  # [sweeps] batches in worker processes at once (eval_assets/sweep_workers.py)
            in_workers(even_batches(keys, batch_size(cfg), workers), spec, workers)
        return _finish(out, results, splits, per_split, added, instance, project, resources, tags, step, finished,
                       on_progress, lambda: done, total, fold_leaderboard, board_failures)

    workers = concurrent_partitions(cfg, max_concurrent) if _threads_safe(instance) else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evalpipe-partition") as pool, \
            ThreadPoolExecutor(max_workers=min(workers, max(1, len(splits))), thread_name_prefix="evalpipe-dataset") as loaders:
        chains = [f for fut in [loaders.submit(load, s, pool) for s in splits] for f in fut.result()]
        for f in chains:
            f.result()  # a bug in the launcher itself surfaces here; a failed run is a result, not an exception
    return _finish(out, results, splits, per_split, added, instance, project, resources, tags, step, finished,
                   on_progress, lambda: done, total, fold_leaderboard, board_failures)


def _finish(out: EvaluateResult, results: dict, splits: list[str], per_split: dict, added: list[str],
            instance: DagsterInstance, project: Project, resources: dict, tags: dict | None, step: Callable,
            finished: Callable, on_progress: Callable | None, done: Callable[[], int], total: int, fold_leaderboard: bool,
            board_failures: list) -> EvaluateResult:
    """The partitions' results in order, empty ad-hoc models forgotten, the leaderboard rebuilt."""
    out.partitions = [results[(s, m)] for s in splits for m in per_split[s]]
    forget_empty_models(instance, project, [m for m in added if not any(
        results[(s, m)].success for s in splits if m in per_split[s])])
    if fold_leaderboard and out.partitions[0].success:
        r = board_failures[0] if board_failures else None  # run (or failed) in the chain's run
    else:
        step("leaderboard")
        r = run_assets(["leaderboard"], None, instance, resources, tags, project)
        finished(0 if fold_leaderboard else 1)
    if on_progress:
        on_progress(done(), total, "done")
    out.leaderboard_ok = r is None or r.success
    if not out.leaderboard_ok:  # one line; a partition that failed too is named after it (often the same cause)
        failed = [p for p in out.partitions if not p.success]
        also = (f"; {len(failed)} partition(s) failed too, first {failed[0].benchmark_split} x {failed[0].model}: "
                f"{failed[0].error}") if failed else ""
        raise RunFailed(f"leaderboard failed: {_first_error(r, project.home)}{also}")
    return out
