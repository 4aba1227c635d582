"""Tokens per second of `runner: local`, batched against unbatched, in the same invocation.

    .venv/bin/python benchmarks/bench_local_batch.py       # CPU, SmolLM2-135M, 16 prompts x 24 tokens, batch 8 vs 1
    .venv/bin/python benchmarks/bench_local_batch.py --threads 2   # both modes on 2 torch threads

Both go through the real runner and driver (`pipeline`-free: `run_requests` without a journal), greedy decoding,
the same prompts; the defaults are the settings docs/speed.md states. Both run `--repeat` rounds (default 3) in an
order rotated each round; reported: the batched/unbatched ratio of output tokens per second (taken within each
round, then the median; target >= 3.5x at batch 8, issue 24), tokens/s with the machine named, and how many
batched answers equal the unbatched ones.
On a GPU machine, benchmarks/gpu_local_batch.py compares the runner (transformers and vLLM engines) against a
plain transformers `generate` loop on the same GPU.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import check_repeat, load, machine, rounds, target_line, today, write_json  # noqa: E402
TARGET = 3.5  # issue 24: batched / unbatched tokens per second at batch 8, CPU, SmolLM2
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _runner(model: str | None, batch: int, max_tokens: int, device: str, **options):
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import build_runner

    return build_runner(ModelConfig(key=f"b{batch}", runner="local", model=model,
                                    params={"max_tokens": max_tokens},
                                    options={"batch_size": batch, "device": device, **options}))


def _requests(n: int):
    from evalpipe.core.types import RolloutRequest

    topics = ["the sea", "a red fox", "Paris", "winter", "bread", "the moon", "a small robot", "rain"]
    return [RolloutRequest(sample_id=f"s{i}", fingerprint=f"f{i}", messages=[
        {"role": "user", "content": f"Write one sentence about {topics[i % len(topics)]}." + " Please." * (i % 3)}])
        for i in range(n)]


def _timed(runner, reqs, concurrency: int) -> tuple[float, list[dict]]:
    from evalpipe.runners import RunSettings, run_requests

    settings = RunSettings(concurrency=concurrency, timeout_s=3600)
    t0 = time.perf_counter()
    rows = asyncio.run(run_requests(runner, reqs, None, settings, close=False))
    return time.perf_counter() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint (default: the shipped SmolLM2-135M GGUF)")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=24, help="output tokens per prompt (docs/speed.md's figure: 24)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, the same for both modes (the runner's "
                    "default: 1)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of both modes (medians)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    args = ap.parse_args()
    check_repeat(args.repeat)
    reqs = _requests(args.n)
    one = _runner(args.model, 1, args.max_tokens, args.device, threads=args.threads)
    many = _runner(args.model, args.batch_size, args.max_tokens, args.device, threads=args.threads)
    asyncio.run(one.start())
    _timed(one, reqs[:2], 1)  # warm-up, not timed
    _timed(many, reqs[:2], args.batch_size)
    load_before = load()
    unbatched, batched = "unbatched (batch 1)", f"batched (batch {args.batch_size})"

    def measure(runner, concurrency: int) -> dict:
        wall, rows = _timed(runner, reqs, concurrency)
        toks = sum(int(r["output_tokens"] or 0) for r in rows if r["status"] == "ok")
        return {"wall_s": wall, "tokens": toks, "tok_s": toks / wall, "answers": [r["raw_output"] for r in rows]}

    by = rounds({unbatched: lambda r: measure(one, 1), batched: lambda r: measure(many, args.batch_size)},
                args.repeat)
    ratio = statistics.median(b["tok_s"] / u["tok_s"] for b, u in zip(by[batched], by[unbatched]))
    same = min(sum(a == b for a, b in zip(u["answers"], bb["answers"])) for u, bb in zip(by[unbatched], by[batched]))
    threads = "" if args.threads == 1 else f", threads={args.threads}"  # the default (1) as the table always read
    header = (f"N={args.n} prompts x {args.max_tokens} tokens, device={args.device}{threads}, greedy, each figure the "
              f"median of {args.repeat} rounds in a rotating order (the ratio taken within each round); tokens/s on "
              f"{machine()}, load average before {load_before}, {today()}")
    lines = ["| mode | x unbatched (tokens/s) | tokens/s | wall (s) | output tokens |", "|---|---|---|---|---|"]
    for name, runs in by.items():
        rate = statistics.median(x["tok_s"] for x in runs)
        lines.append(f"| {name} | {1.0 if name == unbatched else ratio:.2f} | {rate:.1f} | "
                     f"{statistics.median(x['wall_s'] for x in runs):.2f} | {runs[0]['tokens']} |")
    targets = [target_line(f"local batching at batch {args.batch_size}, tokens/s", ratio, "unbatched", TARGET,
                           higher_is_better=True, detail=f"identical answers {same}/{args.n}")]
    md = header + "\n\n" + "\n".join(lines) + "\n\n" + "\n".join(targets)
    print("\n" + md)
    write_json(args.json, "local_batch", md, targets, n=args.n, max_tokens=args.max_tokens,
               batch_size=args.batch_size, repeat=args.repeat, load_before=load_before, ratio=ratio, identical=same)


if __name__ == "__main__":
    main()
