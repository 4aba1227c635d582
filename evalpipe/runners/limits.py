"""Requests-per-minute and tokens-per-minute limits, as token buckets shared by all workers of one run.

A bucket holds at most one minute's allowance and refills continuously, so a run may start with a burst of up to
the limit and then settles at the limit's rate (the way providers meter). Tokens are not known before a call:
the driver reserves an estimate (prompt characters / 4 + max_tokens) and settles the difference afterwards.
"""
from __future__ import annotations

import asyncio
import time


class Bucket:
    def __init__(self, per_minute: float):
        if per_minute <= 0:
            raise ValueError("a per-minute limit must be positive")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # units per second
        self.level = self.capacity
        self.stamp = time.monotonic()
        self._lock = asyncio.Lock()  # waiters queue fairly instead of all waking at once

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    async def take(self, amount: float = 1.0) -> None:
        amount = min(float(amount), self.capacity)  # one request larger than the whole minute still gets through
        async with self._lock:
            while True:
                self._refill()
                if self.level >= amount:
                    self.level -= amount
                    return
                await asyncio.sleep((amount - self.level) / self.rate)

    def settle(self, delta: float) -> None:
        """Give back (delta < 0) or charge (delta > 0) the difference between the estimate and actual use.
        The level may go negative: the next callers then wait until the overdraft has refilled."""
        self._refill()
        self.level = min(self.capacity, self.level - delta)


class RateLimiter:
    """Optional RPM and TPM limits; a limiter with neither is never constructed (no cost on the hot path)."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None):
        self.requests = Bucket(rpm) if rpm else None
        self.tokens = Bucket(tpm) if tpm else None

    async def acquire(self, estimated_tokens: int) -> None:
        if self.requests is not None:
            await self.requests.take(1)
        if self.tokens is not None:
            await self.tokens.take(estimated_tokens)

    def settle(self, estimated_tokens: int, used_tokens: int | None) -> None:
        if self.tokens is not None and used_tokens is not None:
            self.tokens.settle(used_tokens - estimated_tokens)


def estimate_tokens(messages: list[dict], max_tokens: int | None) -> int:
    chars = 0
    for m in messages:
        c = m.get("content")
        chars += len(c) if isinstance(c, str) else len(str(c or ""))
    return chars // 4 + int(max_tokens or 256)
