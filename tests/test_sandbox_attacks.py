"""Attacks on the sandbox under the default backend (issue 12, part 1), each checked from the host.

Where cheap, the same attack is first shown to work against the `process` backend (the old audit-hook
guard), so a check can't pass vacuously. The suite needs an OS-level backend (bwrap or docker); where
neither works it is skipped, saying so.
"""
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from evalpipe.sandbox import make_sandbox, resolve_backend, run_python

DEFAULT = resolve_backend()
pytestmark = pytest.mark.skipif(DEFAULT == "process", reason="no OS-level sandbox here (install bubblewrap)")
REPO = Path(__file__).resolve().parents[1]


def run(code, backend=None, **kw):
    return run_python(textwrap.dedent(code), backend=backend, **kw)


@pytest.fixture
def outside(tmp_path):
    """A host folder outside the sandbox, with a secret file in it."""
    (tmp_path / "secret.txt").write_text("s3cret-outside")
    return tmp_path


# --- writing outside ------------------------------------------------------------------------------------
CTYPES_WRITE = """
import ctypes, ctypes.util, os
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
fd = libc.open({path!r}.encode(), os.O_WRONLY | os.O_CREAT, 0o644)
print("fd", fd)
libc.write(fd, b"pwned", 5)
"""


def test_ctypes_cannot_write_outside(outside):
    target = outside / "ctypes.txt"
    control = run(CTYPES_WRITE.format(path=str(target)), backend="process")
    assert target.exists(), "control: the audit hook alone does not stop ctypes"
    target.unlink()
    r = run(CTYPES_WRITE.format(path=str(target)))
    assert not target.exists() and r.isolation == DEFAULT, r


def test_rename_link_and_sqlite_cannot_reach_outside(outside):
    secret = outside / "secret.txt"
    code = f"""
    import os, sqlite3
    for attempt in (lambda: os.link({str(secret)!r}, "stolen"), lambda: os.rename({str(secret)!r}, "moved"),
                    lambda: os.symlink({str(secret)!r}, "sym")):
        try:
            attempt()
        except OSError as exc:
            print("refused", type(exc).__name__)
    for name in ("stolen", "moved", "sym"):
        try:
            print(open(name).read())
        except OSError:
            pass
    try:
        db = sqlite3.connect({str(outside / "planted.db")!r})
        db.execute("create table t(x)"); db.commit()
    except sqlite3.Error as exc:
        print("sqlite refused", exc)
    """
    r = run(code)
    assert "s3cret" not in r.stdout + r.stderr
    assert secret.read_text() == "s3cret-outside"
    assert not (outside / "planted.db").exists()


def test_posixsubprocess_bash_runs_only_inside(outside):
    marker = outside / "bash-was-here"
    code = f"""
    import _posixsubprocess, os
    r, w = os.pipe()
    er, ew = os.pipe()
    args = [b"/bin/bash", b"-c", b"echo ran-bash; cat {outside}/secret.txt; echo x > {marker}; echo uid=$(id -u)"]
    pid = _posixsubprocess.fork_exec(args, [b"/bin/bash"], True, (ew,), None, None, -1, -1, -1, w, -1, -1,
                                     er, ew, False, False, -1, None, None, None, -1, None, False)
    os.close(w)
    os.waitpid(pid, 0)
    print(os.read(r, 4096).decode())
    """
    r = run(code)
    assert "ran-bash" in r.stdout, r  # it did run bash: inside the sandbox, where it can't see or write outside
    assert "s3cret" not in r.stdout and not marker.exists()
    assert "uid=0" not in r.stdout


def test_cannot_read_outside_files_the_project_home_or_dagster_home(outside, monkeypatch):
    home = os.path.expanduser("~")
    dagster_home = os.environ.get("DAGSTER_HOME") or str(REPO / "dagster_home")
    code = f"""
    import os
    for p in ({str(outside / 'secret.txt')!r}, {str(REPO / 'README.md')!r}, {str(REPO / 'evals.yaml')!r},
              {str(REPO / '.env')!r}, {home + '/.bashrc'!r}, "/etc/shadow", "/etc/hostname"):
        try:
            print("GOT:", p, open(p).read()[:40].replace("\\n", " "))
        except OSError as exc:
            print("no", p, type(exc).__name__)
    for d in ({str(REPO)!r}, {home!r}, {dagster_home!r}, {str(outside)!r}):
        try:
            print("LIST", d, os.listdir(d))
        except OSError as exc:
            print("no", d, type(exc).__name__)
    """
    r = run(code)
    assert r.passed, r
    assert "GOT:" not in r.stdout, r.stdout
    assert (REPO / "README.md").exists()  # the files are there, outside
    listed = [ln for ln in r.stdout.splitlines() if ln.startswith("LIST")]
    for line in listed:  # a folder that exists inside only as an empty parent of the bound venv/Python
        assert "README" not in line and "evals.yaml" not in line and "secret" not in line and ".bashrc" not in line, line


def test_environment_has_no_secrets_and_proc_shows_no_parent(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-planted-secret-123")
    monkeypatch.setenv("EVALPIPE_TEST_TOKEN", "tok-planted-456")
    host_pid = os.getpid()
    code = f"""
    import os, glob
    print(sorted(os.environ.items()))
    print("pids", sorted(int(p.split('/')[2]) for p in glob.glob('/proc/[0-9]*')))
    for p in ["/proc/{host_pid}/environ", "/proc/{host_pid}/cmdline", "/proc/1/environ",
              *glob.glob("/proc/*/environ")]:
        try:
            print(p, open(p, "rb").read())
        except OSError as exc:
            print(p, type(exc).__name__)
    """
    r = run(code)
    assert r.passed, r
    assert "planted" not in r.stdout + r.stderr
    pids = eval(r.stdout.split("pids ", 1)[1].splitlines()[0])
    assert max(pids) < 50, pids  # its own PID namespace: only its own few processes
    assert f"/proc/{host_pid}/environ FileNotFoundError" in r.stdout or host_pid not in pids


# --- processes ------------------------------------------------------------------------------------------
KILL = """
import ctypes, ctypes.util, os
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
for pid in {pids}:
    print(pid, libc.kill(pid, 9), ctypes.get_errno())
"""


def sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_ctypes_kill_of_the_parent_or_any_host_process_fails():
    victim = sleeper()
    try:
        # control: under the audit hook alone, ctypes kills a host process (only the victim here: the
        # parent under that backend is this test run)
        run(KILL.format(pids=[victim.pid]), backend="process")
        assert victim.wait(5) == -signal.SIGKILL, "control: ctypes should get through the audit hook"
        victim = sleeper()
        run(KILL.format(pids=["os.getppid()", victim.pid, os.getpid(), -1]))
        time.sleep(0.3)
        assert victim.poll() is None, "the sandboxed code killed a host process"
    finally:
        victim.kill()
        victim.wait()


def test_setsid_grandchildren_die_with_the_timeout():
    code = """
    import subprocess, time
    subprocess.Popen(["setsid", "bash", "-c", "echo started > started; sleep 2; echo late > late"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    subprocess.Popen(["bash", "-c", "(trap '' HUP TERM; sleep 2; echo late > late2) & disown"])
    while True:
        time.sleep(0.1)
    """
    with make_sandbox() as sb:
        sb.write_file("main.py", textwrap.dedent(code))
        r = sb.exec(sb.python_argv("run", timeout_s=1), timeout_s=1)
        assert r.timed_out
        assert (sb.workdir / "started").exists(), "the grandchild never started: the check would be vacuous"
        time.sleep(3)
        assert not (sb.workdir / "late").exists() and not (sb.workdir / "late2").exists(), \
            "a descendant survived the timeout"


def test_fork_bomb_is_contained():
    start = time.monotonic()
    with make_sandbox() as sb:
        sb.write_file("main.py", textwrap.dedent("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        """))
        r = sb.exec(sb.python_argv("run", timeout_s=3), timeout_s=3)
        uid = getattr(sb, "uid", None)
    assert r.timed_out and time.monotonic() - start < 20
    if uid is not None:  # bwrap run by root: the code ran as its own uid; none of its processes is left
        time.sleep(0.5)
        uids = subprocess.run(["ps", "-eo", "uid="], capture_output=True, text=True).stdout.split()
        assert str(uid) not in uids


def test_memory_bombs_are_stopped():
    r = run("x = bytearray(8 * 1024 ** 3)\n", memory_mb=512)
    assert not r.passed and "MemoryError" in r.error
    r = run("""
    chunks = []
    while True:
        chunks.append(b"x" * 50_000_000)
    """, memory_mb=512, timeout_s=20)
    assert not r.passed and "MemoryError" in r.error, r


def test_no_network_even_to_a_loopback_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    accepted = []

    def accept():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                accepted.append(srv.accept())
            except OSError:
                pass

    t = threading.Thread(target=accept)
    t.start()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # control: the server is reachable
        r = run(f"""
        import socket
        s = socket.create_connection(("127.0.0.1", {port}), timeout=3)
        print("connected")
        """)
        t.join()
        assert len(accepted) == 1, "only the control connection reached the server"
        assert not r.passed and "connected" not in r.stdout
        assert "refused" in r.error.lower() or "unreachable" in r.error.lower(), r.error
    finally:
        for conn, _ in accepted:
            conn.close()
        srv.close()


def test_the_system_is_read_only_and_the_work_folder_is_the_only_writable_place():
    r = run("""
    import os
    for p in ("/usr/x", "/etc/x", "/bin/x", "/opt/evalpipe/x", "/x", "/proc/sys/kernel/hostname"):
        try:
            open(p, "w").write("x")
            print("WROTE", p)
        except OSError as exc:
            print("no", p, exc.errno)
    import subprocess
    print(subprocess.run(["mount", "-o", "remount,rw,bind", "/usr"], capture_output=True).returncode)
    open("ok.txt", "w").write("fine")
    print("uid", os.getuid())
    """)
    assert r.passed, r
    assert "WROTE" not in r.stdout
    assert "uid 0" not in r.stdout
