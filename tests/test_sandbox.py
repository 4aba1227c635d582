"""The sandbox's entry points, backends and limits (attacks: test_sandbox_attacks.py; sessions:
test_sandbox_session.py)."""
import logging
import os
import shutil

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.sandbox import (SandboxUnavailable, backend_status, list_sandboxes, make_sandbox, namespaces_available,
                              resolve_backend, run_python, run_tests)
from evalpipe.sandbox.bwrap import WORKDIR, build_bwrap_argv, host_layout
from evalpipe.sandbox.docker import build_docker_argv

DEFAULT = resolve_backend()
BWRAP = backend_status()["bwrap"] is None
needs_bwrap = pytest.mark.skipif(not BWRAP, reason=f"bwrap unusable here: {backend_status()['bwrap']}")


# --- the bwrap command line (pure) -------------------------------------------------------------------------
def argv(**kw):
    args = dict(workdir="/host/tmp/w", env={"PATH": "/usr/bin", "HOME": WORKDIR},
                ro_paths=["/usr", "/root/.pyenv/versions/3.11.7", "/proj/.venv"], symlinks=[("usr/bin", "/bin")])
    args.update(kw)
    return build_bwrap_argv(["python3", "-c", "pass"], **args)


def pairs(a, flag):
    return [tuple(a[i + 1:i + 3]) for i, x in enumerate(a) if x == flag]


def test_a_python_under_tmp_is_bound_over_the_sandboxs_own_tmp():
    # a CI checkout in /tmp: the fresh /tmp must come first, or it hides the venv bound inside it
    a = build_bwrap_argv(["python3"], workdir="/host/tmp/w", env={}, ro_paths=["/usr", "/tmp/ci/.venv"])
    tmp_at = [i for i, x in enumerate(a) if x == "--tmpfs" and a[i + 1] == "/tmp"][0]
    venv_at = [i for i, x in enumerate(a) if x == "--ro-bind" and a[i + 1] == "/tmp/ci/.venv"][0]
    assert tmp_at < venv_at
    assert "/tmp" not in [a[i + 1] for i, x in enumerate(a) if x == "--dir"]


def test_bwrap_argv_isolates_everything_for_a_normal_user():
    a = argv()
    assert a[0] == "bwrap" and "--unshare-all" in a and "--die-with-parent" in a and "--new-session" in a
    assert "--clearenv" in a and a.index("--clearenv") < a.index("--setenv")
    assert "--cap-add" not in a and "--bind-try" not in a and "--dev-bind" not in a
    # writable: only the work folder; everything else read-only at the same place
    assert pairs(a, "--bind") == [("/host/tmp/w", WORKDIR)]
    assert set(pairs(a, "--ro-bind")) == {("/usr", "/usr"), ("/root/.pyenv/versions/3.11.7", "/root/.pyenv/versions/3.11.7"),
                                          ("/proj/.venv", "/proj/.venv")}
    # the folders above a bound Python are empty, not the user's home or the project
    assert ("0755", "--dir") in [tuple(a[i + 1:i + 3]) for i, x in enumerate(a) if x == "--perms"]
    dirs = [a[i + 1] for i, x in enumerate(a) if x == "--dir"]
    assert dirs == ["/root", "/root/.pyenv", "/root/.pyenv/versions", "/proj"]
    tmpfs = [a[i + 1] for i, x in enumerate(a) if x == "--tmpfs"]
    assert tmpfs == ["/tmp", "/dev/shm"]
    assert [a[i + 1] for i, x in enumerate(a) if x == "--size"] == [str(256 * 1024 * 1024), str(64 * 1024 * 1024)]
    assert ["--dev", "/dev", "--proc", "/proc"] == a[a.index("--dev"):a.index("--dev") + 4]
    assert pairs(a, "--setenv") == [("PATH", "/usr/bin"), ("HOME", WORKDIR)]
    assert a[a.index("--chdir") + 1] == WORKDIR
    assert a[a.index("--"):] == ["--", "python3", "-c", "pass"]


def test_bwrap_argv_for_root_keeps_no_user_namespace_and_only_setuid_capabilities():
    a = argv(as_root=True)
    assert "--unshare-all" not in a and "--unshare-user" not in a
    for flag in ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--die-with-parent", "--new-session"):
        assert flag in a
    assert a[a.index("--cap-drop") + 1] == "ALL"
    assert {a[i + 1] for i, x in enumerate(a) if x == "--cap-add"} == {"CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"}


def test_bwrap_argv_read_only_files_and_bad_names():
    a = argv(read_only_files=["data.csv"], tmp_mb=None)
    assert ("/host/tmp/w/data.csv", f"{WORKDIR}/data.csv") in pairs(a, "--ro-bind")
    assert pairs(a, "--ro-bind").index(("/host/tmp/w/data.csv", f"{WORKDIR}/data.csv")) > 0
    assert a.index("--bind") < a.index(f"{WORKDIR}/data.csv")  # after the work folder, so it covers its file
    assert "--size" not in a
    with pytest.raises(ValueError):
        argv(read_only_files=["../etc/passwd"])


def test_host_layout_binds_no_project_home_or_dagster_home():
    ro, links = host_layout()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in ro:
        assert path not in ("/", "/home", "/root", "/etc", "/tmp", "/work", repo), path
        assert not (path + "/").startswith(repo + "/") or path.startswith(os.path.join(repo, ".venv")), path
        if os.environ.get("DAGSTER_HOME"):
            assert not path.startswith(os.environ["DAGSTER_HOME"])
        assert ".env" not in os.path.basename(path).split(".venv")[0]


def test_docker_argv_has_no_network_no_capabilities_and_limits():
    a = build_docker_argv(["python", "-c", "pass"], name="n", workdir="/w", env={"A": "1"}, image="img",
                          memory_mb=512, processes=32, tmp_mb=64, read_only_files=["d.csv"])
    s = " ".join(a)
    for part in ("--network none", "--read-only", "--cap-drop ALL", "--security-opt no-new-privileges",
                 "--memory 512m", "--memory-swap 512m", "--pids-limit 32", "-v /w:/sandbox:rw",
                 "-v /w/d.csv:/sandbox/d.csv:ro", "--label evalpipe.sandbox=1", "--user 65534:65534"):
        assert part in s, part
    assert a[-4:] == ["img", "python", "-c", "pass"]


# --- choosing a backend ----------------------------------------------------------------------------------
def test_backends_are_registered_and_auto_picks_the_strongest_usable(monkeypatch):
    assert {"bwrap", "docker", "process"} <= set(list_sandboxes())
    monkeypatch.delenv("EVALS_SANDBOX", raising=False)
    status = backend_status()
    expected = "bwrap" if status["bwrap"] is None else "docker" if status["docker"] is None else "process"
    assert resolve_backend("auto") == expected
    monkeypatch.setenv("EVALS_SANDBOX", "process")
    assert resolve_backend() == "process"
    assert resolve_backend("auto") == expected  # an explicit choice wins over the environment


def test_unknown_or_unusable_backends_fail_with_how_to_fix(monkeypatch):
    with pytest.raises(ConfigError, match="unknown sandbox backend 'jail'.*auto, bwrap, docker, process"):
        resolve_backend("jail")
    if backend_status()["docker"] is not None:
        with pytest.raises(SandboxUnavailable, match="'docker' cannot run here"):
            resolve_backend("docker")


def no_os_level_backend(monkeypatch):
    """This machine as one without bubblewrap or Docker."""
    from evalpipe.sandbox import get_sandbox

    monkeypatch.setattr(get_sandbox("bwrap"), "probe", classmethod(lambda cls: "bwrap is not installed"))
    monkeypatch.setattr(get_sandbox("docker"), "probe", classmethod(lambda cls: "docker is not installed"))
    monkeypatch.delenv("EVALS_SANDBOX", raising=False)


def test_auto_never_falls_back_to_process_it_says_what_process_gives_up_and_how_to_install_bubblewrap(monkeypatch):
    from evalpipe.metrics import build_metric

    no_os_level_backend(monkeypatch)
    for call in (lambda: resolve_backend(), lambda: resolve_backend("auto"), lambda: resolve_backend(configured="auto"),
                 lambda: build_metric({"name": "code_execution"}), lambda: build_metric({"name": "code_execution",
                                                                                          "sandbox": "auto"})):
        with pytest.raises(SandboxUnavailable) as info:
            call()
        message = str(info.value)
        assert "\n" not in message, message
        for part in ("apt-get install bubblewrap", "sandbox: process", "bwrap is not installed", "ptrace"):
            assert part in message, (part, message)
    # named explicitly, it runs (and still warns that it is not a boundary)
    assert resolve_backend("process") == "process"
    assert resolve_backend(configured="process") == "process"
    assert build_metric({"name": "code_execution", "sandbox": "process"}).backend == "process"
    monkeypatch.setenv("EVALS_SANDBOX", "process")
    assert resolve_backend() == "process"


def test_the_config_key_chooses_the_backend(tmp_path, monkeypatch):
    from evalpipe.metrics import build_metric
    from evalpipe.project import load_config

    cfg = tmp_path / "evals.yaml"
    cfg.write_text("sandbox: process\nbenchmarks: {}\nmodels: {m: {runner: echo}}\n")
    monkeypatch.setenv("EVALS_CONFIG", str(cfg))
    monkeypatch.delenv("EVALS_SANDBOX", raising=False)
    assert resolve_backend(configured="process") == "process"  # the caller hands the config's `sandbox:` in
    assert build_metric("code_execution", config=load_config(cfg)).backend == "process"  # as the metrics stage does
    assert run_python("print(1)", backend=resolve_backend(configured="process")).isolation == "process"
    monkeypatch.setenv("EVALS_SANDBOX", "auto")
    assert resolve_backend(configured="process") == DEFAULT  # the env var wins over the config


def test_process_backend_warns_that_it_is_not_a_boundary(caplog):
    import evalpipe.sandbox.process as proc

    proc._warned = False
    with caplog.at_level(logging.WARNING, logger="evalpipe.sandbox"):
        r = run_python("print('hi')", backend="process")
    assert r.passed and r.isolation == "process"
    assert any("NOT a security boundary" in rec.getMessage() for rec in caplog.records)


# --- run_python and run_tests under the default backend ---------------------------------------------------
def test_default_backend_runs_programs_and_reports_what_ran():
    r = run_python("import sys; print('hi', sys.version_info[:2])")
    assert r.passed and r.status == "passed" and r.stdout.startswith("hi (3, 11)")
    assert r.isolation == DEFAULT


def test_multiprocessing_works_inside():
    r = run_python("import multiprocessing as mp\nwith mp.Pool(2) as p:\n    print(p.map(abs, [-1, -2]))", timeout_s=60)
    if DEFAULT == "process":
        pytest.skip("the process backend refuses new processes")
    assert r.passed and r.stdout.strip() == "[1, 2]", r.error


def test_its_own_folder_tmp_numpy_and_pandas_work():
    code = ("import os, tempfile, numpy, pandas\n"
            "open('out.txt', 'w').write('hi')\n"
            "with tempfile.NamedTemporaryFile('w', delete=False) as f: f.write('x')\n"
            "print(open('out.txt').read(), os.getcwd() == os.environ['HOME'], pandas.DataFrame({'a': [1, 2]}).a.sum())\n")
    r = run_python(code, timeout_s=60)
    assert r.passed, r.stderr
    assert r.stdout.split() == ["hi", "True", "3"]


def test_time_memory_and_error_reporting():
    r = run_python("while True:\n    pass\n", timeout_s=1)
    assert not r.passed and r.status == "timeout" and "timed out" in r.error and r.duration_s < 5
    r = run_python("x = bytearray(2 * 1024 ** 3)\n", memory_mb=256)
    assert not r.passed and r.error == "MemoryError"
    r = run_python("assert 1 + 1 == 3, 'bad maths'\n")
    assert r.status == "failed" and r.error == "AssertionError: bad maths"
    r = run_python("def f(:\n")
    assert r.error.startswith("SyntaxError")


def test_file_size_limit():
    r = run_python("open('big', 'wb').write(b'x' * (80 * 1024 * 1024))\n", timeout_s=20)
    assert not r.passed and ("file size limit" in r.error or "File too large" in r.error), r.error


def test_each_run_gets_a_fresh_folder_and_it_is_removed():
    first = run_python("import os; open('mark', 'w').write('1'); print(os.path.exists('mark'))")
    second = run_python("import os; print(os.path.exists('mark'))")
    assert first.stdout.strip() == "True" and second.stdout.strip() == "False"
    with make_sandbox() as sb:
        folder = sb.workdir
        assert folder.is_dir()
    assert not folder.exists()


def test_files_are_copied_in_read_only(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    r = run_python("print(open('data.csv').read().split()[1])", files=[data])
    assert r.passed and r.stdout.strip() == "1,2"
    for attempt in ("open('data.csv', 'w').write('x')", "import os; os.remove('data.csv')",
                    "import os; os.chmod('data.csv', 0o666); open('data.csv', 'w').write('x')"):
        r = run_python(attempt + "\nprint('changed')", files=[data])
        assert not r.passed and "changed" not in r.stdout, (attempt, r)
    assert data.read_text() == "a,b\n1,2\n"
    with pytest.raises(ConfigError, match="does not exist"):
        run_python("pass", files=[tmp_path / "missing.csv"])


def test_output_is_capped():
    r = run_python("import sys\nprint('x' * 5_000_000)\nsys.stderr.write('e' * 5_000_000 + 'END')", max_output=1000)
    assert r.passed and len(r.stdout) == 1000 and r.stderr.endswith("END") and len(r.stderr) <= 1000


def test_run_tests_passes_only_when_check_returns():
    ok = run_tests("def f(x):\n    return x + 1\n", "def check(c):\n    assert c(1) == 2\n", entry_point="f")
    assert ok.passed and ok.error == "", ok
    bad = run_tests("def f(x):\n    return x\n", "def check(c):\n    assert c(1) == 2, 'off by one'\n", entry_point="f")
    assert not bad.passed and bad.error == "AssertionError: off by one (raised in check(f))"
    missing = run_tests("def g(x):\n    return x\n", "def check(c):\n    pass\n", entry_point="f")
    assert not missing.passed and "'f' is not defined" in missing.error
    plain = run_tests("x = 1\nprint(x)\n")  # no tests: runs to its end
    assert plain.passed and plain.stdout == "1\n"
    crash = run_tests("raise ValueError('nope')\n")
    assert not crash.passed and crash.error == "ValueError: nope (raised in the program)"


@pytest.mark.skipif(not namespaces_available(), reason="unprivileged user namespaces are not available here")
def test_process_backend_still_refuses_the_network_and_outside_files(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    r = run_python(f"print(open({str(secret)!r}).read())", backend="process")
    assert not r.passed and "refused" in r.error and "s3cret" not in r.stdout
    r = run_python("import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)", backend="process")
    assert not r.passed


def test_in_ci_the_os_level_sandbox_really_works():
    # .ci/run installs bubblewrap: there the attack suite must run, not skip because bwrap broke
    if not os.environ.get("CI"):
        pytest.skip("enforced in CI only (CI=true), where .ci/run installs bubblewrap")
    assert backend_status()["bwrap"] is None


@needs_bwrap
def test_bwrap_is_the_default_when_it_works():
    assert DEFAULT == "bwrap" or os.environ.get("EVALS_SANDBOX")
    assert shutil.which("bwrap")


# --- the CLI -------------------------------------------------------------------------------------------
def test_cli_sandbox_check_prints_the_isolation_and_passes_under_the_default(monkeypatch):
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    monkeypatch.delenv("EVALS_SANDBOX", raising=False)
    r = CliRunner().invoke(main, ["sandbox", "check", "--backend", DEFAULT])
    assert f"isolation in effect: {DEFAULT}" in r.output
    if DEFAULT != "process":
        assert r.exit_code == 0 and "12/12 checks passed" in r.output, r.output
    r = CliRunner().invoke(main, ["sandbox", "check", "--backend", "process"])
    assert "NOT a security boundary" in r.output and "[FAIL]" in r.output and r.exit_code == 1
    if backend_status()["docker"] is not None:
        r = CliRunner().invoke(main, ["sandbox", "check", "--backend", "docker"])
        assert r.exit_code == 2 and "cannot run here" in r.output


def test_cli_sandbox_cleanup_removes_stale_folders(tmp_path, monkeypatch):
    import tempfile

    from click.testing import CliRunner

    from evalpipe.cli.main import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale, fresh = tmp_path / "evalpipe-sandbox-old", tmp_path / "evalpipe-sandbox-new"
    stale.mkdir()
    fresh.mkdir()
    os.utime(stale, (0, 0))
    with make_sandbox("process") as live:  # an old folder of a live evaluator: never removed, whatever its age
        os.utime(live._outer, (0, 0))
        r = CliRunner().invoke(main, ["sandbox", "cleanup", "--older-than", "60"])
        assert live.workdir.is_dir()
    assert r.exit_code == 0 and "removed 1 sandbox folder" in r.output
    assert not stale.exists() and fresh.exists()


# --- one contract for every backend (skipped, with the reason, where a backend can't run) -------------------
@pytest.mark.parametrize("backend", ["bwrap", "docker", "process"])
def test_every_backend_keeps_the_contract(backend):
    why = backend_status()[backend]
    if why:
        pytest.skip(f"{backend}: {why}")
    r = run_python("import sys; print(sys.argv[0].endswith('main.py'))", backend=backend)
    assert r.passed and r.stdout.strip() == "True" and r.isolation == backend
    assert run_python("raise SystemExit(3)", backend=backend).returncode == 3
    t = run_python("while True: pass", timeout_s=1, backend=backend)
    assert t.status == "timeout"
    test = "def check(c):\n    assert c(2) == 4\n"
    assert run_tests("def f(x):\n    return x * 2\n", test, entry_point="f", backend=backend).passed
    bad = run_tests("def f(x):\n    return x\nimport os\nos._exit(0)\n", test, entry_point="f", backend=backend)
    assert not bad.passed and "exit status 0" in bad.error
    from evalpipe.sandbox import open_session

    with open_session(backend=backend) as s:
        s.run("v = 20")
        assert s.run("v + 1")["value"] == "21" and s.isolation == backend
