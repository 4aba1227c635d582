"""Wall time of HumanEval scoring under each sandbox backend, measured in the same run.

    .venv/bin/python benchmarks/bench_sandbox.py                    # 164 canonical solutions, concurrency 2
    .venv/bin/python benchmarks/bench_sandbox.py --limit 40 --repeat 3 --backends bwrap process

Each round scores the canonical solutions through the `code_execution` metric (the harness: two processes
per sample) under every backend asked for, the contenders in an order rotated each round so load on the
machine hits them alike; `--repeat` rounds (default 3), every figure the median, a ratio taken within its round. Also timed, as "exit-status rule": the old way, the whole program (prompt, solution,
tests, `check(...)`) as one `run_python` call under `process`, i.e. what scoring cost before issue 12.
Reported: the ratios to the process backend (the unisolated run) and to the old rule, wall time per round and per
sample with the machine named, and the pass count (must be all). `--json FILE` for benchmarks/readme_speed.py.
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import check_repeat, load, machine, rounds, today, write_json  # noqa: E402

PROCESS, BEFORE = "process (harness)", "process, exit-status rule (before)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=164, help="problems (default: all 164)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the median is reported")
    ap.add_argument("--backends", nargs="+", default=["bwrap", "process"])
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    args = ap.parse_args()
    check_repeat(args.repeat)

    import logging

    logging.getLogger("evalpipe.sandbox").setLevel(logging.ERROR)  # the process backend's warning, once is plenty
    from evalpipe.benchmarks.humaneval import packaged_data_file, read_problems
    from evalpipe.metrics import JudgeInput, build_metric
    from evalpipe.sandbox import backend_status, run_python

    problems = read_problems(packaged_data_file())[: args.limit]
    status = backend_status()
    backends = [b for b in args.backends if status.get(b) is None]
    for b in set(args.backends) - set(backends):
        print(f"skipping {b}: {status.get(b)}")

    def harness_round(backend: str) -> tuple[float, int]:
        m = build_metric({"name": "code_execution", "concurrency": args.concurrency, "sandbox": backend})
        items = [JudgeInput(p["task_id"], p["prompt"], p["canonical_solution"], p["canonical_solution"],
                            metadata={k: p[k] for k in ("prompt", "test", "entry_point", "task_id")}) for p in problems]
        start = time.perf_counter()
        scores = asyncio.run(m.ascore_many(items))
        return time.perf_counter() - start, sum(bool(s.correct) for s in scores)

    def exit_status_round() -> tuple[float, int]:
        programs = [p["prompt"] + p["canonical_solution"] + "\n" + p["test"] + f"\ncheck({p['entry_point']})\n"
                    for p in problems]
        start = time.perf_counter()
        with ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(lambda c: run_python(c, backend="process"), programs))
        return time.perf_counter() - start, sum(r.passed for r in results)

    contenders = {f"{b} (harness)": (lambda r, b=b: harness_round(b)) for b in backends}
    contenders[BEFORE] = lambda r: exit_status_round()
    harness_round(backends[0]) if backends else None  # warm-up: imports, page cache
    load_before = load()
    by = rounds({name: (lambda r, fn=fn: dict(zip(("wall_s", "passed"), fn(r)))) for name, fn in contenders.items()},
                args.repeat)
    n = len(problems)

    def ratio(name: str, to: str) -> str:
        if to not in by:
            return "-"
        return f"{statistics.median(x['wall_s'] / y['wall_s'] for x, y in zip(by[name], by[to])):.2f}"

    header = (f"HumanEval canonical solutions: {n} problems through `code_execution`, concurrency {args.concurrency}, "
              f"each figure the median of {args.repeat} rounds in a rotating order (ratios taken within each round); "
              f"seconds on {machine()}, load average before {load_before}, {today()}")
    lines = ["| contender | x process backend | x exit-status rule (before) | wall (s) | ms/sample | passed |",
             "|---|---|---|---|---|---|"]
    for name, runs in by.items():
        med = statistics.median(x["wall_s"] for x in runs)
        passed = min(x["passed"] for x in runs)
        lines.append(f"| {name} | {ratio(name, PROCESS)} | {ratio(name, BEFORE)} | {med:.1f} | {1000 * med / n:.0f} | "
                     f"{passed}/{n} |")
    targets = []
    if "bwrap (harness)" in by:
        targets.append(f"- bwrap sandbox: {ratio('bwrap (harness)', PROCESS)}x the unisolated process backend, "
                       f"{ratio('bwrap (harness)', BEFORE)}x what scoring cost before (same rounds)")
    md = header + "\n\n" + "\n".join(lines) + ("\n\n" + "\n".join(targets) if targets else "")
    print(md)
    write_json(args.json, "sandbox", md, targets, n=n, repeat=args.repeat, load_before=load_before, rounds=by)


if __name__ == "__main__":
    main()
