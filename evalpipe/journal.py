"""A per-partition journal of finished samples, so an interrupted run resumes where it stopped.

SQLite in WAL mode with `synchronous=NORMAL`: each finished sample is its own committed transaction as soon
as it finishes, which survives the process being killed (kill -9 included; only an OS crash or power loss can
drop the last few commits, and then those samples simply run again). A commit costs tens of microseconds
because WAL appends without fsync. Lookups for a whole partition are one joined query, done once per run, never
per sample.

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


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside_to: Path | None = None  # where a malformed journal was moved (its samples run again)
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

    def record(self, fingerprint: str, sample_id: str, record: Mapping[str, Any]) -> None:
        """Commit one finished sample (its own transaction: durable the moment this returns)."""
        self._con.execute("INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?)",
                          (fingerprint, sample_id, json.dumps(record, ensure_ascii=False, default=str), time.time()))

    def count(self) -> int:
        return self._con.execute("SELECT count(*) FROM done").fetchone()[0]

    def forget(self, fingerprints: Iterable[str] | None = None) -> int:
        """Drop some (or all) records so they run again; returns how many were dropped."""
        if fingerprints is None:
            return self._con.execute("DELETE FROM done").rowcount
        return sum(self._con.execute("DELETE FROM done WHERE fingerprint = ?", (f,)).rowcount for f in fingerprints)

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
