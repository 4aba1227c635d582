"""Fixed cost of one `evalpipe run`, end to end from the CLI: a 1-sample run, a fully cached re-run of 1000
samples, and the bytes the run writes to Dagster's instance storage (beyond the data: warehouse, journals,
artifacts). Each measurement is taken twice in the same invocation, interleaved:

- `fast`: this repository's `dagster_home/dagster.yaml` (pooled SQLite connections, synchronous=NORMAL:
  evalpipe/instance_storage.py);
- `stock`: the same run on Dagster's default SQLite storage (a dagster.yaml with telemetry off only), the baseline.

    .venv/bin/python benchmarks/bench_light_run.py [--repeat 3] [--n 1000]

Wall and CPU (user+sys of the CLI process and its children) are medians over `--repeat`. Bytes and fsyncs come from
`strace` (when installed) on one extra run per variant. The echo runner answers instantly, so everything
measured is the framework: imports, Dagster runs, storage, warehouse writes.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _config(work: Path, n: int) -> Path:
    data = work / "bench.jsonl"
    with data.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"s{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n")
    cfg = work / "evals.yaml"
    cfg.write_text(f"benchmarks:\n  bench:\n    adapter: file\n    splits: {{test: {{path: {data}}}}}\n"
                   "    options: {columns: {prompt: question, target: answer, id: id}}\n    metrics: [exact_match]\n"
                   "models:\n  echo: {runner: echo, reply: target}\n"
                   "default_models: [echo]\ndefault_benchmarks: [bench]\nartifacts: {enabled: false}\n")
    return cfg


def _home(work: Path, variant: str) -> Path:
    home = work / f"home-{variant}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    if variant == "fast":
        shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    else:
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    subprocess.run([sys.executable, "-c", "from dagster import DagsterInstance; DagsterInstance.get()"],
                   env={**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}, check=True, cwd=ROOT)
    return home


def _cmd(limit: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "evalpipe.cli", "run", "--no-progress"]
    return cmd + (["--limit", str(limit)] if limit else [])


def _timed(cmd: list[str], env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"run failed: {out.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _io(cmd: list[str], env: dict, home: Path) -> dict | None:
    if not shutil.which("strace"):
        return None
    log = home / "strace.log"
    subprocess.run(["strace", "-f", "-y", "-o", str(log), "-e", "trace=write,pwrite64,fsync,fdatasync"] + cmd,
                   env=env, cwd=ROOT, capture_output=True, check=True)
    by, syncs = Counter(), 0
    for line in log.read_text(errors="replace").splitlines():
        m = re.search(r"(?:write|pwrite64)\(\d+<([^>]*)>.*=\s+(\d+)$", line)
        if m and m.group(1).startswith(str(home)):
            rel = Path(m.group(1)).relative_to(home).parts[0]
            by["instance" if rel in ("history", "schedules", "storage") else "data"] += int(m.group(2))
        if re.search(r"f(data)?sync\(\d+<" + re.escape(str(home)), line):
            syncs += 1
    log.unlink()
    return {"instance_mb": by["instance"] / 1e6, "data_mb": by["data"] / 1e6, "fsyncs": syncs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evalpipe-light-"))
    cfg = _config(work, args.n)
    results: dict[str, dict] = {}
    try:
        for variant in ("stock", "fast"):
            results[variant] = {"one": [], "cached": []}
        for _ in range(args.repeat):
            for variant in ("stock", "fast"):  # interleaved: load on the machine hits both alike
                home = _home(work, variant)
                env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(ROOT)}
                results[variant]["one"].append(_timed(_cmd(1), env))
                _timed(_cmd(None), env)  # fill the journal and the warehouse
                results[variant]["cached"].append(_timed(_cmd(None), env))
        for variant in ("stock", "fast"):
            home = _home(work, variant)
            env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(ROOT)}
            results[variant]["io"] = _io(_cmd(1), env, home)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(xs, i):
        return statistics.median(x[i] for x in xs)

    print(f"one `evalpipe run` end to end (echo runner), median of {args.repeat}, both storages in this invocation")
    print("| storage | 1-sample run wall (s) | CPU (s) | cached re-run of "
          f"{args.n} wall (s) | CPU (s) | instance storage written (MB) | fsyncs | data written (MB) |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, label in (("stock", "Dagster default SQLite (baseline)"), ("fast", "evalpipe (instance_storage)")):
        r = results[variant]
        io = r["io"] or {}
        print(f"| {label} | {med(r['one'], 0):.2f} | {med(r['one'], 1):.2f} | {med(r['cached'], 0):.2f} | "
              f"{med(r['cached'], 1):.2f} | {io.get('instance_mb', float('nan')):.2f} | {io.get('fsyncs', '-')} | "
              f"{io.get('data_mb', float('nan')):.2f} |")
    print("targets: 1-sample run <= 2 s, cached re-run of 1000 <= 1.5 s, <= 2 MB written per run beyond the data")


if __name__ == "__main__":
    main()
