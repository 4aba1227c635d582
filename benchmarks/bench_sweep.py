"""Sweeps (issue 31): many cached (benchmark_split, model) partitions from the CLI and from the UI, and throughput
against an endpoint with latency.

- Orchestration: a grid of cached partitions (echo models, 5 samples each, journaled first: no model calls) of 2, 40
  and 400 partitions, `evalpipe run` against the UI's launch of the `evaluate_batch` job (GraphQL
  `launchPipelineExecution`, the run config naming the partitions in batches of `sweep_batch_partitions`; one run
  per batch, each a spawned process under the daemon's queue). Per extra partition: the slope between the smallest
  and the largest size.
- Throughput: M models x S samples against benchmarks/mock_server.py with L s latency, `concurrency: C` per model:
  ideal wall = requests x latency / (M x C); measured with the fixed cost (the same sweep when cached) taken out.
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

from benchmarks.bench_ui import DagsterDev, gql, make_home, wait_idle, wait_run  # noqa: E402
from benchmarks.common import check_repeat, machine, median_row, rounds, target_line, write_json  # noqa: E402

TARGETS = {"ui_over_cli": 1.3, "per_partition_s": 0.1, "throughput": 0.8}
LAUNCH_JOB = """mutation($executionParams: ExecutionParams!) { launchPipelineExecution(executionParams: $executionParams) {
  __typename ... on LaunchRunSuccess { run { id } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""


def grid(n: int) -> tuple[int, int]:
    """(splits, models) for n partitions: about as many models as splits x 8 (a sweep of checkpoints)."""
    splits = max(1, round((n / 8) ** 0.5)) if n >= 8 else 1
    while n % splits:
        splits -= 1
    return splits, n // splits


def sweep_config(root: Path, n: int, samples: int = 5, models: str | None = None, batch: int = 64,
                 in_flight: int = 64, splits: int | None = None) -> str:
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
    lines += [f"sweep_batch_partitions: {batch}", f"max_concurrent_partitions: {in_flight}"]
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


def ui(url: str, splits: list[str], models: list[str], batch: int) -> float:
    """The sweep launched from the UI: the `evaluate_batch` job, one run per batch of partitions (launchpad)."""
    keys = [f"{s}|{m}" for s in splits for m in models]
    t = time.monotonic()
    ids = []
    for i in range(0, len(keys), batch):
        config = {"ops": {"evaluate_partitions": {"config": {"partitions": keys[i:i + batch]}}}}
        params = {"mode": "default", "runConfigData": json.dumps(config),
                  "selector": {"repositoryLocationName": "eval_assets.definitions",
                               "repositoryName": "__repository__", "pipelineName": "evaluate_batch"}}
        got = gql(url, LAUNCH_JOB, {"executionParams": params})["launchPipelineExecution"]
        if got["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(f"launch failed: {got}")
        ids.append(got["run"]["id"])
    for run_id in ids:
        if wait_run(url, run_id, timeout=3600) != "SUCCESS":
            raise RuntimeError(f"run {run_id} failed")
    return time.monotonic() - t


def orchestration(sizes: list[int], repeat: int, with_ui: bool) -> dict:
    out: dict = {}
    for n in sizes:
        root = Path(tempfile.mkdtemp(prefix=f"bench_sweep_{n}_"))
        config = sweep_config(root, n)
        env = make_home(root, config)
        splits, models = keys_of(config)
        cli(env, splits, models)  # journal every partition: later runs call no model
        jobs = {"cli": lambda r: {"wall_s": cli(env, splits, models)}}
        if with_ui:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            with DagsterDev(env, port, log=root / "dev.log") as dev:
                jobs["ui"] = lambda r: (wait_idle(dev.url), {"wall_s": ui(dev.url, splits, models, 64)})[1]
                jobs["cli"] = (lambda job: lambda r: (wait_idle(dev.url), job(r))[1])(jobs["cli"])
                got = rounds(jobs, repeat, after_each=lambda k, r, row: print(f"{n} partitions round {r}: {k} "
                                                                             f"{row['wall_s']:.2f} s", flush=True))
        else:
            got = rounds(jobs, repeat, after_each=lambda k, r, row: print(f"{n} partitions round {r}: {k} "
                                                                         f"{row['wall_s']:.2f} s", flush=True))
        out[n] = {k: median_row(rows, ["wall_s"])["wall_s"] for k, rows in got.items()}
    return out


def throughput(models: int, samples: int, latency: float, concurrency: int, repeat: int) -> dict:
    """Ideal wall (requests x latency / allowed in flight) over the measured wall less the cached run's."""
    from tests.helpers.mock_servers import mock_server_process

    rows = []
    with mock_server_process(latency) as port:
        for r in range(repeat):
            root = Path(tempfile.mkdtemp(prefix="bench_sweep_tp_"))
            lines = "".join(f"  m{i}:\n    runner: litellm\n    model: hosted_vllm/mock-{i}\n"
                            f"    api_base: http://127.0.0.1:{port}/v1\n    params: {{max_tokens: 8}}\n"
                            f"    options: {{concurrency: {concurrency}}}\n" for i in range(models))
            config = sweep_config(root, 1, samples, models=lines.rstrip("\n"), batch=max(64, models),
                                  in_flight=models)
            env = make_home(root, config)
            splits, names = keys_of(config)
            cold = cli(env, splits, names)
            cached = cli(env, splits, names)
            ideal = models * samples * latency / (models * concurrency)
            rows.append({"cold_s": cold, "cached_s": cached, "ideal_s": ideal,
                         "ratio": ideal / max(1e-9, cold - cached)})
            print(f"throughput round {r}: {cold:.1f} s, cached {cached:.1f} s, ideal {ideal:.1f} s", flush=True)
    return median_row(rows, ["cold_s", "cached_s", "ratio"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,40,400")
    ap.add_argument("--throughput", default="40x40", help="MODELSxSAMPLES, or 0 to skip")
    ap.add_argument("--latency", type=float, default=2.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-ui", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    check_repeat(args.repeat)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    orch = orchestration(sizes, args.repeat, not args.no_ui)
    small, big = sizes[0], sizes[-1]
    lines, targets = ["| partitions | CLI s | UI s | UI / CLI |", "|---|---|---|---|"], []
    for n in sizes:
        u = orch[n].get("ui", float("nan"))
        lines.append(f"| {n} | {orch[n]['cli']:.1f} | {u:.1f} | {u / orch[n]['cli']:.2f}x |")
        if n >= 40 and "ui" in orch[n]:
            targets.append(target_line(f"UI / CLI, {n} cached partitions", u / orch[n]["cli"], "CLI",
                                       TARGETS["ui_over_cli"]))
    for path in ("cli", "ui"):
        if big > small and path in orch[big]:
            slope = (orch[big][path] - orch[small][path]) / (big - small)
            lines.append(f"\n{path}: {slope:.3f} s per extra cached partition ({small} -> {big})")
            targets.append(f"- {path} s per extra cached partition: {slope:.3f} (target <= "
                           f"{TARGETS['per_partition_s']}): {'met' if slope <= TARGETS['per_partition_s'] else 'not met'}")
    tp = None
    if args.throughput != "0":
        m, s = (int(x) for x in args.throughput.lower().split("x"))
        tp = throughput(m, s, args.latency, args.concurrency, args.repeat)
        lines.append(f"\nthroughput CLI, {m} models x {s} samples, {args.latency:g} s latency, concurrency "
                     f"{args.concurrency} each: ideal {tp['ideal_s']:.1f} s, measured {tp['cold_s']:.1f} s less "
                     f"{tp['cached_s']:.1f} s cached: ideal/measured {tp['ratio']:.2f}")
        targets.append(target_line("throughput CLI, ideal / measured", tp["ratio"], "ideal", TARGETS["throughput"],
                                   higher_is_better=True))
    markdown = "\n".join(lines) + f"\n\n{machine()}; medians of {args.repeat} rounds"
    print(markdown + "\n" + "\n".join(targets))
    write_json(args.json, "sweep", markdown, targets, orchestration=orch, throughput=tp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
