"""Many processes doing one thing at the same instant (races on first creation of a file, a schema, a lock)."""
import multiprocessing
from typing import Callable


def forked_at_once(target: Callable, arg, n: int = 8, timeout_s: float = 60) -> list[int]:
    """Runs target(arg, i, barrier) in n forked processes (forked: no import time), each past barrier.wait() at once;
    their exit codes."""
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(n)
    procs = [ctx.Process(target=target, args=(arg, i, barrier)) for i in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    return [p.exitcode for p in procs]
