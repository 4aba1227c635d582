"""Issue 20 item 10 (the sandbox half): a disk quota for the work folder, and folders left by an evaluator killed
with kill -9 swept at the next start (a live evaluator's folder kept)."""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.sandbox import backend_status, make_sandbox, run_python, run_tests, sweep_stale
from evalpipe.sandbox.base import OWNER_LOCK, Limits
from evalpipe.sandbox.bwrap import WORKDIR, build_bwrap_argv
from evalpipe.sandbox.docker import build_docker_argv

OS_LEVEL = [b for b in ("bwrap", "docker") if backend_status()[b] is None]
needs_os_level = pytest.mark.skipif(not OS_LEVEL, reason="no OS-level sandbox here (install bubblewrap)")
WRITE_1GB = "for i in range(32):\n    open(f'f{i}', 'wb').write(b'x' * (32 * 1024 * 1024))\n"  # 32 MB files


# --- the quota ---------------------------------------------------------------------------------------------
@needs_os_level
def test_writing_1gb_fails_fast_with_the_quota_as_the_reason():
    start = time.monotonic()
    r = run_python(WRITE_1GB, timeout_s=30, backend=OS_LEVEL[0])
    took = time.monotonic() - start
    assert not r.passed and r.status == "failed"
    assert r.error.startswith("disk quota exceeded (256 MB): OSError: [Errno 28]"), r.error
    assert took < 15, took  # stops at 256 MB, not after the time limit


@needs_os_level
def test_the_quota_reason_reaches_the_verdict_of_run_tests_and_code_execution():
    tests = "def check(c):\n    assert c() == 1\n"
    r = run_tests("def f():\n    return 1\n" + WRITE_1GB, tests, entry_point="f", timeout_s=30, backend=OS_LEVEL[0])
    assert not r.passed and r.error.startswith("disk quota exceeded (256 MB)") and "raised in the program" in r.error
    m = build_metric({"name": "code_execution", "disk_mb": 64, "sandbox": OS_LEVEL[0]})
    code = "def f():\n    open('a', 'wb').write(b'x' * (40 * 1024 * 1024))\n    open('b', 'wb').write(b'x' * (40 * 1024 * 1024))\n    return 1\n"
    s = asyncio.run(m.ascore_many([JudgeInput("s", "q", None, code, metadata={"test": tests, "entry_point": "f"})]))[0]
    assert not s.correct and s.reason.startswith("disk quota exceeded (64 MB)"), s.reason
    assert m.identity()["disk_mb"] == 64 and "disk_mb" not in build_metric("code_execution").identity()


@needs_os_level
def test_the_quota_is_configurable_and_covers_tmp_but_leaves_normal_work_alone(tmp_path):
    data = tmp_path / "data.csv"
    data.write_bytes(b"a\n" + b"1\n" * (30 * 1024 * 1024 // 2))  # 30 MB, bound read-only: not counted
    ok = run_python("import os\nopen('out', 'wb').write(b'x' * (20 * 1024 * 1024))\n"
                    "print(os.path.getsize('data.csv') > 0, open('main.py').read()[:6])", files=[data], disk_mb=32,
                    backend=OS_LEVEL[0])
    assert ok.passed and ok.stdout.split() == ["True", "import"], ok.error
    over = run_python("open('out', 'wb').write(b'x' * (40 * 1024 * 1024))", disk_mb=32, backend=OS_LEVEL[0])
    assert over.error.startswith("disk quota exceeded (32 MB)"), over.error
    tmp = run_python("open('/tmp/out', 'wb').write(b'x' * (40 * 1024 * 1024))", disk_mb=32, backend=OS_LEVEL[0])
    assert tmp.error.startswith("disk quota exceeded (32 MB)"), tmp.error
    none = run_python(WRITE_1GB.replace("range(32)", "range(10)"), disk_mb=0, timeout_s=30, backend=OS_LEVEL[0])
    assert none.passed, none.error  # 0: no quota (320 MB written)


def test_the_config_key_sets_the_default_quota(write_config):
    from evalpipe.sandbox import default_disk_mb

    from evalpipe.project import load_config

    assert default_disk_mb() == 256
    assert default_disk_mb(48) == 48  # the caller hands the config's `sandbox_disk_mb` in
    write_config("sandbox_disk_mb: 48\nbenchmarks: {}\nmodels: {m: {runner: echo}}\n")
    assert default_disk_mb() == 256  # the sandbox reads no config itself
    assert build_metric("code_execution", config=load_config()).disk_mb == 48  # as the metrics stage does
    assert build_metric("code_execution").disk_mb == 256
    with pytest.raises(ConfigError, match="disk_mb must be a whole number"):
        build_metric({"name": "code_execution", "disk_mb": -1})
    with pytest.raises(ConfigError, match="disk_mb must be >= 0"):
        Limits(disk_mb=-5)


def test_the_config_schema_accepts_the_key_and_refuses_a_negative_one(tmp_path):
    from evalpipe.project.schema import validate_file

    good = tmp_path / "good.yaml"
    good.write_text("sandbox_disk_mb: 512\nbenchmarks: {}\nmodels: {m: {runner: echo}}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sandbox_disk_mb: -1\nbenchmarks: {}\nmodels: {m: {runner: echo}}\n")
    assert validate_file(good)["sandbox_disk_mb"] == 512
    with pytest.raises(ConfigError, match="sandbox_disk_mb"):
        validate_file(bad)


def test_the_process_backend_bounds_each_file_and_says_so():
    r = run_python("open('big', 'wb').write(b'x' * (80 * 1024 * 1024))", backend="process")
    assert r.error == "file size limit exceeded (64 MB per file): OSError: [Errno 27] File too large", r.error


def test_bwrap_argv_with_a_quota_makes_the_work_folder_a_sized_tmpfs_with_the_files_bound_read_only():
    a = build_bwrap_argv(["python3"], workdir="/host/w", env={}, ro_paths=["/usr"], read_only_files=["d.csv"],
                         workdir_tmpfs_mb=100, staged_files=["main.py", "d.csv", "sub/x.txt"])
    at = [i for i, x in enumerate(a) if x == "--tmpfs" and a[i + 1] == WORKDIR][0]
    assert a[at - 4:at] == ["--perms", "1777", "--size", str(100 * 1024 * 1024)]
    binds = [tuple(a[i + 1:i + 3]) for i, x in enumerate(a) if x == "--ro-bind" and i > at]
    assert binds == [("/host/w/main.py", f"{WORKDIR}/main.py"), ("/host/w/d.csv", f"{WORKDIR}/d.csv"),
                     ("/host/w/sub/x.txt", f"{WORKDIR}/sub/x.txt")]
    assert "--bind" not in a  # nothing of the host writable
    with pytest.raises(ValueError):
        build_bwrap_argv(["x"], workdir="/w", env={}, workdir_tmpfs_mb=1, staged_files=["../etc/passwd"])


def test_docker_argv_with_a_quota_uses_a_sized_tmpfs():
    a = build_docker_argv(["python"], name="n", workdir="/w", env={}, image="img", memory_mb=512, processes=32,
                          tmp_mb=64, read_only_files=["d.csv"], workdir_tmpfs_mb=100, staged_files=["main.py", "d.csv"])
    s = " ".join(a)
    assert "--tmpfs /sandbox:rw,nosuid,nodev,size=100m,mode=1777" in s
    assert "-v /w/main.py:/sandbox/main.py:ro" in s and "-v /w/d.csv:/sandbox/d.csv:ro" in s
    assert "/w:/sandbox:rw" not in s


def test_sessions_keep_a_shared_host_folder():
    with make_sandbox("process") as sb:
        assert not sb.ephemeral and not sb.quota_enforced
    if "bwrap" in OS_LEVEL:
        with make_sandbox("bwrap", ephemeral=True) as sb:
            assert sb.quota_enforced
        with make_sandbox("bwrap") as sb:
            assert not sb.quota_enforced


# --- the sweep ---------------------------------------------------------------------------------------------
HOLDER = textwrap.dedent("""
    import sys, time
    from evalpipe.sandbox import make_sandbox
    sb = make_sandbox(sys.argv[1])
    (sb.workdir / "data").write_text("x")
    print(sb._outer, flush=True)
    time.sleep(120)
""")


def _holder(tmp_path, backend="process"):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, backend], stdout=subprocess.PIPE, text=True, env=env,
                            cwd=str(Path(__file__).resolve().parents[1]))
    return proc, Path(proc.stdout.readline().strip())


def test_folders_of_an_evaluator_killed_with_kill_9_are_swept_at_the_next_start_and_live_ones_kept(tmp_path):
    dead_proc, dead = _holder(tmp_path)
    live_proc, live = _holder(tmp_path)
    try:
        assert dead.is_dir() and live.is_dir() and (dead / OWNER_LOCK).exists()
        assert dead.name.startswith(f"evalpipe-sandbox-{dead_proc.pid}-")
        os.kill(dead_proc.pid, signal.SIGKILL)
        dead_proc.wait()
        assert dead.is_dir()  # kill -9 left it
        foreign = tmp_path / "evalpipe-sandbox-notours"  # no pid, no lock: not ours to judge
        foreign.mkdir()
        # the next start: a fresh process opening its first sandbox
        env = {**os.environ, "TMPDIR": str(tmp_path)}
        subprocess.run([sys.executable, "-c", "from evalpipe.sandbox import run_python; run_python('pass', backend='process')"],
                       env=env, check=True, cwd=str(Path(__file__).resolve().parents[1]), capture_output=True)
        assert not dead.exists(), "the dead evaluator's folder was not swept"
        assert live.is_dir() and (live / "work" / "data").read_text() == "x", "a live evaluator's folder was touched"
        assert foreign.is_dir()
    finally:
        live_proc.kill()
        live_proc.wait()
    assert sweep_stale(tmp_path) == [live]  # dead now too


def test_the_sweep_keeps_this_processs_own_folders_and_a_lockless_folder_of_a_live_pid(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with make_sandbox("process") as sb:
        assert sweep_stale(tmp_path) == [] and sb.workdir.is_dir()  # flock: a second lock in one process fails too
    assert not sb._outer.exists()  # closed: removed, nothing left to sweep
    young = tmp_path / f"evalpipe-sandbox-{os.getpid()}-abc"  # created a moment ago, lock not yet taken
    young.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    old = tmp_path / f"evalpipe-sandbox-{gone.pid}-abc"
    old.mkdir()
    assert sweep_stale(tmp_path) == [old] and young.is_dir()
