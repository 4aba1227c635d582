"""Run untrusted Python (generated code plus its tests) in a constrained subprocess.

Each run gets:
- its own fresh temporary directory as working directory, HOME and TMPDIR, removed afterwards;
- a wall-clock time limit (the whole process group is killed) and CPU, memory (RLIMIT_AS), file-size and
  core-dump limits set with `resource.setrlimit` in the child before the user's code runs;
- no network: when `unshare -rn` works (unprivileged user namespaces), the child runs in a fresh network
  namespace whose only interface, loopback, is down, so every connect fails at the kernel; in addition (and
  alone where namespaces are not available) an audit hook in the child refuses socket connect/bind/sendto;
- no file access outside its directory: an audit hook refuses opening files outside the run directory, except
  reading the Python installation (stdlib, site-packages) and a few harmless devices; it also refuses starting
  processes, `os.system`, changing directory outside the run directory and loading native libraries from
  outside the Python installation, so the limits can't be stepped around by a child process.

What this is and isn't: it keeps model-written code from touching the network, the user's files or the
machine's memory by accident or by a naive attempt. Audit hooks are not a security boundary against code
written to escape them (e.g. through an already-imported C extension); run hostile code in a container or VM.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The child's first code: installs the audit hook, then runs the user's program as __main__.
GUARD = r'''
import json, os, resource, sys
_cfg = json.loads(sys.argv[1])
# limits first, before any user code (set here rather than in a preexec_fn: forking from a threaded
# parent and running Python before exec can deadlock)
for _name, _value in _cfg["limits"].items():
    resource.setrlimit(getattr(resource, _name), (_value, _value))
_root = os.path.realpath(_cfg["root"])
_read_ok = tuple(os.path.realpath(p) for p in _cfg["read_ok"])
_block_net = _cfg["block_network"]
_DEV_OK = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")

def _inside(path, prefixes):
    return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in prefixes)

def _hook(event, args):
    if event == "open":
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if isinstance(path, int) or path is None:
            return
        try:
            real = os.path.realpath(os.fsdecode(path))
        except Exception:
            raise PermissionError(f"sandbox: refused to open {path!r}")
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND))
        if _inside(real, (_root,)) or real in _DEV_OK:
            return
        if not writing and _inside(real, _read_ok):
            return
        raise PermissionError(f"sandbox: access outside the sandbox directory refused: {real}")
    if event in ("os.listdir", "os.scandir", "os.chdir", "os.remove", "os.rmdir", "os.rename", "os.mkdir",
                 "os.symlink", "os.link", "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree"):
        for p in args:
            if isinstance(p, (str, bytes, os.PathLike)):
                real = os.path.realpath(os.fsdecode(p))
                if not (_inside(real, (_root,)) or (event in ("os.listdir", "os.scandir") and _inside(real, _read_ok))):
                    raise PermissionError(f"sandbox: {event} outside the sandbox directory refused: {real}")
                break
        return
    if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                 "os.forkpty", "pty.spawn", "os.startfile", "os.kill", "os.killpg"):
        raise PermissionError(f"sandbox: {event} refused")
    if event == "ctypes.dlopen" and args and args[0] is not None:  # numpy loads its own libraries: allowed
        real = os.path.realpath(os.fsdecode(args[0])) if os.sep in os.fsdecode(args[0]) else ""
        if not _inside(real, _read_ok + (_root,)):
            raise PermissionError(f"sandbox: loading native library {args[0]!r} refused")
    if _block_net and event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"):
        raise PermissionError(f"sandbox: network access refused ({event})")

sys.addaudithook(_hook)
sys.path.insert(0, _root)
del json, _cfg
import runpy
sys.argv = [os.path.join(_root, "main.py")]
runpy.run_path(sys.argv[0], run_name="__main__")
'''


@dataclass
class SandboxResult:
    passed: bool
    status: str  # passed | failed | timeout
    error: str  # one line: the exception that ended the program, or why it was stopped
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    isolation: str  # "namespace+audit" or "audit"


@lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether `unshare -rn` (user + network namespace, no root needed) works on this machine."""
    exe = shutil.which("unshare")
    if not exe:
        return False
    try:
        return subprocess.run([exe, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _read_ok() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            paths.add(p)
    return sorted(paths)


def _last_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[-1].strip()[:500] if lines else ""


def run_python(code: str, *, timeout_s: float = 10.0, memory_mb: int = 1024, network: bool = False,
               use_namespace: bool | None = None, audit_network: bool = True, max_output: int = 20_000) -> SandboxResult:
    """Run `code` as a program in the sandbox. Passed = exit status 0 within the time limit.

    `use_namespace`: None = use a network namespace when available; `audit_network=False` turns off the audit
    hook's socket refusal (tests use that to check the namespace alone). `network=True` allows the network.
    """
    ns = (namespaces_available() if use_namespace is None else use_namespace) and not network
    block = audit_network and not network
    root = Path(tempfile.mkdtemp(prefix="evalpipe-sandbox-"))
    try:
        (root / "main.py").write_text(code, encoding="utf-8")
        limits = {"RLIMIT_AS": int(memory_mb) * 1024 * 1024, "RLIMIT_CPU": int(timeout_s) + 2,
                  "RLIMIT_FSIZE": 64 * 1024 * 1024, "RLIMIT_CORE": 0}
        cfg = json.dumps({"root": str(root), "read_ok": _read_ok(), "block_network": block, "limits": limits})
        cmd = [sys.executable, "-I", "-B", "-c", GUARD, cfg]
        if ns:
            cmd = [shutil.which("unshare") or "unshare", "-rn", *cmd]
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "TMPDIR": str(root), "LANG": "C.UTF-8",
               "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
            timed_out = True
        duration = time.perf_counter() - start
        stdout = out.decode("utf-8", "replace")[:max_output]
        stderr = err.decode("utf-8", "replace")[-max_output:]
        isolation = "namespace+audit" if ns and block else "namespace" if ns else "audit" if block else "none"
        if timed_out:
            return SandboxResult(False, "timeout", f"timed out after {timeout_s:g}s", None, stdout, stderr, duration, isolation)
        rc = proc.returncode
        if rc == 0:
            return SandboxResult(True, "passed", "", rc, stdout, stderr, duration, isolation)
        error = _last_line(stderr) or (f"killed by signal {-rc}" if rc < 0 else f"exit status {rc}")
        if rc == -signal.SIGXCPU:
            error = "CPU time limit exceeded"
        return SandboxResult(False, "failed", error, rc, stdout, stderr, duration, isolation)
    finally:
        shutil.rmtree(root, ignore_errors=True)
