"""A sweep on the celery executor (issue 31): two dagster-celery workers, Postgres as the Dagster instance's storage,
Redis as the broker, one endpoint budget (`rate_limits.limits.<api_base>.max_in_flight`) kept in a shared store
(Redis or Postgres) across both workers.

Each round starts its own services (PostgreSQL, redis-server: tests/helpers/services.py), a loopback endpoint with a
fixed latency (benchmarks/mock_server.py), two `dagster-celery worker`s (`--concurrency=1` each) and the webserver +
daemon of `make dev` (benchmarks/bench_ui.py DagsterDev), then launches the UI's "Launch backfill" over M models x
1 split of S samples. The daemon runs it as the assets' BackfillPolicy says (`sweep_batch_partitions` per run, at
most 2 model-calling runs at once: dagster_home/dagster.yaml), each run's steps on the celery workers.

Measured as benchmarks/bench_sweep.py measures throughput (its helpers): ideal wall = requests x latency / allowed
in flight (the endpoint's max_in_flight), over the endpoint's busy window (first request's arrival to last reply),
and over the whole backfill wall; the most requests the endpoint saw at once (never above the budget).

    .venv/bin/python benchmarks/bench_celery.py [--sweep 8x20] [--latency 1.5] [--in-flight 16] [--concurrency 8]
        [--batch 4] [--store redis|postgres] [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_sweep import (arrivals, endpoint_ratio, free_port, keys_of, prepare, sweep_config,  # noqa: E402
                                    ui)
from benchmarks.bench_ui import DagsterDev, make_home, wait_idle  # noqa: E402
from benchmarks.common import (check_repeat, load, machine, median_row, target_line, write_json)  # noqa: E402

TARGET = 0.8  # ideal / endpoint busy window (issue 31's throughput target)


def peak_in_flight(times: list[float], latency: float) -> int:
    """The most requests under way at once at an endpoint with a fixed latency: arrivals less than `latency` apart
    overlapped."""
    times, best, lo = sorted(times), 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - latency * 0.95:  # (a margin for the mock's own timing)
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def instance_yaml(postgres_url: str) -> str:
    """dagster_home/dagster.yaml (the run queue and its limits, the daemon's intervals) with Postgres storage in
    place of the SQLite one: what a deployment of several machines runs (docs/deployment.md)."""
    text = (REPO / "dagster_home" / "dagster.yaml").read_text()
    text = text.split("\n# Dagster's own SQLite storage")[0]
    return text + f"\nstorage:\n  postgres:\n    postgres_url: {postgres_url}\n"


def start_workers(env: dict[str, str], root: Path, broker: str, n: int = 2) -> list[subprocess.Popen]:
    bindir = Path(sys.executable).parent
    celery_yaml = root / "celery.yaml"
    # late acknowledgement: a worker busy with a step reserves no second one (with Celery's default early ack, one
    # worker can hold both runs' steps and run them one after the other while the other worker idles)
    celery_yaml.write_text(f"execution:\n  config:\n    broker: {broker}\n    backend: {broker}\n"
                           "    config_source: {task_acks_late: true}\n")
    logs = [root / f"worker{i}.log" for i in range(n)]
    workers = [subprocess.Popen([str(bindir / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y",
                                 str(celery_yaml), "-n", f"w{i}", "--", "--concurrency=1"], cwd=REPO, env=env,
                                stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
               for i, log in enumerate(logs)]
    deadline = time.monotonic() + 300
    while not all("ready" in log.read_text() for log in logs):
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            stop(workers)
            raise RuntimeError("celery workers did not start: " + " | ".join(log.read_text()[-800:] for log in logs))
        time.sleep(0.5)
    return workers


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def one_round(r: int, models: int, samples: int, latency: float, in_flight: int, concurrency: int, batch: int,
              store: str) -> dict:
    from tests.helpers.mock_servers import mock_server_process
    from tests.helpers.services import postgres_server, redis_server

    root = Path(tempfile.mkdtemp(prefix=f"bench_celery_{r}_"))
    with ExitStack() as stack:
        pg = stack.enter_context(postgres_server())
        broker = stack.enter_context(redis_server())
        port = stack.enter_context(mock_server_process(latency))
        api_base = f"http://127.0.0.1:{port}/v1"
        lines = "".join(f"  m{i}:\n    runner: litellm\n    model: hosted_vllm/mock-{i}\n    api_base: {api_base}\n"
                        f"    params: {{max_tokens: 8}}\n    options: {{concurrency: {concurrency}}}\n"
                        for i in range(models))
        config = sweep_config(root, 1, samples, models=lines.rstrip("\n"), batch=batch, in_flight=None)
        config += (f"rate_limits:\n  store: {broker if store == 'redis' else pg.replace('+psycopg2', '')}\n"
                   f"  limits:\n    {api_base}: {{max_in_flight: {in_flight}}}\n")
        env = make_home(root, config)
        Path(env["DAGSTER_HOME"], "dagster.yaml").write_text(instance_yaml(pg))
        env.update({"EVALS_EXECUTOR": "celery", "EVALS_CELERY_BROKER": broker,
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
        bindir = Path(sys.executable).parent
        subprocess.run([str(bindir / "dagster"), "instance", "migrate"], cwd=REPO, env=env, check=True,
                       capture_output=True, timeout=300)
        workers = start_workers(env, root, broker)
        stack.callback(stop, workers)
        splits, names = keys_of(config)
        prepare(env, splits, names)
        dev = stack.enter_context(DagsterDev(env, free_port(), log=root / "dev.log"))
        wait_idle(dev.url)
        before = len(arrivals(port))
        wall = ui(dev.url, splits, names)
        times = arrivals(port)[before:]
        if len(times) != models * samples:
            raise RuntimeError(f"{len(times)} requests reached the endpoint, not {models * samples} (logs: {root})")
        logs = [(root / f"worker{i}.log").read_text() for i in range(2)]
        took = [log.count("succeeded") for log in logs]
    ideal = models * samples * latency / in_flight
    ratio, avg = endpoint_ratio(times, latency, in_flight)
    row = {"wall_s": wall, "window_s": max(times) + latency - min(times), "ideal_s": ideal, "ratio": ratio,
           "in_flight": avg, "peak": peak_in_flight(times, latency), "raw_ratio": ideal / wall,
           "tasks_per_worker": took}
    print(f"round {r}: backfill {wall:.1f} s, endpoint busy {row['window_s']:.1f} s, {avg:.1f} in flight on average, "
          f"peak {row['peak']} of {in_flight}, ideal {ideal:.1f} s: ideal / busy {ratio:.2f}; celery tasks per worker "
          f"{took}", flush=True)
    return row


def missing_services() -> str | None:
    """Why this machine can't run the benchmark (the Debian packages the distributed tests use), or None."""
    import glob
    import shutil

    if shutil.which("redis-server") is None:
        return "redis-server is not installed (apt-get install -y redis-server)"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return "PostgreSQL is not installed (apt-get install -y postgresql)"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default="8x20", help="MODELSxSAMPLES (one split)")
    ap.add_argument("--latency", type=float, default=1.5)
    ap.add_argument("--in-flight", type=int, default=16, help="the endpoint's max_in_flight")
    ap.add_argument("--concurrency", type=int, default=8, help="each model's own concurrency")
    ap.add_argument("--batch", type=int, default=4, help="sweep_batch_partitions: partitions per Dagster run")
    ap.add_argument("--store", choices=["redis", "postgres"], default="redis", help="rate_limits.store")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    check_repeat(args.repeat)
    why = missing_services()
    if why:
        print(f"bench_celery: skipped: {why}")
        return 0
    m, s = (int(x) for x in args.sweep.lower().split("x"))
    rows = [one_round(r, m, s, args.latency, args.in_flight, args.concurrency, args.batch, args.store)
            for r in range(args.repeat)]
    got = median_row(rows, ["wall_s", "window_s", "ratio", "in_flight", "raw_ratio"])
    peak = max(r["peak"] for r in rows)
    markdown = (f"celery executor, 2 workers (Postgres instance, Redis broker), {m} models x {s} samples, "
                f"{args.latency:g} s latency, endpoint max_in_flight {args.in_flight} ({args.store} store), "
                f"{args.batch} partitions per run: ideal {got['ideal_s']:.1f} s; the endpoint busy "
                f"{got['window_s']:.1f} s, {got['in_flight']:.1f} in flight on average, at most {peak} at once: "
                f"ideal / busy {got['ratio']:.2f}; the whole backfill {got['wall_s']:.1f} s: ideal / wall "
                f"{got['raw_ratio']:.2f}\n\n{machine()}; medians of {len(rows)} rounds; load average {load()} "
                f"at the end")
    targets = [target_line("celery, ideal / endpoint busy window (fixed costs out)", got["ratio"], "ideal", TARGET,
                           higher_is_better=True),
               f"- celery, most requests at once at the endpoint: {peak} (budget {args.in_flight}): "
               f"{'kept' if peak <= args.in_flight else 'EXCEEDED'}"]
    print(markdown + "\n" + "\n".join(targets))
    write_json(args.json, "celery", markdown, targets, rounds=rows, median=got)
    return 0 if peak <= args.in_flight else 1


if __name__ == "__main__":
    sys.exit(main())
