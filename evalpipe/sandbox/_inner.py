"""The first code that runs inside a sandbox (standard library only; started as `python -I -S _inner.py CFG MODE`).

It sets the resource limits, drops root privileges when it has them (bwrap run by root: the sandbox user is
a random unprivileged uid, so RLIMIT_NPROC counts), installs the audit hook of the `process` backend when
asked to, enables `site` (the venv's packages) only then, and runs one of:

- `exec ARGV...`: replace itself by ARGV (a bash command of a session, a plain program);
- `run`: run `main.py` of the work folder as `__main__` (`run_python`: passed = exit status 0);
- `harness`: the code_execution harness, two processes. The child runs the program (`main.py`) and then
  only answers calls of its functions. The parent never runs the program's code and never imports from a
  folder the program can write (isolated mode, the work folder and every writable folder off its
  `sys.path`): it runs the trusted setup (the dataset's prompt) before the child exists, reads a one-time
  nonce and the tests from stdin after forking it, runs the tests with proxies that call the child's
  functions (arguments and results cross as plain values, tagged JSON, so an object with a rigged `__eq__`
  can't), and only after `check(entry_point)` returned writes `<MARK> <nonce> passed` to stderr. Any
  exception, SystemExit included, a child that ends early, or a parent that dies is a failure;
- `session`: a persistent interpreter for one sample, one JSON request per line on stdin, one JSON response
  per line on the original stdout (user output goes to per-call files, so subprocess output is captured too).
"""
import builtins
import json
import linecache
import os
import resource
import signal
import struct
import sys
import traceback

MARK = "@@evalpipe-harness@@"


def _apply(cfg, guard=True):
    for name, value in (cfg.get("limits") or {}).items():
        resource.setrlimit(getattr(resource, name), (value, value))
    uid = cfg.get("uid")
    if uid is not None and os.getuid() == 0:
        _drop_bounding_set()  # while CAP_SETPCAP is still there (bwrap run by root keeps it for this)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a non-root uid: every capability is dropped too
    why = _lock_down()
    if why:  # fail closed: no verdict (and no run) from a process that could reach the verdict process
        os.write(2, f"sandbox: cannot lock the code out of the harness: {why}\n".encode())
        os._exit(70)
    if guard and cfg.get("guard"):
        _install_guard(cfg["guard"])
    import site  # the venv's site-packages, only now (its .pth files must not run with the privileges above)

    site.main()


# --- no capabilities, no ptrace: for every process that runs model-written code, on every backend -------------
# Under `process` the code is root of its own user namespace (unshare -r) with every capability there, the
# harness included; CAP_SYS_PTRACE would let it attach to the harness (non-dumpable or not) and rewrite the
# verdict, or read the tests from its memory. So before anything else runs: no-new-privs, an empty bounding
# set, ambient and inheritable sets and no capabilities (nothing gains any again, exec of uid 0 or a setuid file
# included), and a seccomp filter that refuses ptrace, process_vm_readv/writev and pidfd_getfd outright
# (inherited by every process started from here).
_PR_CAPBSET_READ, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_GET_NO_NEW_PRIVS = 23, 24, 38, 39
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, _PR_SET_SECCOMP, _PR_GET_SECCOMP = 47, 4, 22, 21
_CAP_VERSION_3 = 0x20080522
# (audit arch of seccomp_data, {syscall: number}): x86_64 and aarch64; any other ABI on them (i386 through
# int 0x80, x32, arm32) is refused whole
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438}),
}
_X32_BIT = 0x40000000


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return ctypes, libc


def _drop_bounding_set():
    ctypes, libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0) == 1:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # needs CAP_SETPCAP; where it fails, no-new-privs holds


def _capabilities():
    """(effective, permitted, inheritable) as 64-bit masks."""
    ctypes, libc = _libc()
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capget(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    return tuple(data[i] | (data[i + 3] << 32) for i in range(3))


def seccomp_filter(machine):
    """The BPF program (list of (code, jt, jf, k)) refusing ptrace and process_vm_* with EPERM, or None where
    this machine's syscall numbers are not known here."""
    if machine not in _SECCOMP_ARCH:
        return None
    arch, calls = _SECCOMP_ARCH[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, deny = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    nrs = sorted(calls.values())
    body = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, deny), (ld, 0, 0, 0)]
    if machine == "x86_64":
        body.append((jge, len(nrs) + 1, 0, _X32_BIT))
    for i, nr in enumerate(nrs):
        body.append((jeq, len(nrs) - i, 0, nr))
    return body + [(ret, 0, 0, allow), (ret, 0, 0, deny)]


def _install_seccomp(program):
    ctypes, libc = _libc()

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    insns = (SockFilter * len(program))(*(SockFilter(*i) for i in program))
    prog = SockFprog(len(program), insns)
    if libc.prctl(_PR_SET_SECCOMP, 2, ctypes.addressof(prog), 0, 0) != 0:  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _lock_down():
    """None once this process holds no capability, can gain none, and (where the machine's syscall numbers are
    known) cannot ptrace or process_vm_* any process; else why not."""
    try:
        ctypes, libc = _libc()
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
            return f"no-new-privs could not be set (errno {ctypes.get_errno()})"
        if any(_capabilities()):
            _drop_bounding_set()
            libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
            header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
            if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
                return f"capset failed (errno {ctypes.get_errno()})"
        if any(_capabilities()):
            return "capabilities are left after capset"
        program = seccomp_filter(os.uname().machine)
        if program is not None:
            _install_seccomp(program)
            if libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) != 2:
                return "the seccomp filter is not in force"
    except (OSError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _install_guard(g):
    """The `process` backend's audit hook: refuses files outside the work folder, processes and the network.
    Not a boundary: code that means to escape it can (ctypes, already-loaded C code)."""
    root = os.path.realpath(g["root"])
    extra = tuple(os.path.realpath(p) for p in g.get("write_ok", []))
    read_ok = tuple(os.path.realpath(p) for p in g["read_ok"])
    read_only = {os.path.realpath(p) for p in g.get("read_only", [])}
    block_net = g.get("block_network", True)
    dev_ok = ("/dev/null", "/dev/urandom", "/dev/random", "/dev/zero")

    def inside(path, prefixes):
        return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in prefixes)

    def hook(event, args):
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
            if writing and real in read_only:
                raise PermissionError(f"sandbox: {real} is read-only")
            if inside(real, (root,) + extra) or real in dev_ok:
                return
            if not writing and inside(real, read_ok):
                return
            raise PermissionError(f"sandbox: access outside the sandbox directory refused: {real}")
        if event in ("os.listdir", "os.scandir", "os.chdir", "os.remove", "os.rmdir", "os.rename", "os.mkdir",
                     "os.symlink", "os.link", "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.rmtree"):
            for p in args:
                if isinstance(p, (str, bytes, os.PathLike)):
                    real = os.path.realpath(os.fsdecode(p))
                    if real in read_only and event not in ("os.listdir", "os.scandir", "os.chdir"):
                        raise PermissionError(f"sandbox: {real} is read-only")
                    if not (inside(real, (root,)) or (event in ("os.listdir", "os.scandir") and inside(real, read_ok))):
                        raise PermissionError(f"sandbox: {event} outside the sandbox directory refused: {real}")
                    break
            return
        if event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
                     "os.forkpty", "pty.spawn", "os.startfile", "os.kill", "os.killpg"):
            raise PermissionError(f"sandbox: {event} refused")
        if event == "ctypes.dlopen" and args and args[0] is not None:
            real = os.path.realpath(os.fsdecode(args[0])) if os.sep in os.fsdecode(args[0]) else ""
            if not inside(real, read_ok + (root,)):
                raise PermissionError(f"sandbox: loading native library {args[0]!r} refused")
        if block_net and event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"):
            raise PermissionError(f"sandbox: network access refused ({event})")

    sys.addaudithook(hook)


def _describe(exc):
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r})"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.splitlines()[0][:500] if text.strip() else type(exc).__name__


def _fresh_main():
    """A new `__main__` module for the user's code (not this file's globals), registered so pickling works."""
    import types

    mod = types.ModuleType("__main__")
    mod.__file__ = os.path.abspath("main.py")
    sys.modules["__main__"] = mod
    return mod.__dict__


# --- the test harness: the tests run in a process the program never controls ---------------------------
_MAX_MSG = 64 * 1024 * 1024


def _enc(v, depth=0):
    """Plain Python values as tagged JSON. Exact built-in types only: a subclass (an int whose __eq__ always
    says yes) is refused, and decoding can only ever build plain values (json never runs code)."""
    if depth > 200:
        raise ValueError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is str or t is int:
        return v
    if t is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else {"$": "float", "v": repr(v)}
    if t is list:
        return [_enc(x, depth + 1) for x in v]
    if t in (tuple, set, frozenset):
        return {"$": t.__name__, "v": [_enc(x, depth + 1) for x in v]}
    if t is dict:
        return {"$": "dict", "v": [[_enc(k, depth + 1), _enc(x, depth + 1)] for k, x in v.items()]}
    if t is bytes:
        return {"$": "bytes", "v": v.hex()}
    if t is complex:
        return {"$": "complex", "v": [_enc(v.real), _enc(v.imag)]}
    raise ValueError(f"a {t.__name__} is not a plain value")


def _dec(v):
    if type(v) is list:
        return [_dec(x) for x in v]
    if type(v) is not dict:
        return v
    tag, val = v.get("$"), v.get("v")
    if tag == "float":
        return float(val)
    if tag == "tuple":
        return tuple(_dec(x) for x in val)
    if tag == "set":
        return {_dec(x) for x in val}
    if tag == "frozenset":
        return frozenset(_dec(x) for x in val)
    if tag == "dict":
        return {_dec(k): _dec(x) for k, x in val}
    if tag == "bytes":
        return bytes.fromhex(val)
    if tag == "complex":
        return complex(_dec(val[0]), _dec(val[1]))
    raise ValueError(f"unknown tag {tag!r} from the program's process")


def _send(fd, obj):
    data = json.dumps(_enc(obj), ensure_ascii=True).encode("ascii")
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def _recv(fd):
    """One message, or None at end of file (plain values only)."""
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = os.read(fd, min(n - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exactly(4)
    if head is None:
        return None
    (size,) = struct.unpack(">I", head)
    if size > _MAX_MSG:
        raise ValueError(f"message of {size} bytes from the program's process is over the limit")
    body = exactly(size)
    if body is None:
        return None
    return _dec(json.loads(body))


def _plain(value):
    """numpy scalars/arrays to Python values; everything else as it is (subclasses are refused later)."""
    mod = type(value).__module__ or ""
    if mod.startswith("numpy") and hasattr(value, "tolist"):
        return value.tolist()
    return value


def _program_side(cfg, req_r, resp_w):
    """The child: runs the untrusted program, then calls its functions when the harness asks."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # before any user code: the nonce and the tests come on stdin, to the harness only
    os.close(null)
    sys.path.insert(0, os.getcwd())  # the program may import its own files (the harness never does)

    try:  # dumpable again (the parent stays not): the program may read its own /proc/self as usual
        import ctypes

        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
    except Exception:
        pass
    if cfg.get("guard"):  # the `process` backend: its audit hook, in this process only
        _install_guard(cfg["guard"])

    ns = _fresh_main()
    try:
        with open("main.py", encoding="utf-8") as fh:
            code = compile(fh.read(), "main.py", "exec")
        exec(code, ns)
    except BaseException as exc:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
        _send(resp_w, ("error", _describe(exc)))
        os._exit(1)
    names = sorted(k for k, v in list(ns.items()) if callable(v) and not k.startswith("__"))
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    _send(resp_w, ("ready", names))
    while True:
        msg = _recv(req_r)
        if msg is None:
            os._exit(0)
        name, args, kwargs = msg
        try:
            value = _plain(ns[name](*args, **kwargs))
            try:
                _send(resp_w, ("ok", value))
            except ValueError:
                _send(resp_w, ("raise", "TypeError",
                               f"{name}() returned a {type(value).__name__}, which the tests can't compare safely "
                               "(only plain Python values cross to the harness)"))
        except BaseException as exc:
            _send(resp_w, ("raise", type(exc).__name__, _describe(exc)))
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass


_ITERATION_ENDS = ("StopIteration", "StopAsyncIteration")


class ProgramExit(Exception):
    """The program's function raised SystemExit/KeyboardInterrupt, or its process ended during a call."""


def _read_exactly(fd, n):
    """n bytes from fd with unbuffered reads: nothing past them is taken from the pipe (a buffered reader could
    pull the nonce into memory before the fork, where the program's process would inherit it)."""
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("the harness input ended early")
        buf += chunk
    return buf


def _read_frame(fd):
    (size,) = struct.unpack(">I", _read_exactly(fd, 4))
    return json.loads(_read_exactly(fd, size))


def _program_writable(cfg):
    """Folders the program may write to, as this process can tell: the `process` backend's guard says (its
    user can write its own venv, but the guarded program can't); inside bwrap/docker, what is writable for this
    uid (the same uid as the program's) is writable for the program."""
    g = cfg.get("guard")
    if g:
        return [os.path.realpath(p) for p in [g["root"], *g.get("write_ok", [])]]
    return None


def _trusted_sys_path(cfg):
    """sys.path without any entry the program can write to, or create: the harness never imports the program's
    files (a shadowed `math.py`, a planted `.pyc` or package), whatever the tests import and whenever."""
    cwd = os.path.realpath(os.getcwd())
    marked = _program_writable(cfg)

    def under(path, prefixes):
        return any(path == p or path.startswith(p.rstrip(os.sep) + os.sep) for p in prefixes)

    def unsafe(entry):
        if not isinstance(entry, str) or entry in ("", "."):
            return True
        path = os.path.realpath(os.path.abspath(entry))
        if under(path, [cwd]):
            return True
        if marked is not None:
            return under(path, marked)
        probe = path
        while not os.path.exists(probe) and probe != os.path.dirname(probe):
            probe = os.path.dirname(probe)  # a missing entry could be created: judge its nearest existing folder
        return os.access(probe, os.W_OK)

    sys.path[:] = [p for p in sys.path if not unsafe(p)]
    sys.path_importer_cache.clear()


def _trusted_source(text, name):
    """Code of the job compiled under a `<name>`, its lines in linecache: tracebacks never read a file of that
    name from the work folder (which the program could have written)."""
    linecache.cache[name] = (len(text), None, text.splitlines(True), name)
    return compile(text, name, "exec")


def _stubs(setup):
    """Names of the functions the setup leaves to the program: defined at its top level with a body of only a
    docstring, `pass`, `...` or `raise NotImplementedError`."""
    import ast

    try:
        tree = ast.parse(setup)
    except SyntaxError:
        return set()

    def empty(stmt):
        if isinstance(stmt, ast.Pass):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            return stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)
        if isinstance(stmt, ast.Raise) and stmt.exc is not None:
            exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
            return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
        return False

    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and all(empty(stmt) for stmt in node.body)}


def _harness(cfg):
    """The parent: never runs the program's code. Before the child exists it cleans its own sys.path and runs
    the trusted setup (its imports happen while the work folder holds nothing of the program's); it reads the
    nonce and the tests after the fork (so the program's process never has them), runs the tests with proxies
    that call the program's functions in the child (plain values only), and writes the verdict."""
    try:  # non-dumpable: the child (same uid) can neither ptrace this process nor read /proc/<pid>/mem
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass
    _trusted_sys_path(cfg)
    first_job = _read_frame(0)  # the setup only: nothing secret, the program's process may inherit it
    tests_ns = {"__name__": "__main__", "__builtins__": builtins}
    setup_error = None
    if first_job.get("setup"):
        try:
            exec(_trusted_source(first_job["setup"], "<prompt>"), tests_ns)
        except BaseException as exc:  # reported with the verdict, once the nonce is known
            try:
                traceback.print_exc()
            except BaseException:
                pass
            setup_error = f"{_describe(exc)} (raised in the setup)"
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.close(req_w)
        os.close(resp_r)
        try:
            _program_side(cfg, req_r, resp_w)
        finally:
            os._exit(1)
    os.close(req_r)
    os.close(resp_w)
    job = _read_frame(0)
    nonce = job["nonce"]

    def kill_child():
        try:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        except OSError:
            pass

    def verdict(ok, reason=""):
        kill_child()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        os.write(2, f"\n{MARK} {nonce} {'passed' if ok else 'failed'} {json.dumps(reason)}\n".encode())
        os._exit(0 if ok else 1)

    def ended_status():
        try:
            pid, status = os.waitpid(child, 0)
            if os.WIFEXITED(status):
                return f"exit status {os.WEXITSTATUS(status)}"
            if os.WIFSIGNALED(status):
                return f"signal {os.WTERMSIG(status)}"
        except OSError:
            pass
        return "unknown status"

    if setup_error:
        verdict(False, setup_error)
    first = _recv(resp_r)
    if first is None:
        verdict(False, f"the program's process ended ({ended_status()}) before it finished running "
                       "(sys.exit/os._exit or a hook ended it early)")
    if first[0] == "error":
        verdict(False, f"{first[1]} (raised in the program)")
    names = first[1]

    def proxy(name):
        def call(*args, **kwargs):
            try:
                _send(req_w, (name, args, kwargs))
            except ValueError:
                raise TypeError(f"the tests passed {name}() an argument that can't be sent to the program") from None
            except OSError:
                raise ProgramExit(f"the program's process ended ({ended_status()}) before {name}() returned") from None
            reply = _recv(resp_r)
            if reply is None:
                raise ProgramExit(f"the program's process ended ({ended_status()}) during {name}()")
            if reply[0] == "ok":
                return reply[1]
            kind, text = reply[1], reply[2]
            if kind in _ITERATION_ENDS:  # map()/filter()/zip() in a test would stop early, quietly (PEP 479 covers
                # generators only): a failure, as a generator's would be
                raise RuntimeError(f"{name}() raised {kind}" + (f": {text}" if text != kind else ""))
            cls = getattr(builtins, kind, None)
            if isinstance(cls, type) and issubclass(cls, Exception) and cls.__module__ == "builtins":
                try:
                    exc = cls(text)
                except Exception:
                    exc = RuntimeError(text)
                raise exc
            if kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
                raise ProgramExit(f"{text} inside {name}()")
            raise RuntimeError(f"{text}")

        call.__name__ = name
        return call

    entry = cfg.get("entry_point")
    stage = "the tests"
    try:
        # The program's functions the tests may call. With an entry point only that one (the tests get it as
        # `candidate`; the setup's helpers stay the setup's); without one, every function the program defines
        # (over the setup's stubs), but never a builtin's name: a program's own `abs` or `len` must not stand
        # in for the builtin the tests use.
        replaceable = _stubs(first_job.get("setup") or "")
        for name in names if isinstance(names, list) else ():
            if not (isinstance(name, str) and name.isidentifier()):
                continue
            # what the setup bound stays the setup's (an import such as `isclose`, a helper it defines in
            # full), but for the stubs it leaves the program to write
            ours = name in tests_ns and name not in replaceable
            if name == entry or (not entry and not hasattr(builtins, name) and not ours):
                tests_ns[name] = proxy(name)
        if job.get("tests"):
            exec(_trusted_source(job["tests"], "<tests>"), tests_ns)
        if entry:
            stage = f"check({entry})"
            if entry not in names:
                verdict(False, f"NameError: {entry!r} is not defined by the program")
            if not callable(tests_ns.get("check")):
                verdict(False, "NameError: the tests define no check()")
            tests_ns["check"](proxy(entry))
    except BaseException as exc:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        verdict(False, f"{_describe(exc)} (raised in {stage})")
    verdict(True)


def _session(cfg):
    import ast
    import subprocess
    import traceback

    proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
    proto_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    tmp = cfg.get("capture_dir") or os.environ.get("TMPDIR") or "/tmp"
    out_path, err_path = os.path.join(tmp, ".session-stdout"), os.path.join(tmp, ".session-stderr")
    cap = int(cfg.get("max_output", 16384))
    repr_cap = int(cfg.get("max_value", 4096))
    ns = _fresh_main()

    def read_capped(path):
        with open(path, "rb") as fh:
            data = fh.read(cap + 1)
            size = os.fstat(fh.fileno()).st_size
        text = data[:cap].decode("utf-8", "replace")
        if size > cap:
            text += f"\n[output truncated: {size} bytes, showing the first {cap}]"
        return text

    def redirect():
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, path in ((1, out_path), (2, err_path)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)

    def respond(payload):
        sys.stdout.flush()
        sys.stderr.flush()
        payload["stdout"], payload["stderr"] = read_capped(out_path), read_capped(err_path)
        os.write(proto_out, (json.dumps(payload) + "\n").encode())

    def run_code(code):
        value, error = None, None
        try:
            tree = ast.parse(code, "<cell>", "exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<cell>", "exec"), ns)
            if last is not None:
                result = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
                if result is not None:
                    value = repr(result)
                    if len(value) > repr_cap:
                        value = value[:repr_cap] + f"... [repr truncated: {len(value)} characters]"
        except BaseException as exc:  # SystemExit included: the session goes on
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            cell = [ln for ln in tb if "_inner.py" not in ln]  # the traceback from the user's code on
            sys.stderr.write("".join(cell))
            error = _describe(exc)
        return {"value": value, "error": error, "timed_out": False}

    def run_bash(command):
        sys.stdout.flush()
        rc = subprocess.call(["bash", "-c", command], stdin=subprocess.DEVNULL)
        return {"value": None, "returncode": rc, "error": f"exit status {rc}" if rc else None, "timed_out": False}

    os.write(proto_out, (json.dumps({"ready": True, "pid": os.getpid()}) + "\n").encode())
    for line in proto_in:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        redirect()
        if req.get("op") == "bash":
            payload = run_bash(req.get("command", ""))
        else:
            payload = run_code(req.get("code", ""))
        respond(payload)
    os._exit(0)


def main():
    cfg = json.loads(sys.argv[1])
    mode = sys.argv[2]
    _apply(cfg, guard=mode != "harness")
    if mode == "exec":
        argv = sys.argv[3:]
        os.execvp(argv[0], argv)
    sys.argv = [os.path.abspath("main.py")]
    if mode == "run":
        sys.path.insert(0, os.getcwd())
        import runpy

        runpy.run_path("main.py", run_name="__main__")
    elif mode == "harness":  # the work folder goes on sys.path in the program's process only
        _harness(cfg)
    elif mode == "session":
        sys.path.insert(0, os.getcwd())
        _session(cfg)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
