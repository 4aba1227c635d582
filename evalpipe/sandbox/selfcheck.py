"""A quick attack/conformance suite for a sandbox backend (`evalpipe sandbox check`; a few seconds).

Each check tries something the sandbox must stop (or do) and verifies the outcome from the host. The full
suite is tests/test_sandbox_attacks.py and tests/test_sandbox_cheats.py.
"""
from __future__ import annotations

import os
import socket
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evalpipe.sandbox import make_sandbox, run_python, run_tests


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


def _runs(backend):
    r = run_python("import sys; print('ok', sys.version_info[0])", backend=backend)
    return r.passed and r.stdout.strip() == "ok 3", r.error or r.stdout.strip()


def _outside_files(backend):
    with tempfile.TemporaryDirectory() as d:
        secret = Path(d) / "secret.txt"
        secret.write_text("s3cret-selfcheck")
        code = textwrap.dedent(f"""
        import ctypes, ctypes.util, os
        try:
            print(open({str(secret)!r}).read())
        except OSError:
            pass
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        fd = libc.open({str(Path(d) / 'planted')!r}.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
        """)
        r = run_python(code, backend=backend)
        leaked = "s3cret" in r.stdout
        planted = (Path(d) / "planted").exists()
    return not leaked and not planted, ("read a host file; " if leaked else "") + ("wrote a host file via ctypes" if planted else "")


def _read_only_system(backend):
    r = run_python("import os\nfor p in ('/usr/evalpipe-x', '/etc/evalpipe-x'):\n"
                   "    try:\n        open(p, 'w'); print('WROTE', p)\n    except OSError:\n        pass\n"
                   "open('mine.txt', 'w').write('ok')\nprint('uid', os.getuid())", backend=backend)
    ok = r.passed and "WROTE" not in r.stdout and "uid 0" not in r.stdout
    return ok, r.stdout.strip().replace("\n", "; ") or r.error


def _environment(backend):
    os.environ["EVALPIPE_SELFCHECK_SECRET"] = "sk-selfcheck-planted"
    try:
        r = run_python("import os\nprint(sorted(os.environ))\nprint(os.environ.get('EVALPIPE_SELFCHECK_SECRET'))",
                       backend=backend)
    finally:
        os.environ.pop("EVALPIPE_SELFCHECK_SECRET", None)
    return r.passed and "planted" not in r.stdout, r.stdout.splitlines()[0] if r.stdout else r.error


def _network(backend):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        port = srv.getsockname()[1]
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')",
                       backend=backend)
    finally:
        srv.close()
    return "connected" not in r.stdout, r.error


def _processes(backend):
    r = run_python(f"import glob, os\nprint(os.path.exists('/proc/{os.getpid()}'), len(glob.glob('/proc/[0-9]*')))",
                   backend=backend)
    seen, count = (r.stdout.split() + ["?", "?"])[:2]
    return r.passed and seen == "False", f"host pid visible: {seen}; processes visible: {count}"


def _timeout_kills_descendants(backend):
    with make_sandbox(backend) as sb:
        sb.write_file("main.py", textwrap.dedent("""
        import subprocess, time
        subprocess.Popen(["setsid", "sh", "-c", "echo started > started; sleep 1.5; echo late > late"])
        while True:
            time.sleep(0.05)
        """))
        r = sb.exec(sb.python_argv("run", timeout_s=1), timeout_s=1)
        started = (sb.workdir / "started").exists()
        time.sleep(2)
        late = (sb.workdir / "late").exists()
    if not started:
        return False, f"the grandchild never started ({r.stderr.strip().splitlines()[-1:] or r.status})"
    return r.timed_out and not late, "a setsid grandchild outlived the timeout" if late else "killed with the timeout"


def _limits(backend):
    mem = run_python("x = bytearray(4 * 1024 ** 3)", memory_mb=256, backend=backend)
    procs = run_python("import os, time\nn = 0\nfor i in range(200):\n    try:\n        pid = os.fork()\n"
                       "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(2); os._exit(0)\n"
                       "    n += 1\nprint(n)", backend=backend, timeout_s=10)
    n = int(procs.stdout.strip()) if procs.stdout.strip().isdigit() else None
    ok = "MemoryError" in mem.error and n is not None and n < 200
    return ok, f"memory: {mem.error or 'not stopped'}; processes started before the limit: {n if n is not None else procs.error}"


def _harness(backend):
    test = "def check(c):\n    assert c(2, 3) == 5\n"
    good = run_tests("def add(a, b):\n    return a + b\n", test, entry_point="add", backend=backend)
    cheat = run_tests("def add(a, b):\n    return 0\nimport os\nos._exit(0)\n", test, entry_point="add", backend=backend)
    return good.passed and not cheat.passed, f"right: {good.status}; wrong + os._exit(0): {cheat.error[:80]}"


def _shadowing(backend):
    """A wrong answer that writes math.py (called by name from anywhere it is imported) must still fail."""
    shadow = "import sys\nf = sys._getframe()\nwhile f:\n    v = f.f_locals.get('verdict')\n    if callable(v):\n" \
             "        v(True)\n    f = f.f_back\n"
    program = f"open('math.py', 'w').write({shadow!r})\ndef add(a, b):\n    return 0\n"
    r = run_tests(program, "import math\ndef check(c):\n    assert c(2, 3) == 5\n", entry_point="add", backend=backend)
    return not r.passed, f"wrong + shadowed math.py: {r.error[:80] or 'PASSED'}"


def _verdict_process_out_of_reach(backend):
    """The program holds no capability and can't ptrace the harness or read its memory (issue 30)."""
    code = ("import ctypes, ctypes.util, os\n"
            "libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)\n"
            "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
            "caps = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith(('CapEff', 'CapBnd'))]\n"
            "fd = libc.open(b'/proc/%d/mem' % os.getppid(), os.O_RDONLY)\n"
            "print('caps', *caps, 'ptrace', libc.ptrace(0x4206, os.getppid(), None, None), 'mem', fd)\n"
            "def add(a, b):\n    return a + b\n")
    r = run_tests(code, "def check(c):\n    assert c(2, 3) == 5\n", entry_point="add", backend=backend)
    words = r.stdout.split()
    ok = r.passed and words[:7] == ["caps", "0" * 16, "0" * 16, "ptrace", "-1", "mem", "-1"]
    return ok, r.stdout.strip() or r.error


def _disk_quota(backend):
    r = run_python("for i in range(32):\n    open(f'f{i}', 'wb').write(b'x' * (32 * 1024 * 1024))\n", timeout_s=30,
                   backend=backend, disk_mb=64)
    return r.error.startswith("disk quota exceeded"), r.error[:100] or "wrote 1 GB: no quota"


CHECKS: list[tuple[str, Callable]] = [
    ("runs a program", _runs),
    ("host files: not readable, not writable (ctypes too)", _outside_files),
    ("system read-only, work folder writable, not root", _read_only_system),
    ("no secrets in the environment", _environment),
    ("no network (a loopback server on the host)", _network),
    ("own PID namespace", _processes),
    ("a timeout kills every descendant", _timeout_kills_descendants),
    ("memory and process limits", _limits),
    ("pass = check() returned (os._exit(0) cheat fails)", _harness),
    ("a shadowed stdlib module can't forge a pass", _shadowing),
    ("no capabilities; no ptrace or memory reads of the harness", _verdict_process_out_of_reach),
    ("work folder disk quota (1 GB write stops at 64 MB)", _disk_quota),
]


def run_checks(backend: str | None = None) -> list[Check]:
    out = []
    for name, fn in CHECKS:
        try:
            ok, detail = fn(backend)
        except Exception as exc:  # a check that crashes is a failed check, reported
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        out.append(Check(name, bool(ok), str(detail or "")))
    return out
