"""SQLite files that several processes open at once (the resume journal, the shared rate-limit store)."""
from __future__ import annotations

import random
import sqlite3
import time

_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def is_busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the file for now: nothing is wrong with it (not a reason to set it aside)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES  # extended codes (SQLITE_BUSY_RECOVERY, ...) keep the primary in the low byte
    return "locked" in str(exc) or "busy" in str(exc)


def use_wal(con: sqlite3.Connection | sqlite3.Cursor, wait_s: float) -> None:
    """Put the file in WAL mode, waiting up to `wait_s` for other processes. SQLite fails this at once with "database
    is locked", skipping the busy timeout, while another process is creating the file, recovering its WAL or closing
    the last connection to it, so it is retried here."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01 + random.random() * 0.04)
