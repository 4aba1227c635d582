"""Run untrusted code (generated programs, tests, the `python`/`bash` tools) inside a sandbox (docs/sandbox.md).

Entry points: `run_python` (one program, pass = exit status 0), `run_tests` (a solution and its tests through
a harness: pass = `check()` returned), `open_session` (a stateful interpreter for one sample).
Backends (`evalpipe sandbox check` shows which one is in effect): `bwrap` (bubblewrap, an OS-level boundary),
`docker` (a throwaway container), `process` (an audit hook: NOT a boundary, warns; only when named). Chosen by
the `backend` argument, else the environment variable `EVALS_SANDBOX`, else the config's top-level `sandbox:`
key, else `auto` (the strongest OS-level backend that works here; none is an error, never `process`).
"""
from __future__ import annotations

import json
import os
import signal
import struct
from typing import Any, Iterable

from evalpipe.core.errors import ConfigError
from evalpipe.sandbox.base import (DEFAULT_DISK_MB, ExecResult, Limits, Sandbox, SandboxResult, SandboxUnavailable,
                                   get_sandbox, list_sandboxes, new_nonce, register_sandbox, sweep_stale)
from evalpipe.sandbox import bwrap as _bwrap  # noqa: F401  (registers)
from evalpipe.sandbox import docker as _docker  # noqa: F401
from evalpipe.sandbox import process as _process  # noqa: F401
from evalpipe.sandbox._inner import MARK
from evalpipe.sandbox.process import namespaces_available
from evalpipe.sandbox.session import PythonSession, open_session

__all__ = ["run_python", "run_tests", "open_session", "PythonSession", "SandboxResult", "ExecResult", "Sandbox",
           "Limits", "namespaces_available", "resolve_backend", "make_sandbox", "backend_status",
           "register_sandbox", "get_sandbox", "list_sandboxes", "SandboxUnavailable", "CHOICES", "harness_input",
           "sweep_stale", "default_disk_mb", "DEFAULT_DISK_MB"]

CHOICES = ("auto", "bwrap", "docker", "process")


def default_disk_mb(configured: Any = None) -> int:
    """The work folder's disk quota when none is given: `configured` (the project's `sandbox_disk_mb`, handed
    in by the caller), else 256 (0: none)."""
    value = configured
    if value is None:
        return DEFAULT_DISK_MB
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"sandbox_disk_mb must be a whole number of MB >= 0 (0: no quota), got {value!r}")
    return value


def backend_status() -> dict[str, str | None]:
    """Each backend: None when usable here, else why not."""
    return {name: get_sandbox(name).probe() for name in list_sandboxes()}


def resolve_backend(name: str | None = None, configured: str | None = None) -> str:
    """The backend that will run: `name`, else $EVALS_SANDBOX, else `configured` (the project's `sandbox:`,
    handed in by the caller), else auto: bwrap, else docker, else an error (`process` only when named)."""
    choice = (name or os.environ.get("EVALS_SANDBOX") or configured or "auto").strip().lower()
    if choice not in CHOICES and choice not in list_sandboxes():
        raise ConfigError(f"unknown sandbox backend {choice!r}; use one of: {', '.join(CHOICES)}")
    if choice == "auto":
        why_not = {}
        for cls in sorted((get_sandbox(n) for n in list_sandboxes()), key=lambda c: -c.strength):
            if cls.name == "process":
                continue  # never chosen for the user: it is no boundary (below)
            why_not[cls.name] = cls.probe()
            if why_not[cls.name] is None:
                return cls.name
        raise SandboxUnavailable(
            "no OS-level sandbox works here (" + "; ".join(f"{k}: {v}" for k, v in why_not.items()) + "); install "
            "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or name "
            "`sandbox: process` (or EVALS_SANDBOX=process) to run model-written code without a boundary: it can "
            "read and write your files, run programs, reach the network, kill or ptrace your processes")
    why = get_sandbox(choice).probe()
    if why:
        raise SandboxUnavailable(f"sandbox backend {choice!r} cannot run here: {why}; or set `sandbox: auto`")
    return choice


def make_sandbox(backend: str | None = None, *, files: Iterable[str | os.PathLike] | None = None,
                 limits: Limits | None = None, ephemeral: bool = False, configured: str | None = None) -> Sandbox:
    """`configured`: the project's `sandbox:` (see resolve_backend)."""
    return get_sandbox(resolve_backend(backend, configured))(files=files, limits=limits, ephemeral=ephemeral)


def _limits(memory_mb: int, disk_mb: int | None) -> Limits:
    return Limits(memory_mb=memory_mb, disk_mb=default_disk_mb() if disk_mb is None else int(disk_mb))


def explain(reason: str, sb: Sandbox) -> str:
    """A failure's reason, saying which limit it hit: a full work folder (or /tmp) under the quota reads
    `disk quota exceeded (256 MB): ...`, a file over RLIMIT_FSIZE `file size limit exceeded (64 MB per file): ...`."""
    if not reason:
        return reason
    if sb.quota_enforced and ("[Errno 28]" in reason or "No space left on device" in reason):
        return f"disk quota exceeded ({sb.limits.disk_mb} MB): {reason}"
    if "[Errno 27]" in reason or "File too large" in reason or reason == "file size limit exceeded":
        return f"file size limit exceeded ({sb.limits.file_size_mb} MB per file): {reason}"
    return reason


def _failure(r: ExecResult, stderr: str) -> str:
    rc = r.returncode
    if rc is not None and rc < 0:
        if -rc == signal.SIGXCPU:
            return "CPU time limit exceeded"
        if -rc == signal.SIGXFSZ:
            return "file size limit exceeded"
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:500] if lines else f"exit status {rc}"


def _result(r: ExecResult, sb: Sandbox, timeout_s: float, stderr: str | None = None) -> SandboxResult:
    stderr = r.stderr if stderr is None else stderr
    if r.timed_out:
        return SandboxResult(False, "timeout", f"timed out after {timeout_s:g}s", None, r.stdout, stderr,
                             r.duration_s, sb.isolation)
    if r.returncode == 0:
        return SandboxResult(True, "passed", "", 0, r.stdout, stderr, r.duration_s, sb.isolation)
    return SandboxResult(False, "failed", explain(_failure(r, stderr), sb), r.returncode, r.stdout, stderr,
                         r.duration_s, sb.isolation)


def run_python(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024,
               files: Iterable[str | os.PathLike] | None = None, backend: str | None = None,
               max_output: int = 20_000, disk_mb: int | None = None) -> SandboxResult:
    """Run `code` as a program (`main.py` in a fresh work folder). Passed = exit status 0 in time.
    `disk_mb`: the work folder's quota (None: 256; 0: none)."""
    with make_sandbox(backend, files=files, limits=_limits(memory_mb, disk_mb), ephemeral=True) as sb:
        sb.write_file("main.py", code)
        r = sb.exec(sb.python_argv("run", timeout_s=timeout_s), timeout_s=timeout_s, max_output=max_output)
        return _result(r, sb, timeout_s)


def harness_input(nonce: str, setup: str | None, tests: str | None) -> bytes:
    """The harness's stdin: two length-prefixed JSON frames. The first (the setup, not secret) is read before the
    program's process is forked; the second (the nonce and the tests) only after, by the harness alone."""
    frames = [{"setup": setup or ""}, {"nonce": nonce, "tests": tests or ""}]
    return b"".join(struct.pack(">I", len(b)) + b for b in (json.dumps(f).encode() for f in frames))


def run_tests(program: str, tests: str = "", *, entry_point: str | None = None, setup: str | None = None,
              timeout_s: float = 10.0, memory_mb: int = 1024, files: Iterable[str | os.PathLike] | None = None,
              backend: str | None = None, max_output: int = 20_000, disk_mb: int | None = None) -> SandboxResult:
    """Run `program`, then `tests` and `check(entry_point)` (when given) through the harness.

    The program runs in one process; the tests run in another that never executes the program's code (after
    `setup`, trusted code such as the dataset's prompt, which defines helpers the tests use) and call the
    program's functions through proxies. Passed only when that harness reports, with this run's nonce, that
    everything returned. Any exception (SystemExit too), a process that ends early (os._exit, sys.exit, a
    hook), a signal or the time limit is a failure with its reason. Without `entry_point` and `tests` this
    is "the program runs to its end without an error".
    """
    nonce = new_nonce()
    job = harness_input(nonce, setup, tests)
    with make_sandbox(backend, files=files, limits=_limits(memory_mb, disk_mb), ephemeral=True) as sb:
        sb.write_file("main.py", program)
        argv = sb.python_argv("harness", timeout_s=timeout_s, entry_point=entry_point)
        r = sb.exec(argv, input=job, timeout_s=timeout_s, max_output=max_output)
    stderr = "\n".join(ln for ln in r.stderr.split("\n") if not ln.startswith(MARK)).rstrip("\n")
    verdicts = []
    for m in r.markers:
        parts = m[len(MARK):].strip().split(" ", 2)
        if len(parts) == 3 and parts[0] == nonce:
            try:
                verdicts.append((parts[1], str(json.loads(parts[2]))))
            except ValueError:
                continue
    if r.timed_out:
        return _result(r, sb, timeout_s, stderr)
    what = f"check({entry_point})" if entry_point else "the program"
    if verdicts:
        verdict, reason = verdicts[-1]
        if verdict == "passed" and r.returncode == 0:
            return SandboxResult(True, "passed", "", 0, r.stdout, stderr, r.duration_s, sb.isolation)
        if verdict == "passed":
            reason = f"the process ended with {_failure(r, '')} after {what} returned"
        return SandboxResult(False, "failed", explain(reason or "failed", sb), r.returncode, r.stdout, stderr,
                             r.duration_s, sb.isolation)
    if r.returncode == 0:
        reason = (f"the process exited with status 0 before {what} returned (no verdict from the harness: "
                  "sys.exit/os._exit or a hook ended it early)")
    elif r.returncode is not None and r.returncode > 0:
        reason = f"the process exited with status {r.returncode} before {what} returned: {_failure(r, stderr)}"
    else:
        reason = f"the process died before {what} returned: {_failure(r, stderr)}"
    return SandboxResult(False, "failed", explain(reason, sb), r.returncode, r.stdout, stderr, r.duration_s,
                         sb.isolation)
