"""[sweeps] Partitions of one batch run take turns at the interpreter (eval_assets/batch.py; docs/scale.md "Sweeps").

A batch run evaluates its partitions in threads so that their model calls overlap. What a partition computes
itself (reading and writing its partition files, hashing, Dagster's events) is Python holding the GIL: 64 threads
doing it at once only trade the GIL back and forth (a cached 200-partition run: 2.6 million futex calls, ~15% more
wall time than one thread). So a partition's thread computes only while it holds a turn (`Turns.turn`), and gives
it up while it waits for something outside the process (`waiting`: model calls, a sandbox, another process's
lock), when another partition computes. Outside a batch run no thread holds a turn and `waiting` does nothing."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_held = threading.local()  # the Turns whose turn this thread holds, if any


class Turns:
    """At most `slots` threads compute at once."""

    def __init__(self, slots: int = 1):
        self._slots = threading.Semaphore(max(1, int(slots)))

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold a turn for the block (waits for one)."""
        self._slots.acquire()
        outer, _held.turns = getattr(_held, "turns", None), self
        try:
            yield
        finally:
            _held.turns = outer
            self._slots.release()


@contextmanager
def waiting() -> Iterator[None]:
    """Around a wait for something outside this process: the thread's turn goes to another partition meanwhile
    and is taken back (waiting for it) when the block ends. Nothing held inside the block may be something a
    thread that computes would wait for. A no-op in a thread that holds no turn (and when nested)."""
    turns = getattr(_held, "turns", None)
    if turns is None:
        yield
        return
    _held.turns = None
    turns._slots.release()
    try:
        yield
    finally:
        turns._slots.acquire()
        _held.turns = turns
