"""A large Inspect `.eval` log into the warehouse (issue 32): our streamed import against Inspect's own readers.

The log is made with inspect_ai's own writer (its EvalRecorder, as `inspect eval` writes a `.eval` log; see
make_log for why not `write_eval_log`): `--samples` samples (default 100,000), each with a text input, a target, a two-turn conversation, an output with usage and a `match` score
(`C` / `I`). Then, each in a fresh process on the same file (wall time and peak RSS of that process):

- `evalpipe stream`: evalpipe/interop/inspect_stream.py `import_log` (each `samples/*.json` member read through
  the size cap's bounded reader, one at a time, written to DuckDB in batches) and one SQL query over the tables
  (accuracy per scorer, samples, errors);
- `evalpipe import inspect`: the command itself (`evalpipe import inspect LOG --max-file-mb 8192`, a fresh
  process: the warehouse's Parquet partitions, redacted as every warehouse write), then `evalpipe sql` in another
  process for the same query (its seconds and peak RSS are the import's; the query's process is not timed);
- `inspect read_eval_log`: inspect_ai.log.read_eval_log(path) and the same accuracy from its samples;
- `inspect samples_df`: inspect_ai.analysis.samples_df(path) and the same accuracy from its frame.

The three accuracies must agree (checked). Targets: faster than read_eval_log, peak RSS <= 1 GB.

    .venv/bin/python benchmarks/bench_inspect_import.py [--samples 100000] [--log FILE] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RSS_TARGET_MB = 1024
PHASES = ("evalpipe stream", "evalpipe import inspect", "inspect read_eval_log", "inspect samples_df")


def make_log(path: Path, n: int, flush_every: int = 1000) -> None:
    """`n` samples through inspect_ai's own writer, as `inspect eval` writes a log: its EvalRecorder (`.eval`),
    samples logged one by one and flushed every `flush_every` (inspect_ai's `write_eval_log` on an EvalLog of
    100,000 samples buffers them all, and its buffer dedupes each new sample against every buffered one: 10,000
    samples took 113 s here, 5,000 36 s, so 100,000 would take hours)."""
    import asyncio

    from inspect_ai.log import EvalConfig, EvalDataset, EvalPlan, EvalResults, EvalSample, EvalSpec, EvalStats
    from inspect_ai.log._recorders.eval import EvalRecorder
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    spec = EvalSpec(created="2026-01-01T00:00:00+00:00", task="arith", dataset=EvalDataset(name="arith", samples=n),
                    model="mockllm/model", config=EvalConfig())

    def sample(i: int) -> EvalSample:
        q, right = f"What is {i} + {i % 7}?", str(i + i % 7)
        answer = right if i % 3 else str(i)  # two thirds right
        out = ModelOutput.from_content("mockllm/model", answer)
        out.usage = ModelUsage(input_tokens=12, output_tokens=3, total_tokens=15)
        return EvalSample(id=i, epoch=1, input=q, target=right,
                          messages=[ChatMessageUser(content=q), ChatMessageAssistant(content=answer)],
                          output=out, scores={"match": Score(value="C" if answer == right else "I", answer=answer)})

    async def write() -> None:
        recorder = EvalRecorder(str(path.parent))
        await recorder.log_init(spec, str(path), clean=True)
        await recorder.log_start(spec, EvalPlan())
        for i in range(n):
            await recorder.log_sample(spec, sample(i))
            if (i + 1) % flush_every == 0:
                await recorder.flush(spec)
        await recorder.log_finish(spec, "success", EvalStats(), EvalResults(total_samples=n, completed_samples=n),
                                  None)

    asyncio.run(write())


def phase(name: str, log: Path, work: Path) -> dict:
    """One phase in this process: its seconds, and the accuracy it computed."""
    t0 = time.perf_counter()
    if name == "evalpipe stream":
        import duckdb

        from evalpipe.core.file_caps import MB, FileCap
        from evalpipe.interop.inspect_stream import import_log

        con = duckdb.connect(str(work / "warehouse.duckdb"))
        n = import_log(log, con, FileCap(8192 * MB, "--max-file-mb"))
        acc, scored, errors = con.execute(
            "SELECT avg(value), count(value), (SELECT count(*) FROM inspect_samples WHERE error IS NOT NULL) "
            "FROM inspect_scores WHERE scorer = 'match'").fetchone()
        con.close()
    elif name == "evalpipe import inspect":
        import os

        env = {**os.environ, "DAGSTER_HOME": str(work / "home"), "PYTHONPATH": str(ROOT)}
        env.pop("EVALS_WAREHOUSE", None)
        (work / "home").mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "evalpipe.cli.main"]
        t0 = time.perf_counter()
        out = subprocess.run([*cmd, "import", "inspect", "--max-file-mb", "8192", "--no-progress", str(log)], cwd=ROOT,
                             env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if out.returncode:
            raise SystemExit(out.stderr[-3000:])
        q = subprocess.run([*cmd, "sql", "--json", "SELECT avg(value) AS acc, count(value) AS scored, (SELECT count(*) "
                            "FROM inspect_samples) AS n FROM inspect_scores WHERE scorer = 'match'"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True)
        r = json.loads(q.stdout)[0]
        return {"phase": name, "seconds": seconds, "samples": int(r["n"]), "accuracy": r["acc"],
                "scored": int(r["scored"]), "peak_rss_mb": peak}
    elif name == "inspect read_eval_log":
        from inspect_ai.log import read_eval_log
        from inspect_ai.scorer import value_to_float

        f = value_to_float()
        got = read_eval_log(str(log))
        values = [f(s.scores["match"].value) for s in got.samples]
        n, acc, scored = len(got.samples), sum(values) / len(values), len(values)
    else:
        from inspect_ai.analysis import samples_df

        df = samples_df(str(log))
        col = next(c for c in df.columns if c.startswith("score_match"))
        values = df[col].map({"C": 1.0, "I": 0.0}).fillna(df[col]).astype(float)
        n, acc, scored = len(df), float(values.mean()), int(values.notna().sum())
    seconds = time.perf_counter() - t0
    return {"phase": name, "seconds": seconds, "samples": n, "accuracy": acc, "scored": scored,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_phase(name: str, log: Path, work: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--phase", name, "--log", str(log), "--work", str(work)],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--log", type=Path, help="the log to read (made with --samples when missing)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--phase", choices=PHASES)
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    if args.phase:
        print(json.dumps(phase(args.phase, args.log, args.work)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log = args.log or work / f"arith_{args.samples}.eval"  # --log FILE: kept (made there when missing)
        t0 = time.perf_counter()
        if not log.exists():
            make_log(log, args.samples)
            print(f"log written by inspect_ai's EvalRecorder: {args.samples} samples, "
                  f"{log.stat().st_size / 1e6:.1f} MB, {time.perf_counter() - t0:.1f} s", flush=True)
        rows = [run_phase(name, log, work) for name in PHASES]
    accs = {round(r["accuracy"], 9) for r in rows}
    assert len(accs) == 1 and len({r["samples"] for r in rows}) == 1, rows  # the same numbers from each
    lines = [f"Inspect `.eval` import, {rows[0]['samples']:,} samples ({machine()}):", "",
             "| reader | seconds | peak RSS (MB) | samples/s |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['seconds']:.1f} | {r['peak_rss_mb']:.0f} | "
                     f"{r['samples'] / r['seconds']:,.0f} |")
    by = {r["phase"]: r for r in rows}
    theirs = by["inspect read_eval_log"]
    lines.append("")
    for name in ("evalpipe stream", "evalpipe import inspect"):
        ours = by[name]
        speed = theirs["seconds"] / ours["seconds"]
        lines += [f"- {name} vs inspect read_eval_log: {speed:.2f}x faster (target > 1x): "
                  f"{'met' if speed > 1 else 'NOT met'}",
                  f"- {name} peak RSS: {ours['peak_rss_mb']:.0f} MB (target <= {RSS_TARGET_MB} MB): "
                  f"{'met' if ours['peak_rss_mb'] <= RSS_TARGET_MB else 'NOT met'}"]
    lines.append(f"- accuracy (match) from each: {rows[0]['accuracy']:.6f}")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"benchmark": "inspect_import", "machine": machine(), "rows": rows,
                                         "markdown": "\n".join(lines)}, indent=1))


if __name__ == "__main__":
    main()
