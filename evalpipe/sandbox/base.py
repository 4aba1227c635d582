"""The sandbox interface: a work folder plus a way to run commands inside a boundary (docs/sandbox.md).

A `Sandbox` owns one host folder (its work folder, writable inside the sandbox and nothing else is) and
turns an argv into a host command that runs it inside the boundary (`wrap`). Everything else (starting,
draining output with caps, killing the whole tree on a timeout) is shared here, so each backend is only its
command line and its probe.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterable

from evalpipe.core.errors import ConfigError
from evalpipe.core.turns import waiting
from evalpipe.core.procs import pid_alive
from evalpipe.core.registry import Registry

log = logging.getLogger("evalpipe.sandbox")
INNER = Path(__file__).with_name("_inner.py")
INNER_IN_SANDBOX = "/opt/evalpipe/_inner.py"  # where bwrap and docker mount it (read-only)
MAX_OUTPUT = 20_000
DEFAULT_DISK_MB = 256
OUTER_PREFIX = "evalpipe-sandbox-"  # + "<owner pid>-<random>": the sweeper's way to tell a folder is ours
OWNER_LOCK = "owner.lock"  # flock'ed by the evaluator for the folder's whole life: unlockable = owner dead


@dataclass
class Limits:
    """Per-process limits inside the sandbox (rlimits; Docker adds cgroup limits)."""

    memory_mb: int = 1024  # RLIMIT_AS of each process
    cpu_s: int | None = None  # RLIMIT_CPU of each process; None: the wall time limit + 2 s
    processes: int = 64  # RLIMIT_NPROC (threads count); fork bombs stop here
    file_size_mb: int = 64  # RLIMIT_FSIZE: no single file written larger than this
    open_files: int = 512  # RLIMIT_NOFILE
    # the work folder's disk quota for one-shot runs (run_python, run_tests): a size-capped tmpfs under bwrap
    # and docker (counts against the machine's memory while used); None or 0: no quota
    disk_mb: int | None = DEFAULT_DISK_MB
    tmp_mb: int | None = None  # size of the private /tmp (a tmpfs); None: the same as disk_mb (256 without one)

    def __post_init__(self):
        if self.disk_mb is not None and int(self.disk_mb) < 0:
            raise ConfigError(f"sandbox: disk_mb must be >= 0 (0: no quota), got {self.disk_mb}")

    @property
    def tmp_size_mb(self) -> int:
        return int(self.tmp_mb or self.disk_mb or DEFAULT_DISK_MB)

    def rlimits(self, timeout_s: float | None) -> dict[str, int]:
        cpu = self.cpu_s if self.cpu_s is not None else int(timeout_s or 60) + 2
        return {"RLIMIT_AS": int(self.memory_mb) * 1024 * 1024, "RLIMIT_CPU": int(cpu),
                "RLIMIT_FSIZE": int(self.file_size_mb) * 1024 * 1024, "RLIMIT_CORE": 0,
                "RLIMIT_NOFILE": int(self.open_files), "RLIMIT_NPROC": int(self.processes)}


@dataclass
class ExecResult:
    """What one command did. `status`: passed (exit 0) | failed | timeout."""

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    markers: list[str] = field(default_factory=list)  # harness lines seen on stderr (see _inner.MARK)

    @property
    def timed_out(self) -> bool:
        return self.status == "timeout"


@dataclass
class SandboxResult:
    passed: bool
    status: str  # passed | failed | timeout
    error: str  # one line: why it failed ("" when it passed)
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    isolation: str  # the backend that really ran: bwrap | docker | process


class SandboxUnavailable(ConfigError):
    """The backend asked for cannot run on this machine."""


class Sandbox(ABC):
    """One work folder and a boundary around the commands run in it. Use as a context manager."""

    name: ClassVar[str]
    strength: ClassVar[int]  # auto picks the highest available
    isolation: str  # label reported in results (the backend name)
    workdir_inside: str  # the work folder's path as the sandboxed code sees it
    _owner = None

    def __init__(self, *, files: Iterable[str | os.PathLike] | None = None, limits: Limits | None = None,
                 ephemeral: bool = False):
        """`ephemeral`: one-shot runs. Inside, the work folder is then a fresh tmpfs capped at `limits.disk_mb`
        (where the backend can: `quota_enforced`) that lives for one command; the host's work folder only
        stages the files written before it, bound read-only into it. Otherwise the host folder itself is
        bound (sessions: several commands share it) and only RLIMIT_FSIZE bounds a file."""
        self.limits = limits or Limits()
        self.isolation = self.name
        self.ephemeral = bool(ephemeral)
        sweep_once()
        # a private (0700) folder around the work folder: other users of the machine can't look in
        self._outer = Path(tempfile.mkdtemp(prefix=f"{OUTER_PREFIX}{os.getpid()}-"))
        self._owner = _hold_owner_lock(self._outer)
        self._procs: set[subprocess.Popen] = set()
        try:
            self.workdir = self._outer / "work"
            self.workdir.mkdir()
            self.read_only: list[str] = []
            for f in files or ():
                src = Path(f)
                if not src.is_file():
                    raise ConfigError(f"sandbox: file {src} does not exist (files given to the sandbox must be "
                                      "regular files)")
                dest = self.workdir / src.name
                shutil.copyfile(src, dest)
                os.chmod(dest, 0o444)
                self.read_only.append(src.name)
            self.prepare_workdir()
        except BaseException:
            self.close()
            raise

    # --- what a backend provides -------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def probe(cls) -> str | None:
        """None when usable here, else one line saying why not (and how to fix it)."""

    @abstractmethod
    def wrap(self, inner_argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, Any]]:
        """The host command (and extra Popen arguments) running `inner_argv` inside the boundary."""

    def prepare_workdir(self) -> None:
        """Hook: adjust ownership/permissions of the fresh work folder."""

    @property
    def quota_enforced(self) -> bool:
        """Whether the work folder's disk quota holds for the commands run here."""
        return False

    def staged_files(self) -> list[str]:
        """Paths (relative, '/'-separated) of the regular files in the host work folder: what an ephemeral work
        folder gets, bound read-only."""
        out = []
        for root, _dirs, names in os.walk(self.workdir):
            for n in names:
                path = Path(root) / n
                if path.is_file() and not path.is_symlink():
                    out.append(path.relative_to(self.workdir).as_posix())
        return sorted(out)

    def python(self) -> str:
        """The interpreter path as seen inside the sandbox."""
        return sys.executable

    def inner_script(self) -> str:
        return INNER_IN_SANDBOX

    def inner_config(self, timeout_s: float | None) -> dict[str, Any]:
        return {"limits": self.limits.rlimits(timeout_s)}

    # --- shared ------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The whole environment inside: nothing of the caller's (no keys, no tokens)."""
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.workdir_inside, "TMPDIR": "/tmp",
                "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}

    def python_argv(self, mode: str, *args: str, timeout_s: float | None = None, **extra: Any) -> list[str]:
        cfg = {**self.inner_config(timeout_s), **extra}
        return [self.python(), "-I", "-S", "-B", self.inner_script(), json.dumps(cfg), mode, *args]

    def spawn(self, inner_argv: list[str], *, stdin: Any = subprocess.PIPE) -> subprocess.Popen:
        argv, kwargs = self.wrap(inner_argv, self.env())
        kwargs.setdefault("cwd", self.workdir)
        kwargs.setdefault("env", {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"})
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, **kwargs)
        self._procs.add(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill everything the command started. bwrap: its PID namespace dies with it; process: its group."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except OSError:
            pass

    def exec(self, inner_argv: list[str], *, input: bytes | None = None, timeout_s: float = 10.0,
             max_output: int = MAX_OUTPUT) -> ExecResult:
        """Run to completion (or the time limit); stdout keeps its head, stderr its tail, both capped."""
        start = time.perf_counter()
        proc = self.spawn(inner_argv)
        out, err = _Drain(proc.stdout, max_output, keep="head"), _Drain(proc.stderr, max_output, keep="tail")
        try:
            def feed():  # in a thread: a child that never reads must not block the time limit
                try:
                    if input is not None:
                        proc.stdin.write(input)
                    proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass

            threading.Thread(target=feed, daemon=True).start()
            try:
                with waiting():  # [sweeps] a batch's other partitions compute meanwhile (core/turns.py)
                    proc.wait(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                self.kill(proc)
                proc.wait()
        finally:
            self._procs.discard(proc)
        out.join(5)
        err.join(5)
        if out.is_alive() or err.is_alive():  # a descendant still holds the pipes: not ours to wait for
            self.kill(proc)
        rc = proc.returncode
        status = "timeout" if timed_out else "passed" if rc == 0 else "failed"
        return ExecResult(status, None if timed_out else rc, out.text(), err.text(), time.perf_counter() - start,
                          out.truncated, err.truncated, err.markers)

    def write_file(self, name: str, data: str | bytes) -> Path:
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
        self.prepare_path(path)
        return path

    def prepare_path(self, path: Path) -> None:
        """Hook: make a file written by the host readable inside."""

    def read_file(self, name: str, max_bytes: int = 100 * 1024 * 1024) -> bytes:
        path = self._path(name)
        with open(path, "rb") as fh:
            return fh.read(max_bytes)

    def _path(self, name: str) -> Path:
        path = (self.workdir / name).resolve()
        if not path.is_relative_to(self.workdir.resolve()):
            raise PermissionError(f"sandbox: {name!r} is outside the work folder")
        return path

    def close(self) -> None:
        for proc in list(self._procs):
            self.kill(proc)
        self._procs.clear()
        shutil.rmtree(self._outer, ignore_errors=True)
        if self._owner is not None:
            self._owner.close()  # after the folder is gone: a sweeper never sees it unlocked
            self._owner = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Drain(threading.Thread):
    """Reads a pipe to its end, keeping at most `cap` bytes (head or tail) and every harness marker line."""

    def __init__(self, stream, cap: int, keep: str):
        super().__init__(daemon=True)
        self.stream, self.cap, self.keep = stream, cap, keep
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0
        self.markers: list[str] = []
        self._line = b""
        self.start()

    def run(self) -> None:
        from evalpipe.sandbox._inner import MARK

        mark = MARK.encode()
        try:
            while True:
                chunk = self.stream.read1(65536) if hasattr(self.stream, "read1") else self.stream.read(65536)
                if not chunk:
                    break
                self.total += len(chunk)
                if self.keep == "head":
                    if len(self.head) < self.cap:
                        self.head += chunk[: self.cap - len(self.head)]
                else:
                    self.tail.append(chunk)
                    self.tail_len += len(chunk)
                    while self.tail and self.tail_len - len(self.tail[0]) >= self.cap:
                        self.tail_len -= len(self.tail.popleft())
                buf = self._line + chunk
                if b"\n" in buf:
                    *lines, rest = buf.split(b"\n")
                    if mark[:1] in buf:
                        found = [ln.decode("utf-8", "replace") for ln in lines if ln.startswith(mark)]
                        self.markers = (self.markers + found)[-8:]  # the verdict comes last
                else:
                    rest = buf
                self._line = rest[:4096]  # a marker line is short; longer lines only need their start
        except (OSError, ValueError):
            pass
        finally:
            if self._line.startswith(mark):
                self.markers = (self.markers + [self._line.decode("utf-8", "replace")])[-8:]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        data = bytes(self.head) if self.keep == "head" else b"".join(self.tail)[-self.cap:]
        return data.decode("utf-8", "replace")


# --- folders left by an evaluator that died (kill -9) ----------------------------------------------------------
_swept = False
_OUTER_NAME = re.compile(re.escape(OUTER_PREFIX) + r"(\d+)-")


def _hold_owner_lock(outer: Path):
    fh = open(outer / OWNER_LOCK, "w")  # close-on-exec: no sandboxed command inherits it
    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def sweep_stale(tmpdir: str | os.PathLike | None = None) -> list[Path]:
    """Remove the sandbox folders in the temp folder whose evaluator is dead; returns them.

    Ours: named `evalpipe-sandbox-<pid>-*`. Dead: its `owner.lock` can be locked (the kernel drops an flock when
    its holder dies, kill -9 included); a folder without the lock (created a moment ago, or by an older
    evalpipe) goes only when its pid is gone. A live evaluator's folder is never touched."""
    removed = []
    base = Path(tmpdir or tempfile.gettempdir())
    try:
        entries = list(base.glob(OUTER_PREFIX + "*"))
    except OSError:
        return removed
    for path in entries:
        try:
            if not path.is_dir() or path.is_symlink():
                continue
            lock = path / OWNER_LOCK
            if lock.exists():
                with open(lock) as fh:  # never "a": must not recreate a lock in a folder going away
                    try:
                        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue  # its evaluator is alive
                    shutil.rmtree(path, ignore_errors=True)
            else:
                m = _OUTER_NAME.match(path.name)
                if not m or pid_alive(int(m.group(1))):
                    continue
                shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
        except OSError:  # another user's folder, or one going away: not ours to judge
            continue
    if removed:
        log.info("removed %d sandbox folder(s) left by evaluators that died: %s", len(removed),
                 ", ".join(p.name for p in removed[:5]))
    return removed


def sweep_once() -> None:
    """The first sandbox of a process sweeps what dead evaluators left behind."""
    global _swept
    if not _swept:
        _swept = True
        sweep_stale()


def new_nonce() -> str:
    return secrets.token_hex(16)


# --- the registry ----------------------------------------------------------------------------------------
SANDBOXES: Registry[type[Sandbox]] = Registry("sandbox backend")


def register_sandbox(name: str):
    def add(cls):
        cls.name = name
        SANDBOXES.register(name, cls)
        return cls

    return add


def get_sandbox(name: str) -> type[Sandbox]:
    return SANDBOXES.get(name)


def list_sandboxes() -> list[str]:
    return SANDBOXES.names()
