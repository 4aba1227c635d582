"""The first code that runs inside a sandbox (standard library only; started as `python -I -S _inner.py CFG MODE`).

It sets the resource limits, drops root privileges when it has them (bwrap run by root: the sandbox user is
a random unprivileged uid, so RLIMIT_NPROC counts), installs the audit hook of the `process` backend when
asked to, enables `site` (the venv's packages) only then, and runs one of:

- `exec ARGV...`: replace itself by ARGV (a bash command of a session, a plain program);
- `run`: run `main.py` of the work folder as `__main__` (`run_python`: passed = exit status 0);
- `harness`: the code_execution harness. It reads a one-time nonce from stdin before any user code runs
  (so it is in no argv, environment or file), runs the solution, then the tests, then `check(entry_point)`,
  and only after `check` returned writes `<MARK> <nonce> passed` to stderr and leaves with `os._exit(0)`
  (atexit handlers and finalizers of the user's code never run after the verdict). Any exception, SystemExit
  included, is a failure reported with its reason; a process that dies or exits without the marker fails
  on the host side;
- `session`: a persistent interpreter for one sample, one JSON request per line on stdin, one JSON response
  per line on the original stdout (user output goes to per-call files, so subprocess output is captured too).
"""
import json
import os
import resource
import sys

MARK = "@@evalpipe-harness@@"


def _apply(cfg):
    for name, value in (cfg.get("limits") or {}).items():
        resource.setrlimit(getattr(resource, name), (value, value))
    uid = cfg.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a non-root uid: every capability is dropped too
    if cfg.get("guard"):
        _install_guard(cfg["guard"])
    import site  # the venv's site-packages, only now (its .pth files must not run with the privileges above)

    site.main()


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


def _refuse_tracing(event, args):
    # a tracer can jump over the asserts of check() (frame.f_lineno) or end the run from inside it
    if event in ("sys.settrace", "sys.setprofile"):
        raise PermissionError(f"sandbox harness: {event} is not allowed while the tests run")


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


def _harness(cfg):
    # The nonce first, before any user code; then stdin is gone. It is kept in a pipe (the kernel's buffer),
    # not in a Python object, so walking frames or gc.get_objects() does not find it; it is read back only
    # after check() returned. Code that reads that pipe itself consumes the nonce, so the harness can't
    # confirm the run and it fails.
    import random

    raw = sys.stdin.buffer.readline().strip()
    r, w = os.pipe()
    os.write(w, raw)
    os.close(w)
    top = min(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 4096)
    held = os.dup2(r, random.SystemRandom().randrange(16, max(17, top - 1)), inheritable=False)
    os.close(r)
    del raw
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    write, read, err_fd, exit_ = os.write, os.read, 2, os._exit  # kept before user code can patch os or builtins
    dumps, flush_out, flush_err = json.dumps, sys.stdout.flush, sys.stderr.flush

    def verdict(ok, reason=""):
        try:
            flush_out()
            flush_err()
        except BaseException:
            pass
        try:
            key = read(held, 64).decode("ascii", "replace")
        except BaseException:
            key = ""
        if len(key) != 32:
            ok, reason = False, "the program tampered with the harness (its nonce was read or replaced)"
        line = f"\n{MARK} {key} {'passed' if ok else 'failed'} {dumps(reason)}\n".encode()
        write(err_fd, line)
        exit_(0 if ok else 1)

    sys.addaudithook(_refuse_tracing)
    import builtins
    import traceback

    saved_builtins = dict(builtins.__dict__)
    ns = _fresh_main()
    entry = cfg.get("entry_point")
    stage = "the program"
    try:
        with open("main.py", encoding="utf-8") as fh:
            code = compile(fh.read(), "main.py", "exec")
        exec(code, ns)
        # the user's code may have replaced builtins the tests rely on (abs, len, isinstance, ...)
        builtins.__dict__.clear()
        builtins.__dict__.update(saved_builtins)
        if os.path.exists("tests.py"):
            stage = "the tests"
            with open("tests.py", encoding="utf-8") as fh:
                tests = compile(fh.read(), "tests.py", "exec")
            exec(tests, ns)
        if entry:
            stage = f"check({entry})"
            if "check" not in ns or entry not in ns:
                missing = "check" if "check" not in ns else entry
                verdict(False, f"NameError: {missing!r} is not defined after the program and the tests ran")
            ns["check"](ns[entry])
    except BaseException as exc:  # SystemExit and KeyboardInterrupt included: only a returning check passes
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
    _apply(cfg)
    if mode == "exec":
        argv = sys.argv[3:]
        os.execvp(argv[0], argv)
    sys.argv = [os.path.abspath("main.py")]
    if mode == "run":
        sys.path.insert(0, os.getcwd())
        import runpy

        runpy.run_path("main.py", run_name="__main__")
    elif mode == "harness":
        sys.path.insert(0, os.getcwd())
        _harness(cfg)
    elif mode == "session":
        sys.path.insert(0, os.getcwd())
        _session(cfg)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
