"""Runs many requests through a runner: bounded concurrency, timeouts, retries, and the resume journal."""
from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from evalpipe.journal import Journal
from evalpipe.runners.base import RetryableError, Runner
from evalpipe.types import RolloutRequest


@dataclass
class RunSettings:
    concurrency: int | None = None  # None: the runner's default
    timeout_s: float = 120.0  # per attempt
    max_retries: int = 4
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    fail_fast: bool = False


class FailFast(Exception):
    """Raised when fail_fast is set and a sample failed for good."""


def _row(req: RolloutRequest, **fields: Any) -> dict[str, Any]:
    return {"sample_id": req.sample_id, "fingerprint": req.fingerprint, **fields}


async def _attempt_all(runner: Runner, req: RolloutRequest, s: RunSettings) -> dict[str, Any]:
    start = time.perf_counter()
    attempts = 0
    last_error = ""
    while True:
        attempts += 1
        retry_after = None
        try:
            gen = await asyncio.wait_for(runner.generate(req), timeout=s.timeout_s)
            return _row(req, status="ok", error=None, raw_output=gen.text, finish_reason=gen.finish_reason,
                        latency_s=time.perf_counter() - start, input_tokens=gen.input_tokens,
                        output_tokens=gen.output_tokens, cost=gen.cost if gen.cost is not None else 0.0,
                        attempts=attempts, trajectory=json.dumps(gen.trajectory, default=str) if gen.trajectory else None)
        except asyncio.TimeoutError:
            last_error = f"timeout after {s.timeout_s:g}s"
        except RetryableError as exc:
            last_error, retry_after = str(exc), exc.retry_after
        except Exception as exc:  # a permanent failure of this sample: record it, keep going
            return _row(req, status="error", error=f"{type(exc).__name__}: {exc}", latency_s=time.perf_counter() - start,
                        attempts=attempts, cost=0.0)
        if attempts > s.max_retries:
            return _row(req, status="error", error=f"gave up after {attempts} attempts: {last_error}",
                        latency_s=time.perf_counter() - start, attempts=attempts, cost=0.0)
        delay = min(s.backoff_max_s, s.backoff_base_s * 2 ** (attempts - 1))
        delay = max(delay * (0.5 + random.random() / 2), retry_after or 0.0)  # jitter, but honour Retry-After
        await asyncio.sleep(delay)


async def run_requests(runner: Runner, requests: list[RolloutRequest], journal: Journal | None,
                       settings: RunSettings, progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Rows for every request, in request order. Journaled samples are not sent again."""
    done = journal.lookup(r.fingerprint for r in requests) if journal else {}
    results: list[dict[str, Any] | None] = [None] * len(requests)
    todo: list[int] = []
    for i, req in enumerate(requests):
        rec = done.get(req.fingerprint)
        if rec is not None:
            results[i] = {**rec, "cached": True}
        else:
            todo.append(i)
    total, finished = len(requests), len(requests) - len(todo)
    if progress:
        progress(finished, total)
    pending = iter(todo)
    concurrency = max(1, settings.concurrency or runner.default_concurrency)

    async def worker() -> None:
        nonlocal finished
        for i in pending:  # workers share one iterator: at most `concurrency` requests in flight
            req = requests[i]
            row = await _attempt_all(runner, req, settings)
            row["cached"] = False
            if row["status"] == "ok" and journal is not None:
                journal.record(req.fingerprint, req.sample_id, row)
            results[i] = row
            finished += 1
            if progress:
                progress(finished, total)
            if row["status"] != "ok" and settings.fail_fast:
                raise FailFast(f"sample {req.sample_id} failed and fail_fast is set: {row['error']}")

    try:
        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(1, len(todo))))))
    finally:
        await runner.aclose()
    return results  # type: ignore[return-value]


def run_sync(runner: Runner, requests: Iterable[RolloutRequest], journal: Journal | None, settings: RunSettings,
             progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    return asyncio.run(run_requests(runner, list(requests), journal, settings, progress))
