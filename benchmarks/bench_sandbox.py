"""Wall time of HumanEval scoring under each sandbox backend, measured in the same run.

    .venv/bin/python benchmarks/bench_sandbox.py                    # 164 canonical solutions, concurrency 2
    .venv/bin/python benchmarks/bench_sandbox.py --limit 40 --repeat 3 --backends bwrap process

Each round scores the canonical solutions through the `code_execution` metric (the harness: two processes
per sample) under every backend asked for, interleaved (bwrap, process, bwrap, process, ...) so load on the
machine hits both alike. Also timed, as "exit-status rule": the old way, the whole program (prompt, solution,
tests, `check(...)`) as one `run_python` call under `process`, i.e. what scoring cost before issue 12.
Reported: wall time per round (median), per sample, ratio to the process backend and to the old rule, and
the pass count (must be all).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=164, help="problems (default: all 164)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="rounds; the median is reported")
    ap.add_argument("--backends", nargs="+", default=["bwrap", "process"])
    args = ap.parse_args()

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

    contenders = {f"{b} (harness)": (lambda b=b: harness_round(b)) for b in backends}
    contenders["process, exit-status rule (before)"] = exit_status_round
    harness_round(backends[0]) if backends else None  # warm-up: imports, page cache
    times: dict[str, list[float]] = {k: [] for k in contenders}
    passed: dict[str, int] = {}
    for _ in range(args.repeat):
        for name, fn in contenders.items():
            t, n = fn()
            times[name].append(t)
            passed[name] = n
    n = len(problems)
    base = statistics.median(times["process (harness)"]) if "process (harness)" in times else None
    before = statistics.median(times["process, exit-status rule (before)"])
    print(f"HumanEval canonical solutions: {n} problems, concurrency {args.concurrency}, {args.repeat} round(s)")
    print(f"{'contender':38s} {'wall s':>8s} {'ms/sample':>10s} {'x process':>10s} {'x before':>9s} {'passed':>7s}")
    for name, ts in times.items():
        med = statistics.median(ts)
        ratio = f"{med / base:.2f}" if base else "-"
        print(f"{name:38s} {med:8.1f} {1000 * med / n:10.0f} {ratio:>10s} {med / before:9.2f} {passed[name]:>4d}/{n}")


if __name__ == "__main__":
    main()
