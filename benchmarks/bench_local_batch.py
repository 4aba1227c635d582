"""Tokens per second of `runner: local`, batched against unbatched, in the same invocation.

    .venv/bin/python benchmarks/bench_local_batch.py                       # CPU, SmolLM2-135M, batch 8 vs 1

Both go through the real runner and driver (`pipeline`-free: `run_requests` without a journal), greedy decoding,
the same prompts. Reported: output tokens per second, and how many batched answers equal the unbatched ones.
On a GPU machine, benchmarks/gpu_local_batch.py compares the runner (transformers and vLLM engines) against a
plain transformers `generate` loop on the same GPU.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
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
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    reqs = _requests(args.n)
    one, many = _runner(args.model, 1, args.max_tokens, args.device), _runner(args.model, args.batch_size,
                                                                                  args.max_tokens, args.device)
    asyncio.run(one.start())
    _timed(one, reqs[:2], 1)  # warm-up, not timed
    _timed(many, reqs[:2], args.batch_size)
    results = {}
    wall1, rows1 = _timed(one, reqs, 1)
    wallb, rowsb = _timed(many, reqs, args.batch_size)
    for name, wall, rows in (("unbatched (batch 1)", wall1, rows1), (f"batched (batch {args.batch_size})", wallb, rowsb)):
        toks = sum(int(r["output_tokens"] or 0) for r in rows if r["status"] == "ok")
        results[name] = (wall, toks, toks / wall)
    same = sum(a["raw_output"] == b["raw_output"] for a, b in zip(rows1, rowsb))
    print(f"\nN={args.n} prompts, max_tokens={args.max_tokens}, device={args.device}, greedy, "
          f"{os.cpu_count()} CPUs, same run\n")
    print("| mode | wall (s) | output tokens | tokens/s |")
    print("|---|---|---|---|")
    for name, (wall, toks, rate) in results.items():
        print(f"| {name} | {wall:.2f} | {toks} | {rate:.1f} |")
    base = results["unbatched (batch 1)"][2]
    print(f"\nbatched / unbatched: {results[f'batched (batch {args.batch_size})'][2] / base:.2f}x tokens/s "
          f"(target >= 3x at batch 8); identical answers: {same}/{args.n}")


if __name__ == "__main__":
    main()
