"""Batched generation for `runner: local` (options `batch_size`, `device`, `dtype`; docs/runners.md).

The driver keeps `concurrency` requests in flight; with `batch_size: B` (> 1) the local runner's concurrency is B
and its requests meet here: a batcher collects the pending ones (up to B, or whatever arrived when the model is
free), sorts them by prompt length so a batch holds prompts of similar length, left-pads them (decoder-only
models generate at the right edge) and calls `generate` once for the batch. Greedy decoding gives each sample
the tokens it would get alone, up to floating-point differences of padded attention.

On the CPU in float32 the batch's matrix products go through MKL's packed GEMM (`prepacked_linears`): each step
of a batch of B multiplies B rows by every weight matrix, and for such short, wide products the plain `linear`
(MKL sgemm, repacking the weights on every call) took 1.3-1.4x the time of a product on weights packed once for
B rows (SmolLM2-135M's layers, batch 8, one thread; docs/runners.md).
"""
from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any, Callable, Iterator

# model -> {(rows, dtype, device): {Linear module: its weight packed for `rows`-row products}}; dropped with the model
_PACKED: "weakref.WeakKeyDictionary[Any, dict[tuple, dict[Any, Any] | None]]" = weakref.WeakKeyDictionary()
PACK_MEMORY_SHARE = 0.25  # pack only if the packed copies take at most this share of the memory available


def pick_device(requested: str | None) -> str:
    """`cuda`, `mps` or `cpu`; `auto` (default) takes a GPU when there is one."""
    import torch

    req = (requested or "auto").lower()
    if req != "auto":
        return req
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(requested: str | None, device: str) -> Any:
    """bfloat16 on a GPU, float32 on the CPU (today's default), unless `dtype` says otherwise."""
    import torch

    if requested and requested != "auto":
        return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}[requested.lower()]
    return torch.bfloat16 if device in ("cuda", "mps") else torch.float32


def encode(tok: Any, messages: list[dict[str, Any]]) -> list[int]:
    if getattr(tok, "chat_template", None):
        return list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                            return_dict=True)["input_ids"])
    text = "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages) + "\n\nassistant:"
    return list(tok(text)["input_ids"])


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """The text up to its first stop string (of any), and whether one was found; both engines use it."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)


def prepacked_linears(model: Any, rows: int) -> dict[Any, Any] | None:
    """The model's `nn.Linear` weights packed by MKL for products of `rows` rows (made once per model and `rows`),
    or None where packing does not apply: fewer than 2 rows, a weight not a float32 CPU tensor, torch without
    MKL's packed linear, or too little memory for a second copy of the weights (they stay as they are too,
    for products of other row counts: the prompt, a smaller last batch)."""
    import torch

    if rows < 2 or not torch.backends.mkl.is_available() or not hasattr(torch.ops.mkl, "_mkl_linear"):
        return None
    by_rows = _PACKED.setdefault(model, {})
    first = next(model.parameters(), None)
    key = (rows, getattr(first, "dtype", None), getattr(first, "device", None))  # a model moved packs anew
    if key in by_rows:
        return by_rows[key]
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or any(m.weight.device.type != "cpu" or m.weight.dtype != torch.float32 for m in linears):
        by_rows[key] = None
        return None
    size = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    if size > PACK_MEMORY_SHARE * _available_memory():
        by_rows[key] = None
        return None
    with torch.inference_mode():
        by_rows[key] = {m: torch.ops.mkl._mkl_reorder_linear_weight(m.weight.detach(), rows) for m in linears}
    return by_rows[key]


def _available_memory() -> float:
    try:
        import psutil

        return float(psutil.virtual_memory().available)
    except Exception:  # unknown: don't pack
        return 0.0


@contextlib.contextmanager
def packed_linears(packs: dict[Any, Any] | None, rows: int) -> Iterator[None]:
    """While inside, each packed `nn.Linear` computes with its packed weight when its input has exactly `rows`
    rows; other inputs go through the plain `linear` inside the same op (bit-identical to `nn.Linear`)."""
    import torch

    if not packs:
        yield
        return
    mkl_linear = torch.ops.mkl._mkl_linear
    for m, packed in packs.items():
        m.forward = (lambda x, m=m, packed=packed: mkl_linear(x, packed, m.weight, m.bias, rows))
    try:
        yield
    finally:
        for m in packs:
            del m.forward  # back to nn.Linear.forward


def generate_batch(model: Any, tok: Any, prompts: list[list[int]], kwargs: dict[str, Any],
                   device: str = "cpu", pack_rows: int = 0) -> list[tuple[list[int], int]]:
    """One `generate` call for many prompts (token ids), left-padded; per prompt (new tokens, prompt length).
    `pack_rows` (the batch size): on the CPU, products of that many rows use weights packed for them."""
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    packs = prepacked_linears(model, pack_rows) if device == "cpu" else None
    with torch.inference_mode(), packed_linears(packs, pack_rows):
        out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), pad_token_id=pad, **kwargs)
    eos = tok.eos_token_id
    results = []
    for i, p in enumerate(prompts):
        new = out[i, width:].tolist()
        if eos is not None and eos in new:  # rows that finished early are padded after their end
            new = new[: new.index(eos) + 1]
        while new and new[-1] == pad and pad != eos:
            new.pop()
        results.append((new, len(p)))
    return results


class Batcher:
    """Collects concurrent requests into batches of at most `size`, grouped by prompt length."""

    def __init__(self, size: int, run: Callable[[list[list[int]]], list[Any]], executor: Any):
        self.size, self.run, self.executor = size, run, executor
        self.pending: list[tuple[list[int], asyncio.Future]] = []
        self.busy = False

    async def submit(self, prompt: list[int]) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((prompt, fut))
        if not self.busy:
            self.busy = True
            asyncio.get_running_loop().create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(0)  # let the other workers' requests of this tick arrive
            while self.pending:
                self.pending.sort(key=lambda x: len(x[0]))  # similar lengths together: less padding
                batch, self.pending = self.pending[: self.size], self.pending[self.size:]
                try:
                    outs = await loop.run_in_executor(self.executor, self.run, [p for p, _ in batch])
                except Exception as exc:  # the whole batch fails alike; the driver retries or records each
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for (_, fut), out in zip(batch, outs):
                    if not fut.done():
                        fut.set_result(out)
                await asyncio.sleep(0)
        finally:
            self.busy = False
