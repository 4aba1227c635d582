"""Calls that may never return (a user's agent or tool), run where a hang costs only its own thread.

`concurrent.futures` pools, and `asyncio.to_thread` / `run_in_executor` that use one, join their threads when the
interpreter exits (`threading._register_atexit`), and `asyncio.run` waits for the default executor's threads
before it returns: one call stuck in `time.sleep(1000)` then keeps `evaluate()` or the whole process alive long
after its sample was recorded as a timeout. Here calls run on daemon threads that nothing waits for: when a
caller gives up (the sample's `timeout_s`, a tool's timeout), its thread is abandoned, and the process exits
whether it finished or not. Python cannot kill a thread; `isolation: process` (evalpipe/runners/agent.py) kills.

The threads are reused, as a pool's are, and live as long as the process: a child process an agent starts with
PDEATHSIG (`bwrap --die-with-parent`) dies with the thread that started it, so a thread per call would kill a
helper process an agent keeps between samples.
"""
from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from typing import Any, Callable

_jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
_idle = 0  # workers waiting for a job, less those already promised one
_lock = threading.Lock()


def _worker() -> None:
    global _idle
    while True:
        _jobs.get()()
        with _lock:
            _idle += 1


def _submit(job: Callable[[], None]) -> None:
    global _idle
    with _lock:
        spawn = _idle == 0
        if not spawn:
            _idle -= 1
    _jobs.put(job)
    if spawn:  # every worker is busy (or hung): one more
        threading.Thread(target=_worker, name="evalpipe-worker", daemon=True).start()


async def in_daemon_thread(call: Callable[[], Any]) -> Any:
    """`await asyncio.to_thread(call)`, on a daemon thread that is never joined. Cancelling the await (a timeout)
    abandons the call; its result, if it ever comes, is dropped."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()  # as to_thread: the caller's context variables

    def deliver(value: Any, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (cancelled)
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    def job() -> None:
        value, error = None, None
        try:
            value = context.run(call)
        except StopIteration as exc:  # a future refuses StopIteration (it would end the awaiting coroutine)
            error = RuntimeError(f"StopIteration: {exc}")
        except BaseException as exc:  # handed to the caller as it is
            error = exc
        try:
            loop.call_soon_threadsafe(deliver, value, error)
        except RuntimeError:  # the loop is closed: the run that wanted this has ended
            pass

    _submit(job)
    return await future
