"""A full disk said as such: SQLite reports a write that found no room as "database or disk is full" or, as often,
as a bare "disk I/O error"; neither names the file or says that freeing space is the fix."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Any

from evalpipe.core.errors import EvalError

LOW_FREE_BYTES = 1 << 20  # under this much free, an I/O error while writing is taken for a full disk


class DiskFull(EvalError):
    """The disk holding a file evalpipe writes has no room left."""


def _free_bytes(path: Path) -> int | None:
    for p in (path, *path.parents):  # the file may not exist yet: its nearest existing folder
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return None


def _kb(n: int) -> str:
    return f"{n // 1024:,} KB"


def disk_full(path: str | os.PathLike, exc: BaseException, setting: str = "DAGSTER_HOME") -> DiskFull | None:
    """The one-line error for `exc` when it is the disk holding `path` being full, else None. `setting`: what moves
    the file to another disk."""
    text = str(exc).lower()
    certain = "database or disk is full" in text or getattr(exc, "errno", None) == errno.ENOSPC
    if not (certain or "disk i/o error" in text):
        return None
    path = Path(path)
    free = _free_bytes(path)
    if not certain and (free is None or free >= LOW_FREE_BYTES):
        return None  # an I/O error on a disk with room: something else (kept as it is)
    room = f" ({_kb(free)} free)" if free is not None else ""
    return DiskFull(f"the disk holding {path} is full{room}; free space on it or point {setting} at a disk with "
                    "room, then re-run")
