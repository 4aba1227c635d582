"""Reading results without Dagster, and the leaderboard at scale (issue 31).

- `sql`, `list`, `leaderboard`: the CPU of `evalpipe sql "select 1"`, `evalpipe list` and `evalpipe leaderboard`
  (a fresh process each, over a small warehouse) against the import floor of a tool that reads a DuckDB warehouse
  with pandas: `python -c 'import pandas, duckdb'`. Ratios are taken within a round, then their median.
  `list` twice: over the repo's evals.yaml, and over a larger config written here (20 file benchmarks of 50
  samples, 40 models: `--list-size 20x40`), each with what `list` remembers (evalpipe/project/listing.py: the
  config's check and its counts, keyed on the config's bytes, the code and every file counted) filled by the run
  before the rounds, as every `list` after the first finds it; the first `list` (nothing remembered: the whole
  check, every adapter asked, every file counted) is shown beside them.
  Target (issue 31): <= 1.3x. Measured with evalpipe's bytecode cached, as an installed package runs (pip writes
  the .pyc files at install; pandas' and DuckDB's are cached too): a cache folder of its own
  (PYTHONPYCACHEPREFIX), filled by one run of each command before the rounds. The same commands with no bytecode
  cache (PYTHONDONTWRITEBYTECODE=1: every evalpipe module compiled from source at each start, as in a checkout
  run with that variable set) are shown beside them.
- `leaderboard rebuild`: the `leaderboard` asset's work (`pipeline.build_leaderboard` over the `metrics` and
  `gates` tables, as eval_assets/assets.py calls it, and the display frame its metadata shows) on a synthetic
  warehouse of 10,000 metric partitions (100 models x 100 splits, 3 metrics x 2 slices each), in process, warm
  imports, after one partition was rewritten (the rebuild that follows a materialization; metrics and gates are
  read through their rollups, evalpipe/store/rollup.py). The first build of the rollup is shown too. Target: <= 2 s.

    .venv/bin/python benchmarks/bench_reads.py [--repeat 3] [--partitions 100x100] [--list-size 20x40] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import check_repeat, load, machine, median_row, met, rounds, target_line, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FLOOR = "import-floor"
READ_TARGET = 1.3
REBUILD_TARGET_S = 2.0
METRICS = (("accuracy", True, "score"), ("error_rate", False, "score"), ("n_errors", False, "count"))


def synthetic_metrics(warehouse_path: Path, models: int, splits: int, slices: tuple[str, ...] = ("all", "level=1")) -> int:
    """Write `models x splits` partitions of the `metrics` table (each its own partition file, as the metrics
    asset writes them) under the warehouse at `warehouse_path`; returns the number of partitions. Values are
    deterministic, with ties, so ranks are checkable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from evalpipe.core.schema import TABLES
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path)
    schema = TABLES["metrics"]
    for s in range(splits):
        split = f"bench{s // 10}/split{s}"
        for m in range(models):
            rows = {f.name: [] for f in schema}
            for metric, hib, kind in METRICS:
                for sl in slices:
                    value = ((m * 7 + s) % 50) / 50 if kind == "score" else float((m + s) % 5)
                    for k, v in (("benchmark_split", split), ("model", f"model-{m:03d}"), ("metric", metric),
                                 ("slice", sl), ("value", value), ("n", 50), ("n_unscored", 0), ("n_errors", 0),
                                 ("stderr", 0.01), ("ci_low", max(0.0, value - 0.1)), ("ci_high", value + 0.1),
                                 ("higher_is_better", hib), ("kind", kind)):
                        rows[k].append(v)
            path = wh.partition_file("metrics", {"benchmark_split": split, "model": f"model-{m:03d}"})
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pydict(rows, schema=schema), path)
    return models * splits


def rebuild_leaderboard(warehouse_path: Path, touch: int | None = None) -> tuple[float, int]:
    """The leaderboard asset's work over the warehouse: (seconds, rows). `touch`: first rewrite that metrics
    partition (as a re-run of it does), so the rebuild is the one that follows a partition's materialization."""
    from evalpipe.pipeline.stages import leaderboard_display, leaderboard_from
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path)
    if touch is not None:
        part = wh.partitions("metrics")[touch]
        wh.write("metrics", wh.read("metrics", part), part)
    t0 = time.perf_counter()
    board = leaderboard_from(wh)
    leaderboard_display(board)
    return time.perf_counter() - t0, len(board)


def large_config(folder: Path, benchmarks: int, models: int, samples: int = 50) -> Path:
    """A config of `benchmarks` file benchmarks (one split of `samples` JSONL samples each) and `models` echo
    models, written under `folder`; its path."""
    import json

    lines = ["benchmarks:"]
    for b in range(benchmarks):
        data = folder / f"bench{b:02d}.jsonl"
        data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i} of {b}", "answer": str(i)}) + "\n"
                                for i in range(samples)))
        lines += [f"  bench{b:02d}:", "    adapter: file",
                  f"    description: Synthetic benchmark {b} of the list benchmark.",
                  f"    splits: {{test: {{path: {data}}}}}",
                  "    options: {columns: {prompt: question, target: answer, id: id}}", "    metrics: [exact_match]"]
    lines.append("models:")
    lines += [f"  model-{m:02d}: {{runner: echo, description: Echo model {m}.}}" for m in range(models)]
    path = folder / "evals.yaml"
    path.write_text("\n".join(lines) + "\n")
    past = time.time() - 60  # files written a minute ago, as datasets are: what `list` counts is remembered only for
    for f in folder.glob("bench*.jsonl"):  # files older than 2 s (evalpipe/project/listing.py RACY_S)
        os.utime(f, (past, past))
    return path


def _cpu_of(cmd: list[str], env: dict[str, str], forget: Path | None = None) -> dict:
    if forget is not None:  # nothing remembered: the first `list` of a config
        forget.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall_s": wall}


NO_CACHE = " (no bytecode cache)"


LIST_LARGE = "list, large config"
FIRST = ", first (nothing remembered)"
COMMANDS = ("sql", "list", LIST_LARGE, "leaderboard")


def read_commands(home: Path, repeat: int, pycache: Path, large: Path) -> dict[str, dict]:
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(ROOT / "evals.yaml"),
           "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_OFFLINE_MODE": "true",
           "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("EVALS_WAREHOUSE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    uncached = {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    uncached.pop("PYTHONPYCACHEPREFIX")
    py = sys.executable
    cli = [py, "-m", "evalpipe.cli.main"]
    commands = {"sql": [*cli, "sql", "select 1"], "list": [*cli, "list"], LIST_LARGE: [*cli, "list"],
                "leaderboard": [*cli, "leaderboard"]}
    envs = {n: env for n in commands} | {LIST_LARGE: {**env, "EVALS_CONFIG": str(large)}}
    for name, cmd in commands.items():  # the bytecode cache filled, as an install leaves it; what list remembers too
        _cpu_of(cmd, envs[name])
    first_home = home.with_name(home.name + "-first")  # a home of its own: its cache is removed before each run
    shutil.copytree(home, first_home)
    remembered = first_home / "cache" / "list.json"  # evalpipe/cli/view.py list_cache_path
    first_env = {n: {**envs[n], "DAGSTER_HOME": str(first_home)} for n in ("list", LIST_LARGE)}
    jobs = {FLOOR: ([py, "-c", "import pandas, duckdb"], env, None),
            **{n: (c, envs[n], None) for n, c in commands.items()},
            **{n + NO_CACHE: (c, {**uncached, **({"EVALS_CONFIG": str(large)} if n == LIST_LARGE else {})}, None)
               for n, c in commands.items()},
            **{n + FIRST: (commands[n], first_env[n], remembered) for n in ("list", LIST_LARGE)}}
    got = rounds({name: (lambda r, c=cmd, e=e, f=f: _cpu_of(c, e, f)) for name, (cmd, e, f) in jobs.items()}, repeat)
    out = {}
    for name, runs in got.items():
        row = median_row(runs, ["cpu_s", "wall_s"])
        if name != FLOOR:
            import statistics

            row["cpu_x_floor"] = statistics.median(x["cpu_s"] / f["cpu_s"] for x, f in zip(runs, got[FLOOR]))
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--partitions", default="100x100", help="MODELSxSPLITS of the synthetic metrics warehouse")
    ap.add_argument("--list-size", default="20x40", help="BENCHMARKSxMODELS of the large config `list` reads")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    check_repeat(args.repeat)
    models, splits = (int(x) for x in args.partitions.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench_reads_") as tmp:
        small, big = Path(tmp, "small"), Path(tmp, "big")
        for h in (small, big):
            (h / "warehouse").mkdir(parents=True)
        synthetic_metrics(small / "warehouse.duckdb", 3, 2)
        (Path(tmp) / "large").mkdir()
        large = large_config(Path(tmp) / "large", *(int(x) for x in args.list_size.split("x")))
        t0 = time.perf_counter()
        n = synthetic_metrics(big / "warehouse.duckdb", models, splits)
        print(f"synthetic warehouse: {n} metric partitions written in {time.perf_counter() - t0:.1f} s", flush=True)
        reads = read_commands(small, args.repeat, Path(tmp, "pycache"), large)
        first_s, _ = rebuild_leaderboard(big / "warehouse.duckdb")  # builds the rollup: every file read once
        rebuilds = [rebuild_leaderboard(big / "warehouse.duckdb", touch=r * 37 % n) for r in range(args.repeat)]
    import statistics

    rebuild_s = statistics.median(s for s, _ in rebuilds)
    target = f"<= {READ_TARGET:g}x"
    lines = [f"machine: {machine()}; load {load()}", "",
             "| command | CPU s | wall s | CPU x import floor | target |", "|---|---|---|---|---|",
             f"| import floor (`import pandas, duckdb`) | {reads[FLOOR]['cpu_s']:.2f} | {reads[FLOOR]['wall_s']:.2f} "
             "| 1.00 | |"]

    def label(name: str) -> str:
        return (f"`evalpipe list`, {args.list_size.replace('x', ' benchmarks x ')} models" if name == LIST_LARGE
                else f"`evalpipe {name}`")

    for name in COMMANDS:
        r = reads[name]
        lines.append(f"| {label(name)} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | {r['cpu_x_floor']:.2f} | {target}: "
                     f"{met(r['cpu_x_floor'], READ_TARGET)} |")
    for name in ("list", LIST_LARGE):
        r = reads[name + FIRST]
        lines.append(f"| {label(name)}, first (nothing remembered) | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | "
                     f"{r['cpu_x_floor']:.2f} | |")
    for name in COMMANDS:
        r = reads[name + NO_CACHE]
        lines.append(f"| {label(name)}, no bytecode cache | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | "
                     f"{r['cpu_x_floor']:.2f} | |")
    lines += ["", f"leaderboard rebuilt over {n:,} metric partitions ({models} models x {splits} splits, "
                  f"{rebuilds[0][1]:,} rows), after one partition changed: {rebuild_s:.2f} s (median of "
                  f"{len(rebuilds)}; target <= {REBUILD_TARGET_S:g} s: {met(rebuild_s, REBUILD_TARGET_S)}); the first "
                  f"build of the rollup (every file read once): {first_s:.2f} s"]
    markdown = "\n".join(lines)
    targets = [target_line(f"{label(name)} CPU", reads[name]["cpu_x_floor"], "the pandas+DuckDB import floor",
                           READ_TARGET) for name in COMMANDS]
    targets.append(f"- leaderboard rebuild at {n:,} metric partitions: {rebuild_s:.2f} s (target <= "
                   f"{REBUILD_TARGET_S:g} s): {'met' if rebuild_s <= REBUILD_TARGET_S else 'not met'}")
    print(markdown)
    print("\n".join(targets))
    write_json(args.json, "reads", markdown, targets, reads=reads, rebuild_s=rebuild_s, first_build_s=first_s,
               partitions=n)


if __name__ == "__main__":
    main()
