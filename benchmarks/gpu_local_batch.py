"""Tokens per second of `runner: local` on a CUDA GPU, against a plain transformers `generate` loop on the same GPU.

    .venv/bin/python benchmarks/gpu_local_batch.py                     # shipped SmolLM2-135M, 256 prompts
    .venv/bin/python benchmarks/gpu_local_batch.py --model /path/to/hf-checkpoint --n 1024 --max-tokens 128
    .venv/bin/python benchmarks/gpu_local_batch.py --device cpu --n 4 --max-tokens 8 --batch-size 2   # smoke check

Measured in one invocation, with the same prompts (benchmarks/bench_local_batch.py's), greedy decoding and the same
`max_tokens`:
1. the baseline: a plain transformers loop, `model.generate` one prompt at a time, bf16 on the GPU;
2. our runner, `engine: transformers`, batched (`batch_size`, bf16, cuda), through the real driver;
3. our runner, `engine: vllm` (when vllm is installed), through the same driver.
Printed: a markdown table of wall time, output tokens, tokens/s, the ratio to the baseline, and how many answers
equal the baseline's. Without CUDA it says so and exits 2; `--device cpu` runs the same steps on the CPU (a check of
this script, not a measurement). Not yet run on a GPU (none was available where it was written).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.bench_local_batch import _requests, _runner, _timed  # noqa: E402


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def plain_loop(model, tok, reqs, max_tokens: int, device: str) -> tuple[float, int, list[str]]:
    """The baseline: one `generate` call per prompt, no batching, nothing of ours in the way."""
    import torch

    texts, tokens = [], 0
    _sync(device)
    t0 = time.perf_counter()
    for r in reqs:
        enc = tok.apply_chat_template(r.messages, add_generation_prompt=True, return_tensors="pt",
                                      return_dict=True).to(device)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=max_tokens, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, pad_token_id=tok.eos_token_id)
        new = out[0, enc["input_ids"].shape[1]:].tolist()
        tokens += len(new)
        texts.append(tok.decode(new, skip_special_tokens=True).strip())
    _sync(device)
    return time.perf_counter() - t0, tokens, texts


def runner_rows(runner, reqs, concurrency: int, device: str) -> tuple[float, int, list[str]]:
    asyncio.run(runner.start())
    _timed(runner, reqs[:2], concurrency)  # warm-up (CUDA kernels, batcher), not timed
    _sync(device)
    wall, rows = _timed(runner, reqs, concurrency)
    _sync(device)
    bad = [r for r in rows if r["status"] != "ok"]
    if bad:
        raise SystemExit(f"{len(bad)} requests failed, first: {bad[0]['error']}")
    return wall, sum(int(r["output_tokens"] or 0) for r in rows), [r["raw_output"] for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="checkpoint: HF folder or .gguf (default: the shipped SmolLM2-135M)")
    ap.add_argument("--n", type=int, default=256, help="prompts")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64, help="batch size of the transformers engine")
    ap.add_argument("--vllm-batch-size", type=int, default=256, help="requests per vLLM generate call")
    ap.add_argument("--vllm-gpu-memory", type=float, default=0.6,
                    help="vLLM's gpu_memory_utilization (the transformers runs free theirs first)")
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM engine even when it is installed")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cuda (the measurement); cpu only checks that the script works")
    args = ap.parse_args()

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_local_batch: no CUDA GPU here (torch.cuda.is_available() is False); run it on a machine with "
              "an NVIDIA GPU and a CUDA build of torch. On this machine: benchmarks/bench_local_batch.py "
              "(batched against unbatched on the CPU), or --device cpu to check this script.", file=sys.stderr)
        raise SystemExit(2)

    from evalpipe.runners import local
    from evalpipe.runners.local_batch import pick_dtype
    from evalpipe.runners.local_vllm import vllm_installed

    torch.set_num_threads(1)  # what the runner sets (`threads: 1`) for every mode alike; the loop would otherwise
    reqs = _requests(args.n)  # run with torch's default thread count before the runner's start() changes it
    dtype = pick_dtype("auto", args.device)  # bf16 on the GPU, as the runner picks it
    checkpoint = local.resolve_checkpoint(args.model)
    model, tok = local.load(checkpoint)
    model.to(device=args.device, dtype=dtype)
    plain_loop(model, tok, reqs[:2], args.max_tokens, args.device)  # warm-up, not timed
    results: dict[str, tuple[float, int, list[str]] | str] = {}
    results["plain transformers generate loop (baseline)"] = plain_loop(model, tok, reqs, args.max_tokens, args.device)
    batched = _runner(args.model, args.batch_size, args.max_tokens, args.device)
    results[f"runner, engine transformers, batch {args.batch_size}"] = runner_rows(batched, reqs, args.batch_size,
                                                                                    args.device)
    vllm_name = f"runner, engine vllm, batch {args.vllm_batch_size}"
    if args.no_vllm:
        results[vllm_name] = "skipped (--no-vllm)"
    elif not vllm_installed():
        results[vllm_name] = "not run: vllm is not installed (`pip install vllm` on a CUDA machine)"
    else:
        del model, batched
        local._LOADED.clear()  # vLLM takes its share of the GPU's memory at start: give the transformers copy back
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
        fast = _runner(args.model, args.vllm_batch_size, args.max_tokens, args.device, engine="vllm",
                       vllm_args={"gpu_memory_utilization": args.vllm_gpu_memory})
        results[vllm_name] = runner_rows(fast, reqs, args.vllm_batch_size, args.device)

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else \
        f"CPU ({os.cpu_count()} cores; a check, not a measurement)"
    base_wall, base_tokens, base_texts = results["plain transformers generate loop (baseline)"]
    print(f"\n{checkpoint.name}: N={args.n} prompts, max_tokens={args.max_tokens}, greedy, {dtype}, {gpu}, same run\n")
    print("| mode | wall (s) | output tokens | tokens/s | x baseline | answers equal to the baseline's |")
    print("|---|---|---|---|---|---|")
    for name, res in results.items():
        if isinstance(res, str):
            print(f"| {name} | {res} | | | | |")
            continue
        wall, tokens, texts = res
        same = sum(a == b for a, b in zip(texts, base_texts))
        ratio = (tokens / wall) / (base_tokens / base_wall)
        print(f"| {name} | {wall:.2f} | {tokens} | {tokens / wall:.1f} | {ratio:.2f}x | {same}/{len(texts)} |")


if __name__ == "__main__":
    main()
