"""Memory and CPU of one `evalpipe run` as the partition grows: 10k, 100k, 1M samples (issue 15, bounded memory).

Each size runs the echo pipeline end to end from the CLI, as a user does (`python -m evalpipe.cli.main run`, a temp
DAGSTER_HOME and config, run artifacts on, a `slice_by` attribute so metrics have slices), in a fresh measuring
process whose RUSAGE_CHILDREN gives the peak RSS of the largest process of the run (the CLI, or a Dagster step
process) and the CPU (user+sys) of all of them. The same sizes can also run the code of another commit (a git
worktree) as the baseline, in the same invocation:

    .venv/bin/python benchmarks/bench_scale.py --sizes 10000,100000,1000000 --baseline /tmp/base --baseline-sizes 10000,100000
    git worktree add /tmp/base <commit before the streaming change>   # for --baseline

`--modes cold,warm` measures each size both ways, in rounds of a rotating order (`--repeat`, medians): `cold` is the
plain CLI run; `warm` is the same command with `evalpipe serve` already listening in that DAGSTER_HOME (started
before the clock, as a user who keeps it running would have it; evalpipe/cli/warm.py): its CPU is the client's plus
what the served child reports in the server's log (the server's own imports are not counted, as in
bench_light_run.py); its peak RSS is not known (the child is the server's, not the client's).
`make bench` runs `--sizes 10000 --modes cold,warm --repeat 3` for issue 24's target.

Targets: issue 15, 1,000,000 samples with peak RSS <= 2 GB and end-to-end CPU <= 0.3 ms per sample; issue 24, 10k
samples under 0.2 ms CPU per sample end to end.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import (check_repeat, load, machine, rotated, served_cpu, start_warm_server,  # noqa: E402
                               stop_warm_server,
                               today, write_json)

CATEGORIES = ("alpha", "beta", "gamma", "delta")
TARGET_10K_MS = 0.2  # issue 24: 10k samples under 0.2 ms CPU per sample end to end


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


def run_once(code: Path, n: int, batch_rows: int | None, keep: bool, warm: bool = False) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"evalpipe-scale-{n}-"))
    server = None
    try:
        cfg = write_config(work, n, batch_rows)
        home = work / "home"
        home.mkdir()
        shutil.copy(code / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(code)}
        env.pop("EVALS_WAREHOUSE", None)
        env.pop("EVALS_ARTIFACTS", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's interpreter: .pyc files written and reused
        env.pop("EVALS_WARM", None)
        if warm:
            log = home.parent / "serve.log"
            server = start_warm_server(env, code, home, log)
        else:
            env["EVALS_WARM"] = "0"
        spec = {"cmd": [sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress"], "env": env, "cwd": str(code)}
        res = subprocess.run([sys.executable, __file__, "--measure", json.dumps(spec)], capture_output=True,
                             text=True, check=True)
        r = json.loads(res.stdout.strip().splitlines()[-1])
        if r["rc"] != 0:
            raise SystemExit(f"{code} at n={n} failed (exit {r['rc']}):\n{r['tail']}")
        if server is not None:
            r["cpu_s"] += served_cpu(log)
            r["peak_rss_mb"] = None  # the served child's is not the client's
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
        if server is not None:
            stop_warm_server(server)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated sample counts (1000000 takes minutes)")
    ap.add_argument("--modes", default="cold", help="comma list of: cold (the plain CLI run), warm (with "
                                                     "`evalpipe serve` running)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds; each figure is the median (the modes rotate)")
    ap.add_argument("--baseline", default=None, help="a worktree of the code before the change (same sizes table)")
    ap.add_argument("--baseline-sizes", default="10000,100000")
    ap.add_argument("--batch-rows", type=int, default=None, help="stream_batch_rows in the config (default: its default)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folders")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return
    check_repeat(args.repeat)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or set(modes) - {"cold", "warm"}:
        raise SystemExit(f"--modes {args.modes!r}: choose from cold, warm (comma list)")
    plan = [(f"this tree, {m}", ROOT, [int(x) for x in args.sizes.split(",") if x], m == "warm") for m in modes]
    if args.baseline:
        plan.insert(0, ("baseline", Path(args.baseline).resolve(),
                        [int(x) for x in args.baseline_sizes.split(",") if x], False))
    load_before = load()
    runs: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.repeat):
        for label, code, sizes, warm in rotated(plan, r):
            for n in sizes:
                got = run_once(code, n, args.batch_rows if label != "baseline" else None, args.keep, warm)
                runs.setdefault((label, n), []).append(got)
                print(f"round {r + 1}: {label} n={n}: wall {got['wall_s']:.1f} s, CPU {got['cpu_s']:.1f} s, "
                      f"peak RSS {fmt(got['peak_rss_mb'], '.0f')} MB", file=sys.stderr, flush=True)
    results = []
    for label, _, sizes, _ in plan:
        for n in sizes:
            got = runs[(label, n)]
            rss = [x["peak_rss_mb"] for x in got if x["peak_rss_mb"] is not None]
            results.append((label, n, {"wall_s": statistics.median(x["wall_s"] for x in got),
                                       "cpu_s": statistics.median(x["cpu_s"] for x in got),
                                       "peak_rss_mb": statistics.median(rss) if rss else None, "runs": got}))
    lines = [f"One `evalpipe run` of the echo pipeline from the CLI (run artifacts on, a slice attribute), each figure "
             f"the median of {args.repeat} round(s) in a rotating order; seconds on {machine()}, load average "
             f"{load_before} before / {load()} after, {today()}", "",
             "| code | samples | wall (s) | CPU (s) | CPU ms/sample | marginal CPU ms/sample | peak RSS (MB) | "
             "marginal RSS KB/sample |", "|---|---|---|---|---|---|---|---|"]
    prev: dict[str, tuple[int, dict]] = {}
    for label, n, r in results:
        marg_cpu = marg_rss = "-"
        if label in prev:
            pn, pr = prev[label]
            marg_cpu = f"{(r['cpu_s'] - pr['cpu_s']) * 1000 / (n - pn):.3f}"
            if r["peak_rss_mb"] is not None and pr["peak_rss_mb"] is not None:
                marg_rss = f"{(r['peak_rss_mb'] - pr['peak_rss_mb']) * 1024 / (n - pn):.2f}"
        prev[label] = (n, r)
        lines.append(f"| {label} | {n:,} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['cpu_s'] * 1000 / n:.3f} | "
                     f"{marg_cpu} | {fmt(r['peak_rss_mb'], '.0f')} | {marg_rss} |")
    targets = []
    for label, n, r in results:
        if n == 10_000 and label != "baseline":
            per = r["cpu_s"] * 1000 / n
            targets.append(f"- 10k samples end to end ({label.split(', ')[1]}), CPU per sample: {per:.3f} ms "
                           f"(target < {TARGET_10K_MS:g} ms): {'met' if per < TARGET_10K_MS else 'not met'}")
    md = "\n".join(lines)
    print("\n" + md + ("\n\n" + "\n".join(targets) if targets else ""))
    print("\ntargets (issue 15): 1,000,000 samples with peak RSS <= 2048 MB and CPU <= 0.3 ms/sample")
    write_json(args.json, "scale", md, targets, sizes=args.sizes, modes=modes, repeat=args.repeat,
               rows=[{"code": label, "n": n, **r} for label, n, r in results])


if __name__ == "__main__":
    main()
