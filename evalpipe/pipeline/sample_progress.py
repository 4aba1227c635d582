"""Per-sample progress of a partition's rollouts, for a caller in the same process (the CLI's progress bar).

The rollouts asset reports each finished sample with `report(partition_key, done, total)`; a launcher that runs
the partition in this process (eval_assets/launch.py `evaluate(on_sample=...)`) registers a listener for its key.
Runs in other processes (the daemon, celery workers) have no listener: a dictionary lookup, nothing else.
"""
from __future__ import annotations

import time
from typing import Any, Callable

INTERVAL_S = 0.05  # how often a partition's progress reaches its listener at most (the last sample always does)
_listeners: dict[str, Callable[[int, int], None]] = {}


def listen(partition_key: Any, fn: Callable[[int, int], None]) -> None:
    _listeners[str(partition_key)] = fn


def unlisten(partition_key: Any) -> None:
    _listeners.pop(str(partition_key), None)


def report(partition_key: Any, done: int, total: int, errors: int | None = None) -> None:
    """`errors`: failed samples so far (the driver counts them); passed on only when known, so listeners
    taking (done, total) keep working."""
    fn = _listeners.get(str(partition_key))
    if fn is not None:
        fn(done, total) if errors is None else fn(done, total, errors)


def reporter(partition_key: Any, interval_s: float = INTERVAL_S,
             clock: Callable[[], float] = time.monotonic) -> Callable[..., None]:
    """`report` for one partition, at most every `interval_s` plus the last sample (done == total): a display needs
    no more, and the listener's locks and rate bookkeeping cost ~10 us a sample (0.1 s of CPU per 10k fast ones)."""
    key, last = str(partition_key), [float("-inf")]

    def report_some(done: int, total: int, errors: int | None = None) -> None:
        now = clock()
        if done == total or now - last[0] >= interval_s:
            last[0] = now
            report(key, done, total, errors)

    return report_some
