"""[sweeps] The run launcher of the default instance (dagster_home/dagster.yaml): each run in a process forked from a
warm server that has the libraries imported (docs/scale.md "Sweeps").

Dagster's DefaultRunLauncher asks the code server to start each run, and the code server starts it in a spawned
interpreter: ~2.3 s of CPU importing Dagster, pandas, pyarrow, DuckDB and SQLAlchemy before the run's own code,
for every run. A UI backfill of 400 partitions is 10 batch runs, so a quarter of its CPU went to those imports.
Here each run is `dagster api execute_run` (the command other launchers start in containers) in a process forked
from a multiprocessing forkserver that has those libraries and evalpipe's own modules imported; the run then
imports the project's code (eval_assets.definitions, which reads the config file, and the config's plugins) as a
spawned run does. A run always executes the code on disk: when a file of the evalpipe package has changed since
the forkserver imported it (its size or mtime), runs go to the code server, freshly spawned, as before, until
the daemon restarts. A run whose code location runs another Python, or has no Python origin, goes there too.

Stopping a run (the UI's Terminate) sends SIGTERM to its process, which Dagster's run handles as an interrupt
(the run ends CANCELED), as the code server's cancel does. The forkserver is the daemon's child; runs outlive it."""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from dagster import DefaultRunLauncher

PID_TAG = "evalpipe/run_pid"  # on a run this launcher started: its process
# imported once in the forkserver: libraries and evalpipe's modules (the project's code, eval_assets and plugins,
# is imported by each run, fresh); none of them starts a thread at import (a fork copies only the forking thread)
PRELOAD = ["dagster", "dagster._cli.api", "dagster._core.execution.api", "pandas", "pyarrow", "pyarrow.parquet",
           "duckdb", "sqlalchemy", "pydantic", "evalpipe.benchmarks", "evalpipe.pipeline.stages",
           "evalpipe.store.warehouse", "evalpipe.store.instance_storage"]
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # evalpipe/
_lock = threading.Lock()
_context: Any = None
_imported: tuple | None = None  # the evalpipe package's files as the forkserver imported them


def source_signature(root: str = PACKAGE) -> tuple:
    """(path, size, mtime) of every Python file of the package: what a preloaded import depends on."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                out.append((os.path.join(folder, name), st.st_size, st.st_mtime_ns))
    return tuple(out)


def _forkserver() -> Any:
    """The forkserver context, or None when evalpipe's files changed since it imported them."""
    global _context, _imported
    with _lock:
        if _context is None:
            import multiprocessing

            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _context, _imported = ctx, source_signature()
            return _context
        return _context if source_signature() == _imported else None


def _execute_run(serialized_args: str) -> None:
    """In the forked process: what `dagster api execute_run <args>` does."""
    from dagster._cli.api import execute_run_command

    execute_run_command.callback(input_json=serialized_args, compressed_input_json=None)


class WarmRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher whose runs start from a warm forkserver (see the module's docstring)."""

    def __init__(self, inst_data: Any = None):
        super().__init__(inst_data=inst_data)
        self._procs: dict[str, Any] = {}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> "WarmRunLauncher":
        return cls(inst_data=inst_data)

    def launch_run(self, context: Any) -> None:
        from dagster._grpc.types import ExecuteRunArgs
        from dagster_shared.serdes import serialize_value

        run = context.dagster_run
        origin = run.job_code_origin
        if origin is None or os.path.realpath(origin.executable_path or "") != os.path.realpath(sys.executable):
            return super().launch_run(context)  # another interpreter's code: its code server starts it
        warm = _forkserver()
        if warm is None:  # evalpipe's code changed since the forkserver imported it: a fresh process
            return super().launch_run(context)
        args = ExecuteRunArgs(job_origin=origin, run_id=run.run_id, instance_ref=self._instance.get_ref(),
                              set_exit_code_on_failure=True)
        proc = warm.Process(target=_execute_run, args=(serialize_value(args),),
                                     name=f"dagster-run-{run.run_id[:8]}")
        proc.start()
        self._instance.add_run_tags(run.run_id, {PID_TAG: str(proc.pid)})
        with _lock:
            for run_id in [r for r, p in self._procs.items() if not p.is_alive()]:
                self._procs.pop(run_id).join(0)
            self._procs[run.run_id] = proc
            self._run_ids.add(run.run_id)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id) if self.has_instance else None
        if run is None or run.is_finished:
            return False
        pid = run.tags.get(PID_TAG)
        if not pid:
            return super().terminate(run_id)  # started by the code server
        self._instance.report_run_canceling(run)
        try:
            os.kill(int(pid), signal.SIGTERM)  # the run's interrupt handling ends it CANCELED
        except (OSError, ValueError):
            self._instance.report_engine_event(message=f"Run process {pid} is gone: nothing to terminate.",
                                               dagster_run=run, cls=self.__class__)
            return False
        return True
