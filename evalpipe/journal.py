"""A per-partition journal of finished samples, so an interrupted run resumes where it stopped.

SQLite in WAL mode with `synchronous=NORMAL`. Finished samples are committed in small groups: `record` queues a
sample, `flush` commits everything queued in one transaction, at most `FLUSH_S` (50 ms) after a sample finished
(the driver's timer while it waits on the model, `record` itself while samples finish back to back), at every
`FLUSH_ROWS` queued samples, and at the end of a batch. A committed sample
survives the process being killed (kill -9 included; only an OS crash or power loss can drop the last few
commits); a sample that finished in the last 50 ms before a kill was not committed and simply runs again. One
commit per sample cost ~40 us of CPU each (40 s per million samples); a group commit costs about as much as one.
Lookups are one joined query per batch of fingerprints, never per sample.

Keyed by the sample's fingerprint (runner identity = model and decoding params, the prompt, the sample id), so a
change to any of them misses the journal and re-runs exactly what it affects. Only successful samples are
recorded: failures are retried by the next run.
"""
from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from evalpipe.errors import DataError

log = logging.getLogger(__name__)
_CHUNK = 20_000  # fingerprints per lookup batch: bounded temp-table size for very large partitions
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)  # (json.dumps with options builds one per call)
FLUSH_S = 0.05  # longest a finished sample waits for its commit (the driver schedules the flush)
FLUSH_ROWS = 2_000  # queued samples that trigger a commit at once


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside_to: Path | None = None  # where a malformed journal was moved (its samples run again)
        self._queued: list[tuple[str, str, str, float]] = []
        try:
            self._open()
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            self._set_aside(exc)
            try:
                self._open()
            except sqlite3.DatabaseError as again:
                raise DataError(f"resume journal {self.path} is unreadable ({again}); delete it to re-run that "
                                "partition from scratch") from None

    def _open(self) -> None:
        self._con = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        try:
            self._con.execute("PRAGMA journal_mode=WAL")
            self._con.execute("PRAGMA synchronous=NORMAL")
            self._con.execute("CREATE TABLE IF NOT EXISTS done (fingerprint TEXT PRIMARY KEY, sample_id TEXT, "
                              "record TEXT, finished_at REAL)")
            cols = {r[1] for r in self._con.execute("PRAGMA table_info(done)")}
            if "finished_at" not in cols:  # a journal from before the column existed
                self._con.execute("ALTER TABLE done ADD COLUMN finished_at REAL")
            self._con.execute("SELECT count(*) FROM done").fetchone()  # reads the table: damage shows here
        except sqlite3.DatabaseError:
            self._con.close()
            raise

    def _set_aside(self, exc: Exception) -> None:
        """Move a journal SQLite can't read (and its -wal/-shm files) aside, named, so a fresh one starts: its
        samples simply run again. The damaged file is kept for inspection."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.malformed-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            src = Path(str(self.path) + suffix)
            if src.exists():
                src.replace(Path(str(aside) + suffix))
        self.set_aside_to = aside
        log.warning("resume journal %s is malformed (%s); moved it to %s, its samples run again", self.path, exc, aside)

    def lookup(self, fingerprints: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Finished records for these fingerprints, in one pass per 20k (no query per sample).
        A record that doesn't parse counts as not finished (it runs again)."""
        out: dict[str, dict[str, Any]] = {}
        wanted = list(fingerprints)
        try:
            return self._lookup(wanted, out)
        except sqlite3.DatabaseError as exc:  # damage found while reading: start afresh, everything runs again
            try:
                self._con.close()
            except sqlite3.Error:
                pass
            self._set_aside(exc)
            self._open()
            return {}

    def _lookup(self, wanted: list[str], out: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not wanted or self.count() == 0:
            return out
        self._con.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (fingerprint TEXT PRIMARY KEY)")
        for lo in range(0, len(wanted), _CHUNK):
            self._con.execute("BEGIN")
            self._con.execute("DELETE FROM wanted")
            self._con.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((f,) for f in wanted[lo:lo + _CHUNK]))
            rows = self._con.execute(
                "SELECT d.fingerprint, d.record FROM done d JOIN wanted w USING (fingerprint)").fetchall()
            self._con.execute("COMMIT")
            for fp, rec in rows:
                try:
                    parsed = json.loads(rec)
                except (TypeError, ValueError):
                    continue
                if isinstance(parsed, dict):
                    out[fp] = parsed
        return out

    def record(self, fingerprint: str, sample_id: str, record: Mapping[str, Any], commit: bool = True) -> None:
        """Record one finished sample: committed before this returns, or with `commit=False` queued for the next
        `flush` (the driver's group commit); `FLUSH_ROWS` queued samples, or a queue whose oldest sample finished
        `FLUSH_S` ago, commit at once (samples that finish back to back without the event loop getting a turn,
        e.g. a runner answering at once, never wait for the driver's timer)."""
        now = time.time()
        queued = self._queued
        queued.append((fingerprint, sample_id, _ENCODER.encode(record), now))
        if commit or len(queued) >= FLUSH_ROWS or now - queued[0][3] >= FLUSH_S:
            self.flush()

    @property
    def queued(self) -> int:
        return len(self._queued)

    def flush(self) -> None:
        """Commit every queued sample, in one transaction."""
        if not self._queued:
            return
        rows, self._queued = self._queued, []
        self._con.execute("BEGIN")
        try:
            self._con.executemany("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?)", rows)
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def count(self) -> int:
        return self._con.execute("SELECT count(*) FROM done").fetchone()[0]

    def forget(self, fingerprints: Iterable[str] | None = None) -> int:
        """Drop some (or all) records so they run again; returns how many were dropped."""
        if fingerprints is None:
            return self._con.execute("DELETE FROM done").rowcount
        return sum(self._con.execute("DELETE FROM done WHERE fingerprint = ?", (f,)).rowcount for f in fingerprints)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._con.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
