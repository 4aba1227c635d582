"""`PythonSession`: a stateful Python interpreter for one sample, inside the sandbox (docs/sandbox.md).

A persistent `python` process runs inside the sandbox and answers one JSON request per line over pipes.
`run(code)` keeps variables across calls and returns the last expression's value (its repr, capped);
`bash(command)` runs a shell command in the same work folder under the same backend (each call its own
sandboxed process). A call that passes its time limit kills the whole sandboxed process tree; the next
call starts a fresh interpreter and says so (the work folder and its files are kept).
"""
from __future__ import annotations

import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from evalpipe.sandbox.base import Limits, Sandbox

RESTART_NOTE = ("[the Python session was restarted because the previous call {why}: variables and imports are "
                "gone; files in the work folder are kept]\n")


class PythonSession:
    def __init__(self, sandbox: Sandbox, *, timeout_s: float = 30.0, max_output: int = 16_384,
                 max_value: int = 4_096):
        self.sandbox = sandbox
        self.timeout_s = float(timeout_s)
        self.max_output = int(max_output)
        self.max_value = int(max_value)
        self._proc = None
        self._lines: queue.Queue = queue.Queue()
        self._note = ""
        self._lock = threading.Lock()
        self.closed = False
        self._start()

    # --- public --------------------------------------------------------------------------------------
    @property
    def workdir(self) -> Path:
        """The work folder on the host (the code sees it as `session.workdir_inside`)."""
        return self.sandbox.workdir

    @property
    def workdir_inside(self) -> str:
        return self.sandbox.workdir_inside

    @property
    def isolation(self) -> str:
        return self.sandbox.isolation

    def run(self, code: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Run `code` in the session. Returns dict(stdout, stderr, value, error, timed_out)."""
        return self._call({"op": "run", "code": code}, timeout_s)

    def bash(self, command: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Run `command` with bash in the work folder. Returns dict(stdout, stderr, value, error, timed_out,
        returncode)."""
        if self.closed:
            raise RuntimeError("the session is closed")
        if self.sandbox.name == "process":
            return {"stdout": "", "stderr": "", "value": None, "returncode": None, "timed_out": False,
                    "error": "bash needs an OS-level sandbox (bwrap or docker); the 'process' backend refuses it"}
        limit = float(timeout_s or self.timeout_s)
        r = self.sandbox.exec(self.sandbox.python_argv("exec", "bash", "-c", command, timeout_s=limit),
                              timeout_s=limit, max_output=self.max_output)
        stdout = r.stdout + (f"\n[output truncated at {self.max_output} bytes]" if r.stdout_truncated else "")
        if r.timed_out:
            error = f"timed out after {limit:g}s (the command and everything it started were killed)"
        else:
            error = f"exit status {r.returncode}" if r.returncode else None
        return {"stdout": stdout, "stderr": r.stderr, "value": None, "error": error, "timed_out": r.timed_out,
                "returncode": r.returncode}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop()
        self.sandbox.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # --- internals -----------------------------------------------------------------------------------
    def _start(self) -> None:
        argv = self.sandbox.python_argv("session", timeout_s=None, max_output=self.max_output,
                                        max_value=self.max_value)
        self._proc = self.sandbox.spawn(argv)
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, args=(self._proc, self._lines), daemon=True).start()
        threading.Thread(target=self._discard, args=(self._proc,), daemon=True).start()
        first = self._next_line(60.0)
        if not first or not first.get("ready"):
            self._stop()
            raise RuntimeError(f"the sandboxed Python session did not start ({self.sandbox.isolation}); "
                               f"run `evalpipe sandbox check` to see why")

    @staticmethod
    def _pump(proc, lines: queue.Queue) -> None:
        try:
            for raw in proc.stdout:
                lines.put(raw)
        except (OSError, ValueError):
            pass
        lines.put(None)

    @staticmethod
    def _discard(proc) -> None:  # the server's own stderr (user output goes to per-call files)
        try:
            while proc.stderr.read(65536):
                pass
        except (OSError, ValueError):
            pass

    def _next_line(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            try:
                raw = self._lines.get(timeout=left)
            except queue.Empty:
                raise TimeoutError from None
            if raw is None:
                return None
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # not ours (user code writing to the protocol fd): skip
            if isinstance(msg, dict):
                return msg

    def _stop(self) -> None:
        if self._proc is not None:
            self.sandbox.kill(self._proc)
            try:
                self._proc.wait(timeout=10)
            except Exception:
                pass
            for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
                try:
                    stream.close()
                except Exception:
                    pass
            self.sandbox._procs.discard(self._proc)
            self._proc = None

    def _call(self, request: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        if self.closed:
            raise RuntimeError("the session is closed")
        limit = float(timeout_s or self.timeout_s)
        with self._lock:
            if self._proc is None:
                self._start()
            note, self._note = self._note, ""
            try:
                self._proc.stdin.write((json.dumps(request) + "\n").encode())
                self._proc.stdin.flush()
                reply = self._next_line(limit)
            except TimeoutError:
                self._stop()
                self._note = RESTART_NOTE.format(why=f"timed out after {limit:g}s")
                return {"stdout": "", "stderr": note, "value": None, "timed_out": True,
                        "error": f"timed out after {limit:g}s; the session's processes were killed and the next "
                                 "call starts a fresh interpreter"}
            except (BrokenPipeError, OSError):
                reply = None
            if reply is None:  # the interpreter died (os._exit, a signal, a limit)
                rc = self._proc.poll() if self._proc else None
                self._stop()
                self._note = RESTART_NOTE.format(why="ended the interpreter")
                why = f"exit status {rc}" if rc is not None and rc >= 0 else f"signal {-rc}" if rc else "unknown cause"
                return {"stdout": "", "stderr": note, "value": None, "timed_out": False,
                        "error": f"the Python interpreter ended ({why}); the next call starts a fresh one"}
            out = {"stdout": reply.get("stdout", ""), "stderr": note + reply.get("stderr", ""),
                   "value": reply.get("value"), "error": reply.get("error"), "timed_out": False}
            if note:
                out["restarted"] = True
            return out


def open_session(*, files: Iterable[str | os.PathLike] | None = None, timeout_s: float = 30.0,
                 memory_mb: int = 1024, backend: str | None = None, max_output: int = 16_384,
                 cpu_s: int = 600, configured_backend: str | None = None) -> PythonSession:
    """A stateful sandboxed interpreter for one sample; close it (or use `with`). `configured_backend`: the
    project's `sandbox:` (used when neither `backend` nor $EVALS_SANDBOX is set)."""
    from evalpipe.sandbox import make_sandbox

    sb = make_sandbox(backend, files=files, limits=Limits(memory_mb=memory_mb, cpu_s=cpu_s),
                      configured=configured_backend)
    try:
        return PythonSession(sb, timeout_s=timeout_s, max_output=max_output)
    except BaseException:
        sb.close()
        raise
