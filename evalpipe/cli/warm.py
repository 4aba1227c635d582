"""A warm process for `evalpipe run`: Dagster, pandas, SQLAlchemy and the asset definitions imported once.

A cold `evalpipe run` spends most of its CPU importing (Dagster alone ~1.5-2 s, its storage layer with SQLAlchemy
and alembic ~1 s, pandas ~0.5 s), whatever the size of the run. `evalpipe serve` imports all of that once and
listens on a Unix socket in `$DAGSTER_HOME`; each `evalpipe run` then connects, hands over its arguments,
environment, working folder and its stdin/stdout/stderr (the file descriptors themselves, so progress bars and
colours reach the real terminal), and the server forks a child that runs the command exactly as the cold path would
and reports the exit code. Ctrl-C in the terminal is forwarded to the child.

Nothing is served stale: the server records what its imports depended on (the config file, the source files of
evalpipe and its Dagster code, the environment variables those read at import); a request whose view differs is
refused, the client runs cold, and the server exits so the next `evalpipe serve` starts fresh. `--config` on the
command line, or `EVALS_WARM=0`, always runs cold. Without a server the command runs cold as before.
"""
from __future__ import annotations

import gc
import json
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

import click

from evalpipe.core.procs import restore_environ

SOCKET_NAME = ".evalpipe-warm.sock"
DISABLE_ENV = "EVALS_WARM"  # "0": never use a warm server
CHILD_ENV = "EVALS_WARM_CHILD"  # set in a served child: it must not call the server again
# environment variables that modules read at import time (the config file, whose splits become the partitions;
# Dagster, litellm, Hugging Face, tracing, Python's own): a request whose values differ is not served. Other
# variables (API keys, EVALS_* settings read while running) are simply the client's in the child.
IMPORT_ENV = ("EVALS_CONFIG",)
IMPORT_ENV_PREFIXES = ("DAGSTER_", "LITELLM_", "HF_", "OTEL_", "PYTHON", "TRANSFORMERS_", "TOKENIZERS_")
ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("evalpipe", "eval_assets", "resources", "partitions")
# imported by the server before it forks: what every run needs, plus the runners' and metrics' heavy dependencies
PRELOAD = ("pandas", "pyarrow.parquet", "duckdb", "dagster", "sqlalchemy", "alembic",
           "dagster._core.storage.event_log.sqlite.sqlite_event_log",
           "dagster._core.storage.runs.sqlite.sqlite_run_storage",
           "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
           "evalpipe.cli.main", "evalpipe.cli.run", "evalpipe.cli.progress", "evalpipe.store.instance_storage", "evalpipe.pipeline.stages",
           "evalpipe.runners.echo", "evalpipe.runners.openai_compat", "evalpipe.runners.litellm_runner",
           "evalpipe.metrics", "eval_assets.definitions", "eval_assets.launch",
           # imported lazily during a run (found by diffing sys.modules in a served child)
           "dagster._core.definitions.antlr_asset_selection.antlr_asset_selection",
           "dagster._core.definitions.external_asset", "dagster._core.execution.execute_in_process",
           "dagster._core.executor.in_process", "dagster._core.instance.factory", "dagster._core.instance.runs.run_domain",
           "dagster._core.secrets.env_file", "dagster._core.storage.legacy_storage",
           "dagster._core.storage.local_compute_log_manager", "dagster._core.storage.migration.utils",
           "dagster._core.storage.root", "dagster._core.system_config.composite_descent", "upath", "fsspec",
           "tabulate", "wcwidth", "statistics", "evalpipe.store.models_registry", "evalpipe.store.ratelimit", "evalpipe.core.run_marks",
           "evalpipe.store.objects", "evalpipe.tooleval.gates", "evalpipe.viewer.links")
DEFAULT_IDLE_S = 1800.0


def socket_path(env: dict[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = env.get("DAGSTER_HOME") or str(ROOT / "dagster_home")
    return Path(home).expanduser().resolve() / SOCKET_NAME


def _import_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in IMPORT_ENV or k.startswith(IMPORT_ENV_PREFIXES)}


def _config_file(env: dict[str, str], cwd: str) -> Path:
    path = env.get("EVALS_CONFIG") or str(ROOT / "evals.yaml")
    p = Path(path).expanduser()
    return (p if p.is_absolute() else Path(cwd) / p).resolve()


def _stat(p: Path) -> str:
    try:
        st = p.stat()
        return f"{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return "missing"


def snapshot(env: dict[str, str], cwd: str) -> dict[str, Any]:
    """What the server's imports depended on, as seen from `env` and `cwd`."""
    sources = []
    for d in SOURCE_DIRS:
        for f in sorted((ROOT / d).rglob("*.py")):
            sources.append(f"{f.relative_to(ROOT)}:{_stat(f)}")
    config = _config_file(env, cwd)
    instance_yaml = socket_path(env).parent / "dagster.yaml"  # the instance the server prepared
    return {"config": f"{config}:{_stat(config)}", "instance": f"{instance_yaml}:{_stat(instance_yaml)}",
            "env": _import_env(env), "sources": sources}


def _send(sock: socket.socket, obj: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(obj).encode()
    frame = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(sock, [frame], fds)
    else:
        sock.sendall(frame)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _recv(sock: socket.socket, with_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(sock, 4, with_fds)
        if not head:
            raise ConnectionError("closed")
        head += _recv_exact(sock, 4 - len(head))
    else:
        head = _recv_exact(sock, 4)
    (n,) = struct.unpack("!I", head)
    return json.loads(_recv_exact(sock, n)), fds


def _connect(forget_dead: bool = False) -> socket.socket | None:
    """A connection to the server of this DAGSTER_HOME, or None when none listens (`forget_dead`: then remove a
    socket file a killed server left behind)."""
    path = socket_path()
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
        return sock
    except OSError:
        sock.close()
        if forget_dead:
            path.unlink(missing_ok=True)
        return None


# ---- client -----------------------------------------------------------------------------------------------------
def wants_warm(argv: list[str]) -> bool:
    """Only `evalpipe run` (not --config, which picks another config than the server imported) goes warm."""
    if os.environ.get(DISABLE_ENV) == "0" or os.environ.get(CHILD_ENV):
        return False
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != "run" or any(a == "--config" or a.startswith("--config=") for a in argv):
        return False
    return all(a in ("--debug",) for a in argv[:argv.index("run")])


def run_warm(argv: list[str]) -> int | None:
    """Run `evalpipe <argv>` in the warm server of this DAGSTER_HOME: its exit code, or None when there is no
    server or it would be stale (then the caller runs the command itself)."""
    sock = _connect()
    if sock is None:
        return None
    child: list[int] = []

    def forward(signum: int, _frame: Any) -> None:
        if child:
            os.kill(child[0], signum)

    try:
        sys.stdout.flush()
        sys.stderr.flush()
        _send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
        first, _ = _recv(sock)
        if first.get("stale"):
            return None
        child.append(int(first["pid"]))
        old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            last, _ = _recv(sock)
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        return int(last["exit"])
    except (ConnectionError, OSError, ValueError, KeyError) as exc:
        if not child:  # nothing ran yet: the cold path is safe
            return None
        print(f"error: the warm evalpipe server's run (pid {child[0]}) ended without an exit code ({exc}); "
              f"its output above is all there is; stop the server with `evalpipe serve --stop`", file=sys.stderr)
        return 1
    finally:
        sock.close()


# ---- server -----------------------------------------------------------------------------------------------------
def _serve_one(conn: socket.socket, listener: socket.socket, server_view: dict[str, Any], log: Any,
               cli: click.Group) -> bool:
    """Fork a child for one request; False when the request found the server stale (the server then exits)."""
    request, fds = _recv(conn, with_fds=3)
    env, cwd = dict(request["env"]), str(request["cwd"])
    seen = snapshot(env, cwd)
    if seen != server_view:
        _send(conn, {"stale": True})
        what = [k for k in seen if seen[k] != server_view[k]]
        if "env" in what:
            keys = set(seen["env"]) ^ set(server_view["env"]) | {k for k in seen["env"] if seen["env"][k] != server_view["env"].get(k)}
            what[what.index("env")] = f"env ({', '.join(sorted(keys))})"
        for fd in fds:
            os.close(fd)
        log(f"a request saw other {', '.join(what)} than this server imported: stopping")
        return False
    pid = os.fork()
    if pid:
        for fd in fds:
            os.close(fd)
        from evalpipe.core.redact import redact

        # the log is a file: a key pasted into an argument (refused by the run itself) must not land there
        log(redact(f"serving `evalpipe {' '.join(request['argv'])}` in pid {pid}"))
        return True
    # the child: become the client's process as far as the command can tell, then run it
    code, started, server_log = 1, time.perf_counter(), os.dup(2)
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; the run's subprocesses need waits
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        os.environ[CHILD_ENV] = "1"
        _send(conn, {"pid": os.getpid()})
        try:
            cli.main(args=list(request["argv"]), prog_name="evalpipe", standalone_mode=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001  the child must always report and exit, never return to the server loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            _send(conn, {"exit": code})
            from evalpipe.store import instance_storage

            instance_storage.dispose()  # os._exit skips atexit: fold the WALs back as a normal exit would
            import resource

            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
            os.write(server_log, f"evalpipe serve: pid {os.getpid()} exited {code} after "
                                 f"{time.perf_counter() - started:.2f} s, CPU {cpu:.2f} s\n".encode())
        finally:
            os._exit(code)


def _warm_up(log: Any, cli: click.Group) -> None:
    """One throwaway run before serving: a 1-sample echo run of a split key of this config, with this home's
    dagster.yaml, in a temp DAGSTER_HOME (its own warehouse, journal and artifacts; the env variables are put back
    afterwards). The first run in a process pays one-time costs every forked run would pay again: Dagster's
    instance code and storage classes, imports done on first use, compiled regexes and caches in Dagster, pandas,
    pyarrow and evalpipe (~0.4 s of a served run). Without a split in the config, or with a database server
    storage (no throwaway instance there), only the instance code is started."""
    import contextlib
    import io
    import shutil
    import tempfile

    yaml_file = socket_path().parent / "dagster.yaml"
    text = yaml_file.read_text() if yaml_file.exists() else ""
    import yaml

    settings = json.dumps(yaml.safe_load(text) or {}).lower()  # the settings, not comments that name a server
    if "postgres" in settings or "mysql" in settings:
        return
    from dagster import DagsterInstance

    from evalpipe.store import instance_storage

    from evalpipe.store import warehouse
    from evalpipe.project import load_config

    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "EVALS_CONFIG", "EVALS_WAREHOUSE", "EVALS_ARTIFACTS")}
    tmp = tempfile.mkdtemp(prefix="evalpipe-warm-")
    try:
        splits = list(load_config().splits.values())
        home = Path(tmp, "home")
        home.mkdir()
        (home / "dagster.yaml").write_text(text)
        os.environ["DAGSTER_HOME"] = str(home)
        for k in ("EVALS_WAREHOUSE", "EVALS_ARTIFACTS"):
            os.environ.pop(k, None)
        DagsterInstance.get().dispose()
        if not splits:
            return
        split = splits[0]  # its key must be one of the code's partitions, which come from this config
        data = Path(tmp, "warm.jsonl")
        data.write_text(json.dumps({"id": "w1", "question": "1 + 1?", "answer": "2"}) + "\n")
        config = Path(tmp, "evals.yaml")
        config.write_text(json.dumps({  # JSON is YAML
            "benchmarks": {split.benchmark: {"adapter": "file", "splits": {split.split: {"path": str(data)}},
                                             "options": {"columns": {"prompt": "question", "target": "answer",
                                                                     "id": "id"}},
                                             "metrics": ["exact_match"]}},
            "models": {"warm-up": {"runner": "echo", "reply": "target"}},
            "default_models": ["warm-up"], "default_benchmarks": [split.benchmark],
            "artifacts": {"enabled": True}}))
        os.environ["EVALS_CONFIG"] = str(config)
        sink, code = io.StringIO(), 0
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            try:
                cli.main(args=["run", "--no-progress"], prog_name="evalpipe", standalone_mode=True)
            except SystemExit as exc:
                code = exc.code
        if code:
            last = [line for line in sink.getvalue().splitlines() if line.strip()][-1:] or ["no output"]
            log(f"the warm-up run exited {code} ({last[0][:300]}); serving anyway")
        else:
            log(f"warm-up run of {split.key} (1 sample, echo, in a temp DAGSTER_HOME) done")
    except Exception as exc:  # noqa: BLE001  a failed warm-up only costs speed: serve anyway
        log(f"the warm-up run failed ({type(exc).__name__}: {exc}); serving anyway")
    finally:
        restore_environ(saved)
        instance_storage.dispose()  # no open database connection crosses the fork
        warehouse.close_databases()
        shutil.rmtree(tmp, ignore_errors=True)


def _prepare_instance() -> None:
    """The instance of this DAGSTER_HOME, made once: each served child uses it (eval_assets/launch.get_instance)
    instead of starting one (~0.3 s). Its database connections are closed before any fork; a changed dagster.yaml
    makes the server stale (`snapshot`)."""
    from eval_assets import launch
    from evalpipe.store import instance_storage

    launch.PREPARED_INSTANCE = launch.get_instance()
    instance_storage.dispose()


def serve(idle_s: float = DEFAULT_IDLE_S, log: Any = None, *, cli: click.Group) -> int:
    """Import everything once and serve `evalpipe run` requests until idle for `idle_s` or stale. `cli` is the
    `evalpipe` command group (main.py hands itself over: this module never imports main.py back)."""
    import importlib

    log = log or (lambda msg: print(f"evalpipe serve: {msg}", file=sys.stderr, flush=True))
    path = socket_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
        probe.close()
        log(f"a server already listens on {path}")
        return 2
    except OSError:
        probe.close()
        path.unlink(missing_ok=True)  # left by a server that was killed
    t0 = time.perf_counter()
    view = snapshot(dict(os.environ), os.getcwd())  # before the imports, some of which set variables of their own
    for name in PRELOAD:
        importlib.import_module(name)
    _warm_up(log, cli)
    _prepare_instance()
    from evalpipe.runners import pricing

    pricing._shipped_cost_map()  # litellm's price map (~1 MB of JSON), read once here instead of in every run
    # Everything imported so far lives as long as the server: frozen, a forked run's full collections skip it
    # instead of walking (and, copy-on-write, copying) the whole preloaded heap
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket is the user's own: 0600
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    sock.listen(16)
    sock.settimeout(min(idle_s, 60.0))
    log(f"ready in {time.perf_counter() - t0:.1f} s on {path} (stops after {idle_s:.0f} s idle)")
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                if time.monotonic() - last >= idle_s:
                    log("idle: stopping")
                    return 0
                continue
            last = time.monotonic()
            try:
                with conn:
                    conn.settimeout(None)
                    if not _serve_one(conn, sock, view, log, cli):
                        return 0
            except (ConnectionError, OSError, ValueError) as exc:
                log(f"a request failed before it ran: {exc}")
    finally:
        sock.close()
        path.unlink(missing_ok=True)


def start_background(idle_s: float = DEFAULT_IDLE_S, wait_s: float = 120.0) -> Path:
    """Start `evalpipe serve` detached (its log: $DAGSTER_HOME/logs/warm.log) and wait until it listens."""
    import subprocess

    path = socket_path()
    logs = path.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "warm.log", "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "serve", "--idle-s", str(idle_s)],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
                                cwd=os.getcwd())
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"evalpipe serve exited with {proc.returncode}; see {logs / 'warm.log'}")
        if path.exists():
            return path
        time.sleep(0.1)
    raise RuntimeError(f"evalpipe serve did not listen within {wait_s:.0f} s; see {logs / 'warm.log'}")


def stop() -> bool:
    """Stop the server of this DAGSTER_HOME (an `evalpipe run` in flight finishes); False when none runs."""
    sock = _connect(forget_dead=True)
    if sock is None:
        return False
    try:
        # a request whose view can never match (no such source file) makes the server stop
        r, w = os.pipe()
        _send(sock, {"argv": ["run"], "env": {"EVALS_CONFIG": "/nonexistent/stop"}, "cwd": "/"}, [r, w, w])
        os.close(r)
        os.close(w)
        _recv(sock)
        return True
    except OSError:
        return False
    finally:
        sock.close()
