"""[sweeps] The batches of one `evalpipe run` (or `evaluate()`) in worker processes (docs/scale.md "Sweeps").

A batch run's partitions share one interpreter: what they compute themselves (partition files, hashes, Dagster's
events: ~0.1 s a cached partition) goes one thread at a time whatever the threads. A sweep of several batches
runs them in `sweep_processes` worker processes at once (default: the machine's cores, at most 4), as the daemon
runs a UI backfill's batch runs in processes of their own. Each worker is a spawned interpreter that loads the
project from its config file and runs its batches (`launch.batch_in_worker` -> `launch.run_batch`: the same
Dagster run a batch gets in this process) against the same instance; each sample's progress comes back through
a queue to the caller's `on_sample`.

Only a project that a worker can load again exactly is run so: one read from a config file that is unchanged
since, with picklable resource overrides and tags, on its own home's instance, without a `runner: local` model.
Anything else (a project built in memory, an instance of another home) runs its batches here, one after
another, as before.

Stopping: SIGINT (Ctrl-C) reaches the workers from the terminal; a SIGTERM to this process is passed on to them,
no batch is started after it, and KeyboardInterrupt is raised once the running ones have ended (as a batch in
this process ends on it: the partitions it is evaluating finish). A kill -9 of this process kills the workers
too (Linux: PR_SET_PDEATHSIG), as it would kill batches running here; a re-run takes what they journaled."""
from __future__ import annotations

import os
import pickle
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable

_PROJECTS: dict[tuple[str, str, str], Any] = {}  # in a worker: the projects it loaded, by (config, home, warehouse)
_QUEUE: Any = None  # in a worker: where sample progress goes


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to run a batch of the caller's project (all picklable)."""
    config_path: str
    home: str
    warehouse: str
    resources: bytes  # the caller's resource overrides, pickled (unbound: each worker binds them to its project)
    tags: dict[str, str] | None
    max_concurrent: int | None


IN_PROCESS_RUNNERS = {"local"}  # runners that hold a model in the process: one copy, shared by the run's partitions


def worker_spec(project: Any, resources: dict[str, Any] | None, instance: Any, tags: dict[str, str] | None,
                max_concurrent: int | None, models: list[str]) -> WorkerSpec | None:
    """The spec of a run whose batches can go to worker processes, or None when they must stay in this process."""
    from evalpipe.project.loader import load_config

    if project.config_path is None:  # built in memory: a worker can't load it
        return None
    if any(project.config.model(m).runner in IN_PROCESS_RUNNERS for m in models):  # a model per worker: no
        return None
    try:
        if load_config(project.config_path) is not project.config:  # the file changed since, or a derived config
            return None
        if instance is not None and os.path.realpath(instance.root_directory) != os.path.realpath(project.home):
            return None
        blob = pickle.dumps({name: _portable(r) for name, r in (resources or {}).items()})
        _rebuilt(blob)  # (a value that pickles but does not load back stays here)
        pickle.dumps(tags)
    except Exception:  # noqa: BLE001  (an unpicklable override, an unreadable file: run here, as before)
        return None
    return WorkerSpec(str(project.config_path), str(project.home), str(project.warehouse), blob,
                      dict(tags) if tags else None, max_concurrent)


def _portable(resource: Any) -> Any:
    """A resource as pickle can carry it: Dagster's configurable resources pickle but don't load back, so one is
    carried as its class and its fields' values."""
    from dagster import ConfigurableResource

    if isinstance(resource, ConfigurableResource):
        return ("resource", type(resource), {k: getattr(resource, k) for k in type(resource).model_fields})
    return ("value", resource)


def _rebuilt(blob: bytes) -> dict[str, Any]:
    return {name: (kind[1](**kind[2]) if kind[0] == "resource" else kind[1])
            for name, kind in pickle.loads(blob).items()}


def even_batches(keys: list, size: int, workers: int) -> list[list]:
    """`keys` in batches of at most `size`, as many as a multiple of `workers` and as even as can be: no worker is
    left with a short last batch while another runs a long one."""
    n = max(1, -(-len(keys) // max(1, size)))
    n = -(-n // workers) * workers
    n = min(n, len(keys)) or 1
    step, extra = divmod(len(keys), n)
    out, at = [], 0
    for i in range(n):
        take = step + (i < extra)
        out.append(keys[at:at + take])
        at += take
    return [b for b in out if b]


def run_in_workers(spec: WorkerSpec, parts: list[list], workers: int, job: Callable[[WorkerSpec, list[str]], Any],
                   settle: Callable[[list, str, bool, str], None],
                   on_sample: Callable[[str, int, int, int | None], None] | None,
                   started: Callable[[list], None]) -> None:
    """Every batch of `parts` in `workers` spawned processes, each as `job(spec, partition keys)` -> (run id,
    success, first error) (a module-level function: the worker imports it by name); `settle(keys, run_id, success, first_error)` as each
    batch ends (run_id "" and the error when its worker failed), in this thread. `on_sample(partition key, done,
    total, errors)` from a thread of this process. `started(keys)` as each batch is handed to a worker."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue() if on_sample is not None else None
    drain = None
    if queue is not None:
        def pump() -> None:
            while True:
                item = queue.get()
                if item is None:
                    return
                on_sample(*item)
        drain = threading.Thread(target=pump, name="evalpipe-sweep-progress", daemon=True)
        drain.start()
    stop = threading.Event()
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_start_worker,
                               initargs=(queue, os.getpid(), _warning_filters()))
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigterm(signum: int, frame: Any) -> None:
            stop.set()
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                try:
                    os.kill(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        pending: dict[Future, list] = {}
        todo = list(parts)
        while todo or pending:
            while todo and len(pending) < workers and not stop.is_set():
                keys = todo.pop(0)
                started(keys)
                pending[pool.submit(job, spec, [str(k) for k in keys])] = keys
            if not pending:
                break
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in done:
                keys = pending.pop(fut)
                try:
                    run_id, success, error = fut.result()
                except Exception as e:  # noqa: BLE001  (a worker that died or raised: its batch failed)
                    from evalpipe.core.errors import describe_exception

                    run_id, success, error = "", False, f"worker process failed: {describe_exception(e)}"
                settle(keys, run_id, success, error)
        if stop.is_set():
            raise KeyboardInterrupt("stopped by SIGTERM")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if queue is not None:
            queue.put(None)
            drain.join(5)
            queue.close()


# ---- in a worker process ------------------------------------------------------------------------------------------
def _warning_filters() -> list:
    """This process's warning filters that pickle (the CLI's and the API's quieting of Dagster's preview notes)."""
    import warnings

    out = []
    for f in warnings.filters:
        try:
            pickle.dumps(f)
            out.append(f)
        except Exception:  # noqa: BLE001
            pass
    return out


def _start_worker(queue: Any, parent: int, filters: list) -> None:
    import warnings

    global _QUEUE
    _QUEUE = queue
    warnings.filters[:] = filters  # the caller's: what it keeps quiet stays quiet here
    try:  # Linux: a kill -9 of the caller kills its workers too, as it kills batches running in its own process
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001  (elsewhere the worker ends when its batch does)
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def worker_project(spec: WorkerSpec) -> Any:
    """In a worker: the caller's project, loaded from its config file once per worker."""
    from evalpipe.project import Project

    where = (spec.config_path, spec.home, spec.warehouse)
    project = _PROJECTS.get(where)
    if project is None:
        project = _PROJECTS[where] = Project.from_file(*where)
        import gc

        gc.freeze()  # as `evalpipe run` does: the long-lived objects of Dagster and pandas skip the collector
    return project


def worker_resources(spec: WorkerSpec) -> dict[str, Any] | None:
    """In a worker: the caller's resource overrides."""
    return _rebuilt(spec.resources) or None


def sample_listener(key: Any) -> Callable[..., None] | None:
    """In a worker: a listener that sends a partition's sample progress to the caller (None: the caller has none)."""
    queue, name = _QUEUE, str(key)
    if queue is None:
        return None

    def listener(done: int, total: int, errors: int | None = None) -> None:
        queue.put((name, done, total, errors))
    return listener
