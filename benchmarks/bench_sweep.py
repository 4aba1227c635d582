"""Sweeps (issue 31): many cached (benchmark_split, model) partitions from the CLI and from the UI, and throughput
against an endpoint with latency.

- Orchestration: a grid of cached partitions (echo models, 5 samples each, journaled first: no model calls) of 2, 40
  and 400 partitions, `evalpipe run` against a UI backfill of the chain over the same partitions (GraphQL
  `launchPartitionBackfill`; the daemon runs it in batches of `sweep_batch_partitions`, each a spawned process).
  Per extra partition: the slope between the smallest and the largest size.
- Throughput: M models x S samples against benchmarks/mock_server.py with L s latency, `concurrency: C` per model:
  ideal wall = requests x latency / (M x C). Fixed costs taken out: ideal over the endpoint's busy window, from
  the first request's arrival to the last one's reply (the mock's GET /stats), which is the average in flight
  over the allowed; beside it ideal over the whole cold wall.
Medians of --repeat rounds (default 3), the order rotated each round (benchmarks/common.py).

    .venv/bin/python benchmarks/bench_sweep.py [--sizes 2,40,400] [--throughput 40x40] [--latency 2]
        [--concurrency 8] [--repeat 3] [--json out.json] [--no-ui]
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_ui import (CHAIN, DagsterDev, launch_backfill, make_home, wait_backfill,  # noqa: E402
                                 wait_idle)
from benchmarks.common import check_repeat, load, machine, median_row, rounds, target_line, write_json  # noqa: E402

TARGETS = {"ui_over_cli": 1.3, "per_partition_s": 0.1, "throughput": 0.8}
WHERE = {"cli": "CLI", "ui": "UI backfill"}
LARGE = 400  # partitions from which --large-repeat rounds apply


def grid(n: int) -> tuple[int, int]:
    """(splits, models) for n partitions: about as many models as splits x 8 (a sweep of checkpoints)."""
    splits = max(1, round((n / 8) ** 0.5)) if n >= 8 else 1
    while n % splits:
        splits -= 1
    return splits, n // splits


def sweep_config(root: Path, n: int, samples: int = 5, models: str | None = None, batch: int = 64,
                 in_flight: int | None = 64, splits: int | None = None) -> str:
    splits, n_models = grid(n) if splits is None else (splits, n // splits)
    data = root / "data"
    data.mkdir(exist_ok=True)
    lines = ["benchmarks:", "  sw:", "    adapter: file", "    splits:"]
    for s in range(splits):
        f = data / f"s{s}.jsonl"
        f.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {s}-{i}", "answer": "x"}) + "\n"
                             for i in range(samples)))
        lines.append(f"      s{s}: {{path: {json.dumps(str(f))}}}")
    lines += ["    options:", "      columns: {prompt: question, target: answer, id: id}", "    metrics: [exact_match]",
              "models:"]
    lines += [models] if models else [f"  echo{m}: {{runner: echo}}" for m in range(n_models)]
    lines += [f"sweep_batch_partitions: {batch}"] + ([f"max_concurrent_partitions: {in_flight}"] if in_flight else [])
    return "\n".join(lines) + "\n"


def keys_of(config: str) -> tuple[list[str], list[str]]:
    import yaml

    raw = yaml.safe_load(config)
    return [f"sw/{s}" for s in raw["benchmarks"]["sw"]["splits"]], list(raw["models"])


def cli(env: dict[str, str], splits: list[str], models: list[str]) -> float:
    args = [sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress"]
    for s in splits:
        args += ["--split", s]
    for m in models:
        args += ["--model", m]
    t = time.monotonic()
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"`evalpipe run` exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    return time.monotonic() - t


def ui(url: str, splits: list[str], models: list[str]) -> float:
    """The sweep as the UI's "Launch backfill" over its partitions (GraphQL launchPartitionBackfill, the chain's
    assets): the daemon runs it in batches (the assets' BackfillPolicy, docs/scale.md "Sweeps")."""
    keys = [f"{s}|{m}" for s in splits for m in models]
    t = time.monotonic()
    backfill = launch_backfill(url, keys, CHAIN)
    if wait_backfill(url, backfill, timeout=3600) != "SUCCESS":
        raise RuntimeError(f"backfill {backfill} failed")
    return time.monotonic() - t


def orchestration(sizes: list[int], repeat: int, with_ui: bool, large_repeat: int | None = None) -> dict:
    """Medians of `repeat` rounds per size; sizes of LARGE partitions or more `large_repeat` rounds (each costs
    minutes)."""
    out: dict = {}
    for n in sizes:
        rounds_n = large_repeat if large_repeat and n >= LARGE else repeat
        root = Path(tempfile.mkdtemp(prefix=f"bench_sweep_{n}_"))
        config = sweep_config(root, n)
        env = make_home(root, config)
        splits, models = keys_of(config)
        cli(env, splits, models)  # journal every partition: later runs call no model
        jobs = {"cli": lambda r: {"wall_s": cli(env, splits, models)}}
        if with_ui:
            with DagsterDev(env, free_port(), log=root / "dev.log") as dev:
                jobs["ui"] = lambda r: (wait_idle(dev.url), {"wall_s": ui(dev.url, splits, models)})[1]
                jobs["cli"] = (lambda job: lambda r: (wait_idle(dev.url), job(r))[1])(jobs["cli"])
                got = rounds(jobs, rounds_n, after_each=lambda k, r, row: print(f"{n} partitions round {r}: {k} "
                                                                               f"{row['wall_s']:.2f} s", flush=True))
        else:
            got = rounds(jobs, rounds_n, after_each=lambda k, r, row: print(f"{n} partitions round {r}: {k} "
                                                                         f"{row['wall_s']:.2f} s", flush=True))
        out[n] = {k: median_row(rows, ["wall_s"])["wall_s"] for k, rows in got.items()}
    return out


def prepare(env: dict[str, str], splits: list[str], models: list[str]) -> None:
    """The partitions registered and the splits' datasets loaded (what the config-sync sensor and a `dataset`
    backfill do), so that a UI backfill of the chain can start."""
    code = ("import sys; from dagster import DagsterInstance; from eval_assets.launch import run_assets, "
            "sync_model_partitions, sync_split_partitions\n"
            f"i = DagsterInstance.get(); sync_split_partitions(i, {splits!r}); sync_model_partitions(i, {models!r})\n"
            f"sys.exit(0 if all(run_assets(['dataset'], s, i).success for s in {splits!r}) else 1)")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"loading the datasets failed: {(done.stderr or done.stdout)[-2000:]}")


def arrivals(port: int) -> list[float]:
    """When each request reached the mock endpoint so far (its GET /stats)."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats", timeout=30) as resp:
        return list(json.loads(resp.read())["times"])


def endpoint_ratio(times: list[float], latency: float, allowed: int) -> tuple[float, float]:
    """(ideal / busy window, average in flight) for one sweep's requests at an endpoint with a fixed latency: the
    busy window runs from the first request's arrival to the last one's reply. Each request is in flight for
    `latency`, so the average in flight over the window is requests x latency / window, and over `allowed` it is
    ideal / window: the sweep's fixed costs before its first request and after its last reply are left out, what
    the orchestration costs while requests should be going is not."""
    if not times:
        return float("nan"), float("nan")
    window = max(times) + latency - min(times)
    in_flight = len(times) * latency / window
    return in_flight / allowed, in_flight


def throughput(models: int, samples: int, latency: float, concurrency: int, repeat: int, with_ui: bool) -> dict:
    """Ideal wall (requests x latency / allowed in flight) over the endpoint's busy window (first request to last
    reply: fixed costs taken out), and over the whole cold wall, from the CLI and (with_ui) as a UI backfill."""
    from tests.helpers.mock_servers import mock_server_process

    rows: dict[str, list] = {"cli": [], "ui": []}
    allowed = models * concurrency
    ideal = models * samples * latency / allowed
    with mock_server_process(latency) as port:
        lines = "".join(f"  m{i}:\n    runner: litellm\n    model: hosted_vllm/mock-{i}\n"
                        f"    api_base: http://127.0.0.1:{port}/v1\n    params: {{max_tokens: 8}}\n"
                        f"    options: {{concurrency: {concurrency}}}\n" for i in range(models))
        for r in range(repeat):
            for path in ["cli", "ui"] if with_ui else ["cli"]:
                root = Path(tempfile.mkdtemp(prefix=f"bench_sweep_tp_{path}_"))
                config = sweep_config(root, 1, samples, models=lines.rstrip("\n"), batch=max(64, models),
                                      in_flight=None)  # (the default: a batch's partitions all at once)
                env = make_home(root, config)
                splits, names = keys_of(config)
                before = len(arrivals(port))
                if path == "cli":
                    cold = cli(env, splits, names)
                else:
                    prepare(env, splits, names)
                    with DagsterDev(env, free_port(), log=root / "dev.log") as dev:
                        wait_idle(dev.url)
                        cold = ui(dev.url, splits, names)
                times = arrivals(port)[before:]
                if len(times) != models * samples:
                    raise RuntimeError(f"{path}: {len(times)} requests reached the endpoint, not {models * samples}")
                ratio, in_flight = endpoint_ratio(times, latency, allowed)
                rows[path].append({"cold_s": cold, "window_s": max(times) + latency - min(times), "ideal_s": ideal,
                                   "ratio": ratio, "in_flight": in_flight, "raw_ratio": ideal / cold})
                print(f"throughput round {r} {path}: {cold:.1f} s wall, endpoint busy {rows[path][-1]['window_s']:.1f}"
                      f" s, {in_flight:.0f} in flight on average of {allowed}, ideal {ideal:.1f} s", flush=True)
    return {path: {**median_row(got, ["cold_s", "window_s", "ratio", "in_flight", "raw_ratio"]), "ideal_s": ideal}
            for path, got in rows.items() if got}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def report(orch: dict, tp: dict | None, shape: str, latency: float, concurrency: int) -> tuple[list[str], list[str]]:
    """(markdown lines, target lines) of the figures: the wall per size, then one table of each figure beside its
    target (also what `--render JSON` prints again from a saved run)."""
    orch = {int(k): v for k, v in orch.items()}
    sizes = sorted(orch)
    small, big = sizes[0], sizes[-1]
    lines = ["| partitions | CLI s | UI s | UI / CLI | target |", "|---|---|---|---|---|"]
    targets: list[str] = []
    for n in sizes:
        u = orch[n].get("ui", float("nan"))
        goal = f"<= {TARGETS['ui_over_cli']}x" if n >= 40 and "ui" in orch[n] else ""
        lines.append(f"| {n} | {orch[n]['cli']:.1f} | {u:.1f} | {u / orch[n]['cli']:.2f}x | {goal} |")
        if goal:
            targets.append(target_line(f"sweep, UI backfill / CLI, {n} cached partitions", u / orch[n]["cli"], "CLI",
                                       TARGETS["ui_over_cli"]))
    rows = ["", "| figure | CLI | UI | target |", "|---|---|---|---|"]
    slopes = {path: (orch[big][path] - orch[small][path]) / (big - small)
              for path in ("cli", "ui") if big > small and path in orch[big]}
    if slopes:
        goal = TARGETS["per_partition_s"]
        verdict = "met" if all(v <= goal for v in slopes.values()) else "**not met**"
        rows.append(f"| orchestration per extra cached partition ({small} -> {big}) | "
                    + " | ".join(f"{slopes[p]:.3f} s" if p in slopes else "-" for p in ("cli", "ui"))
                    + f" | <= {goal} s: {verdict} |")
        for path, slope in slopes.items():
            targets.append(f"- sweep, orchestration per extra cached partition, {WHERE[path]}: {slope:.3f} s (target <= "
                           f"{goal} s): {'met' if slope <= goal else 'not met'}")
    if tp:
        m, n = (int(x) for x in shape.lower().split("x"))
        cell = {p: f"{g['ratio']:.2f} ({g['in_flight']:.0f} in flight on average)" for p, g in tp.items()}
        rows.append(f"| {m} models x {n} samples, {latency:g} s latency, {concurrency} in flight each "
                    f"({m * concurrency} allowed): ideal / the endpoint's busy window | "
                    + " | ".join(cell.get(p, "-") for p in ("cli", "ui")) + f" | >= {TARGETS['throughput']} |")
        rows.append("| the same, ideal / the whole cold wall (fixed costs included) | "
                    + " | ".join(f"{tp[p]['raw_ratio']:.2f}" if p in tp else "-" for p in ("cli", "ui")) + " | |")
        for path, got in tp.items():
            targets.append(target_line(f"sweep throughput, {WHERE[path]}, ideal / endpoint busy window (fixed costs out)",
                                       got["ratio"], "ideal", TARGETS["throughput"], higher_is_better=True))
    if len(rows) > 3:
        lines += rows
    return lines, targets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,40,400")
    ap.add_argument("--throughput", default="40x40", help="MODELSxSAMPLES, or 0 to skip")
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--large-repeat", type=int, default=1,
                    help=f"rounds at {LARGE} partitions or more (default 1: each round costs minutes)")
    ap.add_argument("--no-ui", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--render", type=Path, help="print the tables of a saved --json again; measure nothing")
    args = ap.parse_args(argv)
    if args.render:
        saved = json.loads(args.render.read_text())
        lines, targets = report(saved["orchestration"], saved.get("throughput"), args.throughput, args.latency,
                                args.concurrency)
        print("\n".join(lines) + "\n" + "\n".join(targets))
        return 0
    check_repeat(args.repeat)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    orch = orchestration(sizes, args.repeat, not args.no_ui, args.large_repeat)
    tp = None
    if args.throughput != "0":
        m, n = (int(x) for x in args.throughput.lower().split("x"))
        tp = throughput(m, n, args.latency, args.concurrency, args.repeat, not args.no_ui)
    lines, targets = report(orch, tp, args.throughput, args.latency, args.concurrency)
    large = [n for n in sizes if n >= LARGE]
    rounds_note = f"medians of {args.repeat} rounds" + (
        f" ({', '.join(map(str, large))} partitions: {args.large_repeat} round(s))"
        if large and args.large_repeat and args.large_repeat != args.repeat else "")
    markdown = ("Sweeps, cached partitions (5 splits x N echo models, 5 samples each), `evalpipe run` against a UI "
                "backfill on a webserver and daemon as `make dev` starts them (bench_sweep.py)\n\n"
                + "\n".join(lines) + f"\n\n{machine()}; {rounds_note}; load average {load()} at the end\n\n"
                + "\n".join(targets))
    print(markdown)
    write_json(args.json, "sweep", markdown, targets, orchestration=orch, throughput=tp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
