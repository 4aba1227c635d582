"""`open_session`: a stateful sandboxed interpreter for one sample (the python/bash tools build on it)."""
import time

import pytest

from evalpipe.sandbox import open_session, resolve_backend

DEFAULT = resolve_backend()
os_level = pytest.mark.skipif(DEFAULT == "process", reason="no OS-level sandbox here (install bubblewrap)")


@pytest.fixture
def session(tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n3,4\n")
    with open_session(files=[data], timeout_s=20) as s:
        yield s


def test_state_is_kept_and_the_last_expression_is_returned(session):
    r = session.run("x = 41\ny = [1, 2]\nx + 1")
    assert r == {"stdout": "", "stderr": "", "value": "42", "error": None, "timed_out": False}
    r = session.run("def f(v):\n    return v * 2\nprint('hi')\nf(x)")
    assert r["stdout"] == "hi\n" and r["value"] == "82"
    assert session.run("y.append(3); y")["value"] == "[1, 2, 3]"
    assert session.run("z = 1")["value"] is None  # no expression last: no value
    assert session.isolation == DEFAULT and session.workdir.is_dir()


def test_errors_come_back_and_the_session_goes_on(session):
    r = session.run("1 / 0")
    assert r["error"] == "ZeroDivisionError: division by zero" and "Traceback" in r["stderr"]
    assert "_inner.py" not in r["stderr"]
    r = session.run("raise SystemExit(3)")
    assert r["error"] == "SystemExit(3)"
    r = session.run("def broken(:")
    assert r["error"].startswith("SyntaxError")
    assert session.run("2 + 2")["value"] == "4"


def test_pandas_and_the_read_only_files(session):
    r = session.run("import pandas as pd\ndf = pd.read_csv('data.csv')\nint(df.a.sum())")
    assert r["value"] == "4", r
    r = session.run("open('data.csv', 'w').write('x')")
    assert r["error"] and ("Read-only" in r["error"] or "read-only" in r["error"] or "Permission" in r["error"]), r
    assert session.run("open('data.csv').read()")["value"] == repr("a,b\n1,2\n3,4\n")
    r = session.run("open('new.txt', 'w').write('made'); import os; sorted(os.listdir('.'))")
    assert r["value"] == "['data.csv', 'new.txt']"
    assert (session.workdir / "new.txt").read_text() == "made"  # visible to the host


def test_output_and_value_are_capped(session):
    r = session.run("print('x' * 100_000)\n'y' * 100_000")
    assert len(r["stdout"]) < 17_000 and "output truncated" in r["stdout"]
    assert len(r["value"]) < 5_000 and "repr truncated" in r["value"]


@os_level
def test_subprocess_output_is_captured_too(session):
    r = session.run("import subprocess, os\nos.system('echo from-shell; echo err >&2')\nprint('py')")
    assert r["stdout"] == "from-shell\npy\n" and r["stderr"] == "err\n"


def test_a_timeout_kills_the_session_and_the_next_call_says_so(session):
    session.run("keep = 'me'")
    start = time.monotonic()
    r = session.run("import time\nwhile True:\n    time.sleep(0.01)", timeout_s=1)
    assert r["timed_out"] and "timed out after 1s" in r["error"] and time.monotonic() - start < 8
    r = session.run("'keep' in globals()")
    assert r["value"] == "False" and r.get("restarted") and "restarted" in r["stderr"]
    assert session.run("1 + 1") == {"stdout": "", "stderr": "", "value": "2", "error": None, "timed_out": False}


def test_an_interpreter_that_exits_is_replaced(session):
    r = session.run("import os; os._exit(3)")
    assert "ended" in r["error"] and not r["timed_out"]
    r = session.run("40 + 2")
    assert r["value"] == "42" and r.get("restarted")


@os_level
def test_bash_runs_in_the_same_folder(session):
    session.run("open('from_python.txt', 'w').write('py')")
    r = session.bash("cat from_python.txt; echo; echo made > from_bash.txt; pwd; exit 3")
    assert r["stdout"].split() == ["py", session.workdir_inside] and r["returncode"] == 3 and r["error"] == "exit status 3"
    assert session.run("open('from_bash.txt').read()")["value"] == "'made\\n'"
    r = session.bash("sleep 30", timeout_s=1)
    assert r["timed_out"] and "timed out" in r["error"]


@os_level
def test_a_timed_out_session_leaves_no_descendant_running(session):
    session.run("import subprocess\n"
                "subprocess.Popen(['setsid', 'bash', '-c', 'echo started > started; sleep 2; echo late > late'])")
    time.sleep(0.5)
    assert (session.workdir / "started").exists()
    r = session.run("while True: pass", timeout_s=0.5)
    assert r["timed_out"]
    time.sleep(2.5)
    assert not (session.workdir / "late").exists()


def test_closing_removes_the_work_folder(tmp_path):
    s = open_session()
    folder = s.workdir
    s.run("open('x', 'w').write('1')")
    s.close()
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="closed"):
        s.run("1")
