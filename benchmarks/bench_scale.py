"""Memory and CPU of one `evalpipe run` as the partition grows: 10k, 100k, 1M samples (issue 15, bounded memory).

Each size runs the echo pipeline end to end from the CLI, as a user does (`python -m evalpipe.cli.main run`, a temp
DAGSTER_HOME and config, run artifacts on, a `slice_by` attribute so metrics have slices), in a fresh measuring
process whose RUSAGE_CHILDREN gives the peak RSS of the largest process of the run (the CLI, or a Dagster step
process) and the CPU (user+sys) of all of them. The same sizes can also run the code of another commit (a git
worktree) as the baseline, in the same invocation:

    .venv/bin/python benchmarks/bench_scale.py --sizes 10000,100000,1000000 --baseline /tmp/base --baseline-sizes 10000,100000
    git worktree add /tmp/base <commit before the streaming change>   # for --baseline

Targets (issue 15): 1,000,000 samples with peak RSS <= 2 GB and end-to-end CPU <= 0.3 ms per sample.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = ("alpha", "beta", "gamma", "delta")


def write_config(work: Path, n: int, batch_rows: int | None) -> Path:
    data = work / "scale.jsonl"
    with data.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"s{i:07d}", "question": f"What is {i} plus {i}?", "answer": str(2 * i),
                                 "category": CATEGORIES[i % len(CATEGORIES)]}) + "\n")
    cfg = work / "evals.yaml"
    extra = f"stream_batch_rows: {batch_rows}\n" if batch_rows else ""
    cfg.write_text(f"benchmarks:\n  scale:\n    adapter: file\n    splits: {{test: {{path: {data}}}}}\n"
                   "    options: {columns: {prompt: question, target: answer, id: id}, slice_by: [category]}\n"
                   "    metrics: [exact_match]\n"
                   "models:\n  echo: {runner: echo, reply: target}\n"
                   "default_models: [echo]\ndefault_benchmarks: [scale]\nartifacts: {enabled: true}\n" + extra)
    return cfg


def measure(spec: dict) -> dict:
    """Run in a fresh process: its RUSAGE_CHILDREN covers exactly this one run (all descendants)."""
    t0 = time.perf_counter()
    out = subprocess.run(spec["cmd"], env=spec["env"], cwd=spec["cwd"], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rc": out.returncode, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_mb": ru.ru_maxrss / 1024, "tail": (out.stdout + out.stderr)[-3000:]}


def run_once(code: Path, n: int, batch_rows: int | None, keep: bool) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"evalpipe-scale-{n}-"))
    try:
        cfg = write_config(work, n, batch_rows)
        home = work / "home"
        home.mkdir()
        shutil.copy(code / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(code)}
        env.pop("EVALS_WAREHOUSE", None)
        env.pop("EVALS_ARTIFACTS", None)
        spec = {"cmd": [sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress"], "env": env, "cwd": str(code)}
        res = subprocess.run([sys.executable, __file__, "--measure", json.dumps(spec)], capture_output=True,
                             text=True, check=True)
        r = json.loads(res.stdout.strip().splitlines()[-1])
        if r["rc"] != 0:
            raise SystemExit(f"{code} at n={n} failed (exit {r['rc']}):\n{r['tail']}")
        import pyarrow.parquet as pq

        metrics = [f for f in (home / "warehouse" / "metrics").rglob("part.parquet") if "_schema" not in str(f)]
        rows = pq.read_table(metrics[0]).to_pylist()
        em = [x for x in rows if x["metric"] == "exact_match" and x["slice"] == "all"][0]
        if em["n"] != n or em["value"] != 1.0:
            raise SystemExit(f"{code} at n={n}: exact_match n={em['n']} value={em['value']}, expected n={n} value=1")
        samples = sum(1 for _ in open(next((home / "artifacts").rglob("latest")) / "samples.jsonl"))
        if samples != n:
            raise SystemExit(f"{code} at n={n}: samples.jsonl has {samples} lines")
        return r
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated sample counts (1000000 takes minutes)")
    ap.add_argument("--baseline", default=None, help="a worktree of the code before the change (same sizes table)")
    ap.add_argument("--baseline-sizes", default="10000,100000")
    ap.add_argument("--batch-rows", type=int, default=None, help="stream_batch_rows in the config (default: its default)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folders")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    plan = [("this tree", ROOT, [int(x) for x in args.sizes.split(",") if x])]
    if args.baseline:
        plan.insert(0, ("baseline", Path(args.baseline).resolve(), [int(x) for x in args.baseline_sizes.split(",") if x]))
    load = os.getloadavg()
    results = []
    for label, code, sizes in plan:
        for n in sizes:
            r = run_once(code, n, args.batch_rows if label == "this tree" else None, args.keep)
            results.append((label, n, r))
            print(f"{label} n={n}: wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB",
                  file=sys.stderr, flush=True)
    print(f"\nload average at start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f} (2 cores shared)\n")
    print("| code | samples | wall (s) | CPU (s) | CPU ms/sample | marginal CPU ms/sample | peak RSS (MB) | "
          "marginal RSS KB/sample |")
    print("|---|---|---|---|---|---|---|---|")
    prev: dict[str, tuple[int, dict]] = {}
    for label, n, r in results:
        marg_cpu = marg_rss = "-"
        if label in prev:
            pn, pr = prev[label]
            marg_cpu = f"{(r['cpu_s'] - pr['cpu_s']) * 1000 / (n - pn):.3f}"
            marg_rss = f"{(r['peak_rss_mb'] - pr['peak_rss_mb']) * 1024 / (n - pn):.2f}"
        prev[label] = (n, r)
        print(f"| {label} | {n:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['cpu_s'] * 1000 / n:.3f} | {marg_cpu} | "
              f"{r['peak_rss_mb']:.0f} | {marg_rss} |")
    print("\ntargets (issue 15): 1,000,000 samples with peak RSS <= 2048 MB and CPU <= 0.3 ms/sample")


if __name__ == "__main__":
    main()
