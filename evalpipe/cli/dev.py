"""`make dev`: the Dagster UI and the daemon (sensors, schedules, declarative automation, the run queue).

The two services `dagster dev` wraps, started directly with their current commands (`dagster dev` itself now
prints a notice that `dg dev` supersedes it, and `dg` needs a separate CLI package): `dagster-webserver` and
`dagster-daemon run`, each in its own process group. The first Ctrl-C (or SIGTERM) stops both: SIGTERM to each
group, then SIGKILL to what is left after a few seconds.

    .venv/bin/python -m evalpipe.cli.dev [--host 127.0.0.1] [--port 3000] [--workspace workspace.yaml]

The daemon runs with a short backfill loop (DAEMON_INTERVAL_S, env EVALS_DEV_DAEMON_INTERVAL_S): Dagster's backfill
daemon waits a fixed 30 s between iterations, with no setting, and an asset backfill of `dataset` then the
per-model chain needs one iteration per level, so a two-model backfill launched in the UI sat idle for a minute.
The run queue's and automation's intervals are in dagster_home/dagster.yaml.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_GRACE_S = 5.0
DAEMON_INTERVAL_ENV = "EVALS_DEV_DAEMON_INTERVAL_S"
DAEMON_INTERVAL_S = 1


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def commands(host: str, port: int, workspace: str) -> list[list[str]]:
    return [[_bin("dagster-webserver"), "-w", workspace, "-h", host, "-p", str(port)],
            [sys.executable, "-m", "evalpipe.cli.dev", "daemon", "run", "-w", workspace]]


def daemon(argv: list[str]) -> int:
    """`dagster-daemon ARGV` with the backfill loop's interval shortened (see the module's docstring)."""
    import dagster._daemon.controller as controller  # the constant is read at each loop, from this module
    from dagster._daemon.cli import main as daemon_main

    controller.DEFAULT_DAEMON_INTERVAL_SECONDS = float(os.environ.get(DAEMON_INTERVAL_ENV) or DAEMON_INTERVAL_S)
    sys.argv = ["dagster-daemon", *argv]
    return daemon_main()


def stop(procs: list[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["daemon"]:
        return daemon(argv[1:])
    ap = argparse.ArgumentParser(prog="make dev", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--workspace", default="workspace.yaml")
    args = ap.parse_args(argv)
    env = {**os.environ}
    env.setdefault("DAGSTER_HOME", str(Path("dagster_home").resolve()))
    procs = [subprocess.Popen(cmd, env=env, start_new_session=True) for cmd in commands(args.host, args.port,
                                                                                          args.workspace)]
    stopping = {"now": False}

    def on_signal(signum, frame):  # the first Ctrl-C stops everything
        stopping["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(f"Dagster UI on http://{args.host}:{args.port} (daemon running; Ctrl-C stops both)", flush=True)
    code = 0
    try:
        while not stopping["now"]:
            for p in procs:
                if p.poll() is not None:  # one service died: stop the other too, and say so
                    print(f"{Path(p.args[0]).name} exited with code {p.returncode}; stopping", file=sys.stderr)
                    stopping["now"], code = True, p.returncode or 1
            time.sleep(0.2)
    finally:
        print("stopping the Dagster UI and daemon ...", file=sys.stderr, flush=True)
        stop(procs)
    return code


if __name__ == "__main__":
    sys.exit(main())
