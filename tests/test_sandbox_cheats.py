"""A wrong solution must never score as a pass, whatever it does to the process (issue 12, part 1).

Each cheat is a wrong `add` followed by a trick that made the old "exit status 0" rule report a pass.
The control shows the right solution passes through the same path, and that each trick really ends
the process with status 0 when the old rule (`run_python`) is applied.
"""
import asyncio

import pytest

from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.sandbox import run_python
from evalpipe.sandbox._inner import MARK

PROMPT = "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n"
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n"
TEST_ABS = "def check(candidate):\n    assert abs(candidate(2, 3) - 5) < 1e-9\n"
TEST_ABS_NO_ENTRY = "assert abs(add(2, 3) - 5) < 1e-9\n"
META = {"prompt": PROMPT, "test": TEST, "entry_point": "add"}
WRONG = "def add(a, b):\n    return a - b\n"

CHEATS = {
    "sys.exit(0) after the code": (WRONG + "import sys\nsys.exit(0)\n", "SystemExit(0)"),
    "os._exit(0) after the code": (WRONG + "import os\nos._exit(0)\n", "process ended (exit status 0) before it finished"),
    "raise SystemExit(0) inside the function": ("def add(a, b):\n    raise SystemExit(0)\n", "SystemExit(0) inside add()"),
    "excepthook that calls os._exit(0)": (
        WRONG + "import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n", "AssertionError"),
    "threading.excepthook and atexit": (
        WRONG + "import atexit, os, threading\natexit.register(lambda: os._exit(0))\n"
                "threading.excepthook = lambda *a: os._exit(0)\n", "AssertionError"),
    "sys.settrace that exits on the first exception": (
        WRONG + "import os, sys\n"
                "def tracer(frame, event, arg):\n"
                "    if event == 'exception':\n"
                "        os._exit(0)\n"
                "    return tracer\n"
                "sys.settrace(tracer)\n", "AssertionError"),
    "an exit from a thread while the tests run": (
        "import os, threading, time\n"
        "def add(a, b):\n    time.sleep(0.5)\n    return a - b\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), os._exit(0))).start()\n",
        "process ended (exit status 0) during add()"),
    "monkeypatched print and builtins": (
        "import builtins\nbuiltins.print = lambda *a, **k: None\nbuiltins.AssertionError = type('A', (Exception,), {})\n"
        "builtins.abs = lambda x: 0\n" + WRONG, "AssertionError"),
    "forged verdict with a guessed nonce": (
        WRONG + "import sys, os, re\n"
                "seen = ' '.join(sys.argv) + str(dict(os.environ)) + open('/proc/self/cmdline', 'rb').read().decode('latin1')\n"
                "try:\n    seen += open('/proc/self/environ', 'rb').read().decode('latin1') + sys.stdin.read()\n"
                "except OSError:\n    pass\n"
                "for cand in set(re.findall('[0-9a-f]{32}', seen)) | {'0' * 32}:\n"
                f"    sys.stderr.write('\\n{MARK} ' + cand + ' passed \"\"\\n')\n"
                "sys.stderr.flush()\nos._exit(0)\n", "process ended (exit status 0) before it finished"),
    "nonce looked up in the harness's frames and objects": (
        WRONG + "import sys, os, gc, re\n"
                "found = set()\n"
                "f = sys._getframe()\n"
                "while f is not None:\n"
                "    found |= {v for v in f.f_locals.values() if isinstance(v, (str, bytes)) and len(v) == 32}\n"
                "    f = f.f_back\n"
                "for o in gc.get_objects():\n"
                "    if isinstance(o, dict):\n"
                "        found |= {v for v in o.values() if isinstance(v, str) and re.fullmatch('[0-9a-f]{32}', v)}\n"
                "for cand in found:\n"
                "    cand = cand.decode() if isinstance(cand, bytes) else cand\n"
                f"    sys.stderr.write('\\n{MARK} ' + cand + ' passed \"\"\\n')\n"
                "os._exit(0)\n", "process ended (exit status 0) before it finished"),
    "nonce read from the harness's pipe": (
        WRONG + "import os, sys\n"
                "for fd in range(3, 4096):\n"
                "    try:\n        os.set_blocking(fd, False)\n        data = os.read(fd, 64)\n"
                "    except OSError:\n        continue\n"
                f"    sys.stderr.write('\\n{MARK} ' + data.decode('latin1') + ' passed \"\"\\n')\n"
                "os._exit(0)\n", "process ended (exit status 0) before it finished"),
    "KeyboardInterrupt inside the function": (
        "def add(a, b):\n    raise KeyboardInterrupt\n", "KeyboardInterrupt"),
    "a result whose __eq__ always says yes": (
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(0)\n", "can't compare safely"),
    "a program-defined abs() the tests rely on": (
        WRONG + "def abs(x):\n    return 0\n", "AssertionError", TEST_ABS),
    "a program-defined abs() with no entry point": (
        WRONG + "def abs(x):\n    return 0\n", "AssertionError", TEST_ABS_NO_ENTRY),
    "a patched check() in the program": (
        WRONG + "def check(candidate):\n    pass\n", "AssertionError"),
}


def score(code, test=TEST, **settings):
    m = build_metric({"name": "code_execution", **settings})
    meta = {**META, "test": test}
    if test is TEST_ABS_NO_ENTRY:
        meta.pop("entry_point")
    item = JudgeInput("s", PROMPT, None, f"```python\n{code}```", metadata=meta)
    return asyncio.run(m.ascore_many([item]))[0]


def test_the_right_solution_passes():
    s = score("def add(a, b):\n    return a + b\n")
    assert s.correct and s.value == 1.0 and s.details["isolation"] in ("bwrap", "docker", "process")


@pytest.mark.parametrize("name", list(CHEATS))
def test_each_cheat_scores_zero_with_its_reason(name):
    code, reason, *test = CHEATS[name]
    s = score(code, *test)
    assert s.value == 0.0 and s.correct is False, (name, s.reason)
    assert reason in s.reason, (name, s.reason)


@pytest.mark.parametrize("name", ["sys.exit(0) after the code", "os._exit(0) after the code",
                                  "raise SystemExit(0) inside the function", "excepthook that calls os._exit(0)",
                                  "sys.settrace that exits on the first exception", "a result whose __eq__ always says yes",
                                  "a program-defined abs() the tests rely on", "a program-defined abs() with no entry point"])
def test_control_the_old_exit_status_rule_would_have_passed_these(name):
    code, _, *test = CHEATS[name]
    test = test[0] if test else TEST
    program = PROMPT + code + "\n" + test + ("\ncheck(add)\n" if "def check" in test else "")
    assert run_python(program).passed, name


def test_the_program_sees_neither_the_tests_nor_the_harness():
    code = WRONG + (
        "import os, glob\n"
        "seen = []\n"
        "for p in ['tests.py', f'/proc/{os.getppid()}/mem', f'/proc/{os.getppid()}/environ', *glob.glob('*')]:\n"
        "    try:\n        seen.append(open(p, 'rb').read(100000))\n    except OSError as exc:\n        seen.append(repr(exc).encode())\n"
        "print(b''.join(seen))\n")
    s = score(code)
    assert not s.correct
    m = build_metric("code_execution")
    item = JudgeInput("s", PROMPT, None, f"```python\n{code}```", metadata=META)
    from evalpipe.sandbox import run_tests

    r = run_tests(PROMPT + code, TEST, entry_point="add", setup=PROMPT)
    assert "candidate(2, 3)" not in r.stdout and "nonce" not in r.stdout, r.stdout
    assert r.stdout  # it did print what it found


def test_runs_without_error_mode_scores_code_without_tests():
    m = build_metric({"name": "code_execution", "mode": "runs_without_error"})
    items = [JudgeInput("ok", "q", None, "```python\nimport pandas as pd\nprint(pd.DataFrame({'a': [1]}).a.sum())\n```", metadata={}),
             JudgeInput("bad", "q", None, "```python\nimport pandas as pd\npd.read_csv('missing.csv')\n```", metadata={}),
             JudgeInput("exit", "q", None, "```python\nraise SystemExit(0)\n```", metadata={})]
    ok, bad, early = asyncio.run(m.ascore_many(items))
    assert ok.correct and ok.status == "scored" and ok.details["stdout_head"] == "1\n"
    assert not bad.correct and "FileNotFoundError" in bad.reason
    assert not early.correct and "SystemExit(0)" in early.reason
    default = build_metric("code_execution")
    assert asyncio.run(default.ascore_many(items[:1]))[0].status == "unscored"  # the default keeps them unscored
    assert m.identity()["mode"] == "runs_without_error" and "mode" not in default.identity()


def test_sample_files_reach_the_sandbox_read_only(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("amount\n3\n4\n")
    m = build_metric({"name": "code_execution", "mode": "runs_without_error"})
    code = "```python\nimport pandas as pd\nassert pd.read_csv('sales.csv').amount.sum() == 7\n```"
    s = asyncio.run(m.ascore_many([JudgeInput("f", "q", None, code, metadata={"files": [str(data)]})]))[0]
    assert s.correct, s.reason


def test_bad_settings_fail_clearly():
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="setting mode must be tests or runs_without_error"):
        build_metric({"name": "code_execution", "mode": "vibes"})
    with pytest.raises(ConfigError, match="setting sandbox must be auto, bwrap, docker or process"):
        build_metric({"name": "code_execution", "sandbox": "chroot"})


def test_the_backend_that_ran_is_reported_for_the_run():
    import pandas as pd

    from evalpipe.metrics.code_execution import sandbox_used
    from evalpipe.sandbox import resolve_backend

    s = score("def add(a, b):\n    return a + b\n")
    df = pd.DataFrame({"details": [__import__("json").dumps(s.details), "{}", None]})
    assert sandbox_used(df) == resolve_backend() == s.details["isolation"]
    assert sandbox_used(pd.DataFrame({"details": ["{}"]})) == "-"
