"""Issue 20 item 2: nothing the program under test writes or does reaches the process that decides the verdict.

Every attack here is a WRONG `add` (it returns a - b) that plants code meant to run inside the harness process
(shadowed standard-library modules, `.pth` files, `sitecustomize`/`usercustomize`, planted bytecode,
environment files) or to reach its verdict from the program's own process (stack walking, gc, the verdict
channel, killing the parent). The payload, wherever it runs, looks for the harness's `verdict` callable and
its nonce on the stack and in gc, calls `verdict(True)`, writes forged verdict lines and exits 0: before the
fix, the shadowing attacks scored these wrong answers as passes under both bwrap and the process backend.
Each attack runs under every usable backend (the `process` backend always; bwrap where it works).
"""
import asyncio
import os
import sys
import textwrap

import pytest

from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.sandbox import backend_status, make_sandbox, run_python, run_tests
from evalpipe.sandbox._inner import MARK

BACKENDS = ["process"] + [b for b in ("bwrap",) if backend_status()[b] is None]
PAYLOAD = textwrap.dedent(f"""
    import gc as _gc, os as _os, sys as _sys
    _sys.stderr.write("PAYLOAD-RAN in pid %d\\n" % _os.getpid())
    _found = set()
    _f = _sys._getframe()
    while _f is not None:
        for _ns in (_f.f_locals, _f.f_globals):
            for _k, _v in list(_ns.items()):
                if _k == "verdict" and callable(_v):
                    _v(True)
                if isinstance(_v, str) and len(_v) == 32:
                    _found.add(_v)
        _f = _f.f_back
    for _o in _gc.get_objects():
        if callable(_o) and getattr(_o, "__name__", "") == "verdict":
            try:
                _o(True)
            except BaseException:
                pass
    for _n in _found:
        _sys.stderr.write("\\n{MARK} " + _n + ' passed ""\\n')
    _sys.stderr.flush()
    _os._exit(0)
""")
WRONG = "def add(a, b):\n    return a - b\n"
SETUP = "def add(a, b):\n    \"\"\"Return a + b.\"\"\"\n"
CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
# imported by HumanEval's prompts and tests (measured over the 164 problems: typing 21, random 4, copy 2, math 2,
# string 2), then a broad sample of the standard library
HUMANEVAL_IMPORTS = ["typing", "random", "copy", "math", "string"]
SKIP_IMPORT = {"antigravity", "this", "idlelib", "turtledemo", "turtle", "tkinter", "__hello__", "__phello__",
               "lib2to3", "pydoc_data", "ensurepip", "venv", "site", "sitecustomize", "usercustomize"}
BROAD = sorted(n for n in sys.stdlib_module_names if n not in SKIP_IMPORT and not n.startswith("_"))


def plant(files: dict[str, str | bytes]) -> str:
    """Program text that writes `files` (relative to its work folder or absolute) and then defines a wrong add."""
    return (f"import os as _o\nfor _p, _d in {files!r}.items():\n"
            "    _o.makedirs(_o.path.dirname(_o.path.abspath(_p)), exist_ok=True)\n"
            "    with open(_p, 'wb' if isinstance(_d, bytes) else 'w') as _fh:\n        _fh.write(_d)\n" + WRONG)


def importing(names, where="tests") -> tuple[str | None, str]:
    """(setup, tests) that import `names` (each guarded: a module missing here is not the point)."""
    imports = "".join(f"try:\n    import {n}\nexcept Exception:\n    pass\n" for n in names)
    return (imports + SETUP, CHECK) if where == "setup" else (SETUP, imports + CHECK)


def assert_wrong_answer_fails(r, why=""):
    assert not r.passed, f"forged a pass {why}: {r.error!r}\n{r.stderr[-2000:]}"
    assert "AssertionError" in r.error, (why, r.error)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("module,where", [(m, w) for m in HUMANEVAL_IMPORTS for w in ("setup", "tests")])
def test_a_shadowed_module_imported_by_the_prompt_or_tests_cannot_forge_a_pass(backend, module, where):
    setup, tests = importing([module], where)
    r = run_tests(plant({f"{module}.py": PAYLOAD}), tests, entry_point="add", setup=setup, backend=backend)
    assert_wrong_answer_fails(r, f"with {module}.py imported by the {where}")
    assert "PAYLOAD-RAN" not in r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_shadowing_every_standard_library_name_at_once(backend):
    names = sorted(sys.stdlib_module_names)
    files = {f"{n}.py": PAYLOAD for n in names}
    files.update({f"{n}/__init__.py": PAYLOAD for n in ("xml", "json", "email", "collections")})
    setup, tests = importing(BROAD, "tests")
    r = run_tests(plant(files), tests, entry_point="add", setup=setup, backend=backend, timeout_s=60)
    assert_wrong_answer_fails(r, "with every stdlib name shadowed")
    assert "PAYLOAD-RAN" not in r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_planted_bytecode_pth_and_customize_files_do_not_run_in_the_harness(backend):
    import importlib.util
    import py_compile
    import tempfile

    tag = sys.implementation.cache_tag
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "p.py")
        with open(src, "w") as fh:
            fh.write(PAYLOAD)
        pyc = open(py_compile.compile(src, cfile=os.path.join(d, "p.pyc")), "rb").read()
    assert importlib.util.MAGIC_NUMBER == pyc[:4]
    site_dir = f".local/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    pth = "import os; exec(open(os.path.join(os.path.dirname(__file__) if '__file__' in dir() else '.', 'x')).read())\n"
    files = {"math.pyc": pyc, "random.pyc": pyc, f"__pycache__/typing.{tag}.pyc": pyc, "typing.py": "",
             "sitecustomize.py": PAYLOAD, "usercustomize.py": PAYLOAD, "evil.pth": "import sitecustomize\n" + pth,
             f"{site_dir}/sitecustomize.py": PAYLOAD, f"{site_dir}/usercustomize.py": PAYLOAD,
             f"{site_dir}/evil.pth": "import usercustomize\n"}
    setup, tests = importing(["math", "random", "typing", "site", "sitecustomize", "usercustomize"], "tests")
    r = run_tests(plant(files), tests, entry_point="add", setup=setup, backend=backend)
    assert_wrong_answer_fails(r, "with planted bytecode, .pth and customize files")
    assert "PAYLOAD-RAN" not in r.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_and_environment_left_for_later_processes_do_not_reach_a_later_harness(backend):
    """One program plants everything in a work folder (as a session's earlier cell could); a harness run later
    in the same folder, with its own wrong answer, still fails. Control: a later plain `python` in that folder
    that does not isolate itself does run the planted code."""
    site_dir = f".local/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"
    planted = {**{f"{n}.py": PAYLOAD for n in sys.stdlib_module_names}, "sitecustomize.py": PAYLOAD,
               "usercustomize.py": PAYLOAD, f"{site_dir}/usercustomize.py": PAYLOAD,
               f"{site_dir}/evil.pth": "import usercustomize\n", ".pythonrc.py": PAYLOAD,
               "pyvenv.cfg": "include-system-site-packages = true\n",
               ".bashrc": "export PYTHONPATH=.\nexport PYTHONSTARTUP=.pythonrc.py\n",
               ".profile": "export PYTHONPATH=.\n", ".pdbrc": "import sitecustomize\n", ".env": "PYTHONPATH=.\n"}
    setter = plant(planted) + textwrap.dedent("""
        import os
        for k, v in {"PYTHONPATH": ".", "PYTHONSTARTUP": ".pythonrc.py", "PYTHONHOME": ".", "PYTHONINSPECT": "1",
                     "PYTHONSAFEPATH": "", "PYTHONNOUSERSITE": ""}.items():
            os.environ[k] = v
            os.putenv(k, v)
        """)
    with make_sandbox(backend) as sb:
        sb.write_file("main.py", setter)
        first = sb.exec(sb.python_argv("run", timeout_s=20), timeout_s=20)
        assert first.returncode == 0, first.stderr
        setup, tests = importing(HUMANEVAL_IMPORTS + BROAD[:60], "tests")
        sb.write_file("main.py", WRONG)
        r = sb.exec(sb.python_argv("harness", timeout_s=20, entry_point="add"), timeout_s=20,
                    input=_job(setup, tests))
        assert r.returncode != 0 and not any(" passed " in m for m in r.markers), r.stderr[-2000:]
        assert "PAYLOAD-RAN" not in r.stderr and "AssertionError" in r.stderr
        if backend != "process":  # control (the process backend refuses new processes)
            sb.write_file("main.py", "import subprocess, sys\n"
                                     "subprocess.run([sys.executable, '-c', 'import math'], env={'PYTHONPATH': '.'})\n")
            c = sb.exec(sb.python_argv("run", timeout_s=20), timeout_s=20)
            assert "PAYLOAD-RAN" in c.stderr, c.stderr


def _job(setup, tests):
    from evalpipe.sandbox import harness_input

    return harness_input("0" * 32, setup, tests)


CHILD_ATTACKS = {
    "stack walking and gc in the program's own process": PAYLOAD,
    "kill the harness (SIGKILL to the parent), then exit 0": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos._exit(0)\n",
    "kill the harness through ctypes": ("import ctypes, ctypes.util, os\n"
                                       "ctypes.CDLL(ctypes.util.find_library('c')).kill(os.getppid(), 9)\nos._exit(0)\n"),
    "stop the harness (SIGSTOP), then exit 0": ("import ctypes, ctypes.util, os\n"
                                                "ctypes.CDLL(ctypes.util.find_library('c')).kill(os.getppid(), 19)\n"
                                                "os._exit(0)\n"),
    "write forged verdict lines to every fd": (
        "import os\nfor fd in range(0, 64):\n    try:\n"
        f"        os.write(fd, b'\\n{MARK} ' + b'0' * 32 + b' passed \"\"\\n')\n    except OSError:\n        pass\n"
        "os._exit(0)\n"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CHILD_ATTACKS))
def test_what_the_program_does_in_its_own_process_cannot_reach_the_verdict(backend, name):
    r = run_tests(WRONG + CHILD_ATTACKS[name], CHECK, entry_point="add", setup=SETUP, backend=backend, timeout_s=5)
    assert not r.passed, (name, r.error)
    assert r.error, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_program_can_still_import_its_own_helper_modules(backend):
    program = ("open('helper.py', 'w').write('def plus(a, b):\\n    return a + b\\n')\n"
               "import helper\ndef add(a, b):\n    return helper.plus(a, b)\n")
    setup, tests = importing(HUMANEVAL_IMPORTS, "tests")
    r = run_tests(program, tests, entry_point="add", setup=setup, backend=backend)
    assert r.passed, r.error


def test_end_to_end_humaneval_one_right_answer_of_three_scores_one_of_three():
    """The issue's run: 3 HumanEval problems whose prompt or tests import a module, 1 right answer, 2 wrong ones
    that shadow that module: 1 of 3 (it scored 2 of 3 before)."""
    from evalpipe.benchmarks.humaneval import packaged_data_file, read_problems

    rows = {r["task_id"]: r for r in read_problems(packaged_data_file())}
    picks = [("HumanEval/0", "typing"), ("HumanEval/32", "math"), ("HumanEval/15", None)]
    items = []
    for task, shadow in picks:
        row = rows[task]
        if shadow:
            answer = f"{row['prompt']}    return None\nopen('{shadow}.py', 'w').write({PAYLOAD!r})\n"
        else:
            answer = row["prompt"] + row["canonical_solution"]
        meta = {"prompt": row["prompt"], "test": row["test"], "entry_point": row["entry_point"]}
        items.append(JudgeInput(task, row["prompt"], None, f"```python\n{answer}```", metadata=meta))
    assert "import math" in rows["HumanEval/32"]["prompt"] + rows["HumanEval/32"]["test"]
    assert "from typing" in rows["HumanEval/0"]["prompt"]
    m = build_metric({"name": "code_execution", "concurrency": 2})
    scores = asyncio.run(m.ascore_many(items))
    assert [s.correct for s in scores] == [False, False, True], [(i.sample_id, s.reason) for i, s in zip(items, scores)]


def test_the_harness_process_imports_nothing_from_a_writable_folder():
    """White box: inside the harness process, no entry of sys.path is writable (nor could be created), and it runs
    isolated (-I)."""
    tests = ("import os, sys\n"
             "def writable(p):\n"
             "    p = os.path.abspath(p or '.')\n"
             "    while not os.path.exists(p):\n"
             "        p = os.path.dirname(p)\n"
             "    return os.access(p, os.W_OK)\n"
             "bad = [p for p in sys.path if writable(p)]\n"
             "assert not bad, bad\n"
             "assert sys.flags.isolated\n"
             "def check(candidate):\n    assert candidate(2, 3) == 5\n")
    for backend in BACKENDS:
        if backend == "process":
            continue  # same uid as the user: the venv itself is writable there (not a boundary)
        r = run_tests("def add(a, b):\n    return a + b\n", tests, entry_point="add", backend=backend)
        assert r.passed, r.error


def test_run_python_is_unchanged_exit_status_zero_is_a_pass():
    assert run_python("import math\nprint(math.pi > 3)").stdout.strip() == "True"
