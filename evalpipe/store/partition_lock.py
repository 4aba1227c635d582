"""One partition, one writer: a stage that calls models (rollouts, judgements) holds a lock per partition, so a
second run of a partition that is running waits for it and then finds every sample in the journal (no second set
of model calls), or, with `EVALS_PARTITION_WAIT_S=0`, refuses with one line naming the running run.

The lock is `fcntl.flock` on `$DAGSTER_HOME/locks/<stage>/<split>/<model>.lock`: the kernel releases it when its
holder exits, killed included (no stale lock to clear), and it excludes threads of one process too (each hold opens
the file anew; flock locks belong to the open file). Taken inside the asset, it covers every way a partition runs:
`evalpipe run`, `evaluate()`, the Dagster UI, backfills, sensors. The holder writes its run id, pid and host into
the file for the waiter's message.

Across machines it holds only where DAGSTER_HOME is one shared volume whose file system honours flock across
clients (Linux NFSv4 does, by byte-range locks; there two threads of one process don't exclude each other):
docs/operations.md#one-partition-one-writer.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping
from urllib.parse import quote

from evalpipe.core.errors import ConfigError, RunFailed
from evalpipe.core.turns import waiting

log = logging.getLogger(__name__)
WAIT_ENV = "EVALS_PARTITION_WAIT_S"  # how long a run waits for another run of its partition; 0: refuse at once
POLL_S = 0.1


class PartitionBusy(RunFailed):
    """Another run holds this partition and this one was told not to wait (or waited its limit)."""


def lock_path(stage: str, partition: Mapping[str, str]) -> Path:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        from evalpipe.core.config import dagster_home

        home = str(dagster_home())
    return Path(home, "locks", stage, *(quote(str(v), safe="") for v in list(partition.values())[:-1]),
                f"{quote(str(list(partition.values())[-1]), safe='')}.lock")


def wait_limit() -> float | None:
    """Seconds to wait for a running run of the same partition (None: as long as it runs)."""
    raw = os.environ.get(WAIT_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{WAIT_ENV}={raw!r} is not a number of seconds (0 refuses at once; unset waits)") from None
    if value < 0:
        raise ConfigError(f"{WAIT_ENV}={raw!r} is negative; use 0 to refuse at once or unset it to wait")
    return value


def _try_lock(fh: Any) -> bool:
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def holder(path: Path) -> str:
    """Who holds the lock, as the holder wrote it ("run 1a2b3c4d (pid 42 on host, since 17:30:12)")."""
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "another run"
    since = time.strftime("%H:%M:%S", time.localtime(info["since"])) if info.get("since") else "?"
    run = f"run {info['run_id']}" if info.get("run_id") else "a run"
    return f"{run} (pid {info.get('pid', '?')} on {info.get('host', '?')}, since {since})"


@contextmanager
def hold(stage: str, partition: Mapping[str, str], run_id: str | None = None,
         warn: Callable[[str], Any] | None = None, wait_s: float | None = -1.0) -> Iterator[None]:
    """Hold `stage` of `partition` for the block. When another run holds it: wait (saying so once through `warn`)
    for up to `wait_s` seconds (None: no limit; the default reads EVALS_PARTITION_WAIT_S), or refuse at once when
    that is 0. The waiter then runs against the journal the holder filled, so only samples it left undone call the
    model."""
    if wait_s is not None and wait_s < 0:
        wait_s = wait_limit()
    path = lock_path(stage, partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    label = "|".join(str(v) for v in partition.values())
    fh = open(path, "a+")
    try:
        if not _try_lock(fh):
            who = holder(path)
            if wait_s is not None and wait_s <= 0:
                raise PartitionBusy(f"{stage} of {label} is already running in {who}; wait for it to finish (a re-run "
                                    f"then reuses its results) or stop it (unset {WAIT_ENV} to wait instead)")
            (warn or log.warning)(f"{stage} of {label} is running in {who}: waiting for it to finish, then reusing "
                                  "its results")
            deadline = None if wait_s is None else time.monotonic() + wait_s
            with waiting():  # [sweeps] a batch's other partitions compute meanwhile (core/turns.py)
                while not _try_lock(fh):
                    if deadline is not None and time.monotonic() > deadline:
                        raise PartitionBusy(f"{stage} of {label} is still running in {holder(path)} after "
                                            f"{wait_s:g} s of waiting ({WAIT_ENV}); retry when it has finished")
                    time.sleep(POLL_S)
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
                             "since": time.time()}))
        fh.flush()
        try:
            yield
        finally:
            fh.truncate(0)  # (still held): a later waiter never reads a finished holder's name
    finally:
        fh.close()  # releases the lock
