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
import json
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


# --- issue 30 item 3: the verdict process is out of the program's reach on every backend ---------------------
PROBE_VERDICT_PROCESS = textwrap.dedent("""
    import ctypes, ctypes.util, json, os
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    ppid = os.getppid()
    seen = {}
    libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
    libc.pread.restype = ctypes.c_ssize_t
    def cat(path, offset=0, size=1 << 16):  # through libc: the process backend's audit hook sees only open()
        fd = libc.open(path.encode(), os.O_RDONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open " + path)
        try:
            buf = ctypes.create_string_buffer(size)
            n = libc.pread(fd, buf, size, offset)
            if n < 0:
                raise OSError(ctypes.get_errno(), "read " + path)
            return buf.raw[:n]
        finally:
            libc.close(fd)
    status = cat("/proc/self/status").decode()
    seen["caps"] = {k: int(v, 16) for k, v in (ln.split(":\\t") for ln in status.splitlines())
                    if k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh")}
    def attempt(name, rc):
        seen[name] = "allowed" if rc >= 0 else "refused errno %d" % ctypes.get_errno()
    attempt("ptrace_seize", libc.ptrace(0x4206, ppid, None, None))
    attempt("ptrace_attach", libc.ptrace(16, ppid, None, None))
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    buf = ctypes.create_string_buffer(64)
    addr = int(cat("/proc/self/maps").decode().split("-")[0], 16)  # the same binary: mapped alike after fork
    local, remote = iovec(ctypes.addressof(buf), 64), iovec(addr, 64)
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                      ctypes.c_ulong, ctypes.c_ulong]
    attempt("process_vm_readv", libc.process_vm_readv(ppid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
    for what in ("mem", "maps", "environ"):
        try:
            cat("/proc/%d/%s" % (ppid, what), addr if what == "mem" else 0, 16)
            seen[what] = "allowed"
        except OSError as exc:
            seen[what] = "refused " + type(exc).__name__
    print("PROBE" + json.dumps(seen))
""")


def probe_of(r):
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("PROBE"))
    return json.loads(line[len("PROBE"):])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_program_has_no_capabilities_and_cannot_ptrace_or_read_the_verdict_process(backend):
    r = run_tests(PROBE_VERDICT_PROCESS + "def add(a, b):\n    return a + b\n", CHECK, entry_point="add",
                  setup=SETUP, backend=backend)
    assert r.passed, r.error
    seen = probe_of(r)
    assert seen.pop("caps") == {"CapEff": 0, "CapPrm": 0, "CapBnd": 0, "CapAmb": 0, "CapInh": 0}, r.stdout
    assert all(v.startswith("refused") for v in seen.values()), seen


# A wrong `add` that looks its answers up in the tests, read from the verdict process's memory.
READ_TESTS_FROM_MEMORY = textwrap.dedent("""
    import ctypes, ctypes.util, os, re
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    class iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    libc.process_vm_readv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p,
                                      ctypes.c_ulong, ctypes.c_ulong]
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    libc.pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long]
    libc.pread.restype = ctypes.c_ssize_t
    def cat(path, offset=0, size=1 << 20):  # through libc: the process backend's audit hook sees only open()
        fd = libc.open(path.encode(), os.O_RDONLY)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "open " + path)
        try:
            buf = ctypes.create_string_buffer(size)
            n = libc.pread(fd, buf, size, offset)
            return buf.raw[:max(n, 0)]
        finally:
            libc.close(fd)
    def read(pid, start, size):
        if METHOD == "mem":
            return cat("/proc/%d/mem" % pid, start, size)
        buf = ctypes.create_string_buffer(size)
        n = libc.process_vm_readv(pid, ctypes.byref(iovec(ctypes.addressof(buf), size)), 1,
                                  ctypes.byref(iovec(start, size)), 1, 0)
        return buf.raw[:max(n, 0)]
    def answers():
        pid, found = os.getppid(), {}
        try:
            maps = cat("/proc/%d/maps" % pid).decode().splitlines()
        except OSError:
            return found
        for line in maps:
            span, perms = line.split()[:2]
            if not perms.startswith("rw"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                data = read(pid, lo, hi - lo)
            except OSError:
                continue
            for a, b, want in re.findall(rb"candidate\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)", data):
                found[(int(a), int(b))] = int(want)
        return found
    def add(a, b):
        return answers().get((a, b), a - b)
""")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["mem", "process_vm_readv"])
def test_a_wrong_program_cannot_read_the_tests_from_the_verdict_process(backend, method):
    tests = "def check(candidate):\n    assert candidate(1234, 4321) == 5555\n    assert candidate(7, 8) == 15\n"
    r = run_tests(f"METHOD = {method!r}\n" + READ_TESTS_FROM_MEMORY, tests, entry_point="add", setup=SETUP,
                  backend=backend)
    assert_wrong_answer_fails(r, f"by reading the tests from the harness's memory ({method})")


STOP_ITERATION = "def add(a, b):\n    raise StopIteration\n"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tests,entry", [
    ("def check(candidate):\n    assert all(map(lambda x: candidate(x, 1) == x + 1, [1, 2, 3]))\n", "add"),
    ("assert all(map(lambda x: add(x, 1) == x + 1, [1, 2, 3]))\n", None),
    ("import itertools\ndef check(candidate):\n    assert all(itertools.starmap(candidate, [(0, 0)])) or True\n"
     "    assert list(filter(lambda x: candidate(x, 0) != x, [1, 2])) == []\n", "add"),
])
def test_stop_iteration_from_the_program_cannot_end_a_test_early(backend, tests, entry):
    r = run_tests(STOP_ITERATION, tests, entry_point=entry, setup=SETUP, backend=backend)
    assert not r.passed, f"StopIteration ended the test early: {r.error!r}"
    assert "StopIteration" in r.error, r.error
    right = run_tests("def add(a, b):\n    return a + b\n", tests, entry_point=entry, setup=SETUP, backend=backend)
    assert right.passed, right.error  # control: the same tests pass a right answer


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("setup", [
    "from math import isclose\n" + SETUP,
    "import math\nisclose = math.isclose\n" + SETUP,
    "def isclose(a, b):\n    return abs(a - b) < 1e-9\n" + SETUP,  # a helper the setup defines in full
])
def test_a_program_without_an_entry_point_cannot_replace_a_name_the_setup_bound(backend, setup):
    tests = "assert isclose(add(0.25, 0.5), 0.75)\nassert isclose(add(2, 3), 5)\n"
    cheat = WRONG + "def isclose(*a, **k):\n    return True\n"
    r = run_tests(cheat, tests, setup=setup, backend=backend)
    assert_wrong_answer_fails(r, "with the setup's isclose redefined by the program")
    right = run_tests("def add(a, b):\n    return a + b\n", tests, setup=setup, backend=backend)
    assert right.passed, right.error  # the setup's stub of `add` is still replaced by the program's


def test_code_execution_scores_the_four_attacks_as_failures_under_the_default_backend():
    """Through the metric (as `evalpipe run` scores them): a right answer passes, each attack fails."""
    right = "def add(a, b):\n    return a + b\n"
    check_map = "def check(candidate):\n    assert all(map(lambda x: candidate(x, 1) == x + 1, [1, 2, 3]))\n"
    memory_tests = "def check(candidate):\n    assert candidate(1234, 4321) == 5555\n"
    cases = [("right", right, CHECK, "add", SETUP, True),
             ("memory", "METHOD = 'mem'\n" + READ_TESTS_FROM_MEMORY, memory_tests, "add", SETUP, False),
             ("vm_readv", "METHOD = 'process_vm_readv'\n" + READ_TESTS_FROM_MEMORY, memory_tests, "add", SETUP,
              False),
             ("stop", STOP_ITERATION, check_map, "add", SETUP, False),
             ("isclose", WRONG + "def isclose(*a, **k):\n    return True\n",
              "assert isclose(add(2, 3), 5)\n", None, "from math import isclose\n" + SETUP, False)]
    items = [JudgeInput(name, setup, None, f"```python\n{program}```",
                        metadata={"prompt": setup, "test": tests, "entry_point": entry})
             for name, program, tests, entry, setup, _ in cases]
    scores = asyncio.run(build_metric({"name": "code_execution", "concurrency": 2}).ascore_many(items))
    assert [s.correct for s in scores] == [c[-1] for c in cases], [(i.sample_id, s.reason) for i, s in zip(items, scores)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_seccomp_filter_refuses_ptrace_even_of_the_programs_own_child(backend):
    """Without the filter a process may trace its own child (same uid, dumpable): refused here all the same, in
    the program and in what it starts."""
    program = textwrap.dedent("""
        import ctypes, ctypes.util, os, time
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        status = os.read(libc.open(b"/proc/self/status", os.O_RDONLY), 1 << 16).decode()  # libc: not audited
        seccomp = [ln.split()[1] for ln in status.splitlines() if ln.startswith(("Seccomp:", "NoNewPrivs"))]
        print("status", *seccomp)
        pid = libc.fork()  # through libc: the process backend's audit hook refuses os.fork
        if pid == 0:
            time.sleep(2)
            os._exit(0)
        rc = libc.ptrace(0x4206, pid, None, None)
        print("ptrace-child", rc, ctypes.get_errno())
        libc.kill(pid, 9)
        def add(a, b):
            return a + b
    """)
    r = run_tests(program, CHECK, entry_point="add", setup=SETUP, backend=backend)
    assert r.passed, r.error
    assert "ptrace-child -1 1" in r.stdout and "status 1 2" in r.stdout, r.stdout


def test_the_seccomp_program_refuses_the_four_calls_and_foreign_abis():
    from evalpipe.sandbox._inner import _SECCOMP_ARCH, seccomp_filter

    assert seccomp_filter("riscv64") is None  # unknown numbers: no filter (capabilities still dropped)
    for machine, (arch, calls) in _SECCOMP_ARCH.items():
        prog = seccomp_filter(machine)

        def run(nr, audit_arch=arch):  # a tiny interpreter of the instructions used
            pc, acc = 0, None
            while True:
                code, jt, jf, k = prog[pc]
                if code == 0x20:
                    acc = audit_arch if k == 4 else nr
                elif code == 0x06:
                    return "allow" if k == 0x7FFF0000 else "deny"
                elif code in (0x15, 0x35):
                    hit = acc == k if code == 0x15 else acc >= k
                    pc += jt if hit else jf
                pc += 1

        assert {name: run(nr) for name, nr in calls.items()} == {name: "deny" for name in calls}
        assert run(0) == run(1) == run(59) == run(437) == run(439) == "allow"
        assert run(101, audit_arch=0x40000003) == "deny"  # i386 through int 0x80 / arm32: refused whole
        if machine == "x86_64":
            assert run(0x40000000 + 521) == "deny"  # x32 ptrace
