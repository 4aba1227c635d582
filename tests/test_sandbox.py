"""The code sandbox refuses the network and files outside its directory, and enforces time and memory limits."""
import socket

import pytest

from evalpipe.sandbox import namespaces_available, run_python


@pytest.fixture
def listener():
    """A loopback TCP listener in this (test) process: reachable from anything that has the network."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    yield srv.getsockname()[1]
    srv.close()


def connect_code(port):
    return f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=3)\nprint('connected')\n"


def test_control_the_listener_is_reachable_without_the_sandbox_limits(listener):
    r = run_python(connect_code(listener), network=True)
    assert r.passed and "connected" in r.stdout and r.isolation == "none"


@pytest.mark.skipif(not namespaces_available(), reason="unprivileged user namespaces are not available here")
def test_network_namespace_alone_refuses_a_loopback_connect(listener):
    r = run_python(connect_code(listener), use_namespace=True, audit_network=False)
    assert not r.passed and r.isolation == "namespace"
    assert "connected" not in r.stdout and ("unreachable" in r.error or "refused" in r.error), r.error


def test_audit_hook_alone_refuses_a_loopback_connect(listener):
    r = run_python(connect_code(listener), use_namespace=False)
    assert not r.passed and r.isolation == "audit"
    assert "network access refused" in r.error and "connected" not in r.stdout


def test_default_refuses_the_network(listener):
    r = run_python(connect_code(listener))
    assert not r.passed and "connected" not in r.stdout


def test_files_outside_the_sandbox_cannot_be_read_or_written(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret")
    for code in (f"print(open({str(secret)!r}).read())",
                 f"import os; fd = os.open({str(secret)!r}, os.O_RDONLY); print(os.read(fd, 100))",
                 f"import pathlib; print(pathlib.Path({str(secret)!r}).read_text())",
                 f"import os; print(os.listdir({str(tmp_path)!r}))",
                 f"open({str(tmp_path / 'planted.txt')!r}, 'w').write('x')",
                 f"import subprocess; print(subprocess.run(['cat', {str(secret)!r}], capture_output=True).stdout)",
                 f"import os; os.system('cat {secret}')",
                 "import os; print(open(os.path.expanduser('~/../../etc/passwd')).read())"):
        r = run_python(code)
        assert not r.passed, code
        assert "s3cret" not in r.stdout and "root:" not in r.stdout
        assert "refused" in r.error, (code, r.error)
    assert not (tmp_path / "planted.txt").exists()


def test_its_own_directory_the_stdlib_and_packages_work():
    code = ("import os, json, tempfile, numpy\n"
            "open('out.txt', 'w').write('hi')\n"
            "with tempfile.NamedTemporaryFile('w', delete=False) as f: f.write('x')\n"
            "assert os.path.dirname(f.name) == os.getcwd() == os.environ['HOME']\n"
            "print(open('out.txt').read(), sorted(os.listdir('.')) != [])\n")
    r = run_python(code)
    assert r.passed, r.stderr
    assert r.stdout.startswith("hi True")


def test_time_and_memory_limits_and_errors_are_reported():
    r = run_python("while True:\n    pass\n", timeout_s=1)
    assert not r.passed and r.status == "timeout" and "timed out" in r.error and r.duration_s < 5
    r = run_python("x = bytearray(2 * 1024 ** 3)\n", memory_mb=256)
    assert not r.passed and r.error == "MemoryError"
    r = run_python("assert 1 + 1 == 3, 'bad maths'\n")
    assert r.status == "failed" and r.error == "AssertionError: bad maths"
    r = run_python("def f(:\n")
    assert r.error.startswith("SyntaxError")


def test_each_run_gets_a_fresh_directory():
    first = run_python("import os; open('mark', 'w').write('1'); print(os.getcwd())")
    second = run_python("import os; print(os.path.exists('mark'), os.getcwd())")
    assert first.passed and second.passed and second.stdout.startswith("False")
    assert first.stdout.strip() != second.stdout.split()[1]
