"""Batched generation for `runner: local` (options `batch_size`, `device`, `dtype`; docs/runners.md).

The driver keeps `concurrency` requests in flight; with `batch_size: B` (> 1) the local runner's concurrency is B
and its requests meet here: a batcher collects the pending ones (up to B, or whatever arrived when the model is
free), sorts them by prompt length so a batch holds prompts of similar length, left-pads them (decoder-only
models generate at the right edge) and calls `generate` once for the batch. Greedy decoding gives each sample
the tokens it would get alone, up to floating-point differences of padded attention.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable


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


def generate_batch(model: Any, tok: Any, prompts: list[list[int]], kwargs: dict[str, Any],
                   device: str = "cpu") -> list[tuple[list[int], int]]:
    """One `generate` call for many prompts (token ids), left-padded; per prompt (new tokens, prompt length)."""
    import torch

    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p):] = 1
    with torch.inference_mode():
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
