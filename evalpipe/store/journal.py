"""A per-partition journal of finished samples, so an interrupted run resumes where it stopped.

SQLite in WAL mode with `synchronous=NORMAL`. Finished samples are committed in small groups: `record` queues a
sample, `flush` commits everything queued in one transaction, at most `FLUSH_S` (50 ms) after a sample finished
(the driver's timer while it waits on the model, `record` itself while samples finish back to back), at every
`FLUSH_ROWS` queued samples, and at the end of a batch. A committed sample
survives the process being killed (kill -9 included; only an OS crash or power loss can drop the last few
commits); a sample that finished in the last 50 ms before a kill was not committed and simply runs again. One
commit per sample cost ~40 us of CPU each (40 s per million samples); a group commit costs about as much as one.
Lookups are one joined query per batch of fingerprints, never per sample.

Layout: `done` is append-only (a rowid table: a commit writes a few pages at its end), and `done_index` maps each
fingerprint to its latest row. The index is brought up to date by lookups, in one sorted pass once at least
`INDEX_AFTER_ROWS` rows are not yet in it; a lookup reads those few newest rows directly. A primary key on
`done` kept the same map, but it is a B-tree over random hashes: past a few 100k samples each group commit
rewrote a page of it per sample (~35 us of CPU per sample at 500k, growing), against ~5 us for this layout.
A journal written by an older version (the primary key on `done`) is converted when it is opened.

Opening is safe under concurrency (shard workers open one journal at once): a new journal's tables are made in one
`BEGIN IMMEDIATE`, and setting a malformed journal aside happens under a file lock (`<journal>.lock`, flock) with a
re-check, so one process moves it and the others open the fresh one instead of moving that aside too.

Keyed by the sample's fingerprint (runner identity = model and decoding params, the prompt, the sample id), so a
change to any of them misses the journal and re-runs exactly what it affects. Only successful samples are
recorded: failures are retried by the next run.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from evalpipe.core.errors import DataError
from evalpipe.core.jsontext import dumps
from evalpipe.store.sqlite_files import is_busy, use_wal

log = logging.getLogger(__name__)
_CHUNK = 20_000  # fingerprints per lookup query: bounded for very large partitions
INDEX_AFTER_ROWS = 100_000  # rows a lookup reads directly (not yet in done_index) before it indexes them
FLUSH_S = 0.05  # longest a finished sample waits for its commit (the driver schedules the flush)
FLUSH_ROWS = 2_000  # queued samples that trigger a commit at once
BUSY_WAIT_S = 30.0  # how long a statement waits for another process's hold on the journal


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.set_aside_to: Path | None = None  # where a malformed journal was moved (its samples run again)
        self._queued: list[tuple[str, str, str, float]] = []
        try:
            self._open()
        except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
            self._raise_if_busy(exc)
            with self._aside_lock():
                try:  # another process may have set it aside and started a fresh one meanwhile
                    self._open()
                except sqlite3.DatabaseError as again:
                    self._raise_if_busy(again)
                    self._set_aside(exc)
                    try:
                        self._open()
                    except sqlite3.DatabaseError as again:
                        raise DataError(f"resume journal {self.path} is unreadable ({again}); delete it to re-run "
                                        "that partition from scratch") from None

    @contextmanager
    def _aside_lock(self) -> Iterator[None]:
        """Held while deciding to set this journal aside (released with the file if the process dies)."""
        with open(f"{self.path}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _raise_if_busy(self, exc: sqlite3.Error) -> None:
        """A journal another process holds is healthy: never a reason to set it aside (its samples would run again)."""
        if is_busy(exc):
            raise DataError(f"resume journal {self.path} stayed locked by another process for {BUSY_WAIT_S:.0f} s "
                            f"({exc}); let that run of the partition finish, or stop it, then run again") from None

    def _open(self) -> None:
        self._con = sqlite3.connect(self.path, timeout=BUSY_WAIT_S, isolation_level=None, check_same_thread=False)
        self._opened_inode = self._inode()
        try:
            con = self._con
            use_wal(con, BUSY_WAIT_S)
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("BEGIN IMMEDIATE")  # one writer sets up (or converts) the tables
            try:
                self._create_tables()
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
            con.execute("SELECT max(rowid) FROM done").fetchone()  # reads the table's pages: damage shows here
        except sqlite3.DatabaseError:
            self._con.close()
            raise

    def _create_tables(self) -> None:
        con = self._con
        info = {r[1]: r for r in con.execute("PRAGMA table_info(done)")}
        if info and info["fingerprint"][5]:  # an older journal: fingerprint was done's primary key
            con.execute("ALTER TABLE done RENAME TO done_keyed")
        con.execute("CREATE TABLE IF NOT EXISTS done (fingerprint TEXT, sample_id TEXT, record TEXT, finished_at REAL)")
        con.execute("CREATE TABLE IF NOT EXISTS done_index (fingerprint TEXT PRIMARY KEY, rid INTEGER NOT NULL) "
                    "WITHOUT ROWID")
        con.execute("CREATE TABLE IF NOT EXISTS journal_meta (name TEXT PRIMARY KEY, value INTEGER)")
        con.execute("INSERT OR IGNORE INTO journal_meta VALUES ('indexed_upto', 0)")
        if info and info["fingerprint"][5]:
            finished = "finished_at" if "finished_at" in info else "NULL"  # (a journal from before the column)
            con.execute(f"INSERT INTO done SELECT fingerprint, sample_id, record, {finished} FROM done_keyed "
                        "ORDER BY rowid")
            con.execute("DROP TABLE done_keyed")

    def _set_aside(self, exc: Exception) -> None:
        """Move a journal SQLite can't read (and its -wal/-shm files) aside, named, so a fresh one starts: its
        samples simply run again. The damaged file is kept for inspection."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"{self.path.name}.malformed-{stamp}-{os.getpid()}")
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
            self._raise_if_busy(exc)
            try:
                self._con.close()
            except sqlite3.Error:
                pass
            with self._aside_lock():
                ino = self._inode()
                if ino is not None and ino == self._opened_inode:  # still the file we found damaged
                    self._set_aside(exc)
                self._open()
            return {}

    def _inode(self) -> int | None:
        try:
            return os.stat(self.path).st_ino
        except OSError:
            return None

    def _lookup(self, wanted: list[str], out: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not wanted:
            return out
        con = self._con
        last = con.execute("SELECT max(rowid) FROM done").fetchone()[0]
        if last is None:  # nothing journaled yet
            return out
        if last - self._indexed_upto() >= INDEX_AFTER_ROWS:
            try:
                self._index_new_rows()
            except sqlite3.OperationalError as exc:  # another writer held the journal 30 s: read the rows directly
                if "locked" not in str(exc):
                    raise
        for lo in range(0, len(wanted), _CHUNK):
            keys = dumps(wanted[lo:lo + _CHUNK])
            con.execute("BEGIN")  # one snapshot: the index and the rows after it agree
            try:
                upto = self._indexed_upto()
                rows = con.execute(
                    "SELECT d.fingerprint, d.record FROM json_each(?) w JOIN done_index i ON i.fingerprint = w.value "
                    "JOIN done d ON d.rowid = i.rid", (keys,)).fetchall()
                # the newest rows, not indexed yet, in the order they were written (the latest record wins)
                rows += con.execute(
                    "SELECT fingerprint, record FROM done WHERE rowid > ? AND fingerprint IN "
                    "(SELECT value FROM json_each(?)) ORDER BY rowid", (upto, keys)).fetchall()
            finally:
                con.execute("COMMIT")
            for fp, rec in rows:
                try:
                    parsed = json.loads(rec)
                except (TypeError, ValueError):
                    parsed = None
                if isinstance(parsed, dict):
                    out[fp] = parsed
                else:  # the latest record doesn't parse: the sample runs again
                    out.pop(fp, None)
        return out

    def _indexed_upto(self) -> int:
        return self._con.execute("SELECT value FROM journal_meta WHERE name = 'indexed_upto'").fetchone()[0]

    def _index_new_rows(self) -> None:
        """Add the rows after `indexed_upto` to done_index in one transaction, in fingerprint order (each index page
        is written once per pass, not once per sample)."""
        con = self._con
        con.execute("BEGIN IMMEDIATE")
        try:
            upto = self._indexed_upto()
            con.execute("INSERT OR REPLACE INTO done_index SELECT fingerprint, max(rowid) FROM done WHERE rowid > ? "
                        "GROUP BY fingerprint ORDER BY fingerprint", (upto,))
            con.execute("UPDATE journal_meta SET value = (SELECT coalesce(max(rowid), 0) FROM done) "
                        "WHERE name = 'indexed_upto'")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def record(self, fingerprint: str, sample_id: str, record: Mapping[str, Any], commit: bool = True) -> None:
        """Record one finished sample: committed before this returns, or with `commit=False` queued for the next
        `flush` (the driver's group commit); `FLUSH_ROWS` queued samples, or a queue whose oldest sample finished
        `FLUSH_S` ago, commit at once (samples that finish back to back without the event loop getting a turn,
        e.g. a runner answering at once, never wait for the driver's timer)."""
        now = time.time()
        queued = self._queued
        queued.append((fingerprint, sample_id, dumps(record), now))
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
            self._con.executemany("INSERT INTO done VALUES (?, ?, ?, ?)", rows)
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")

    def count(self) -> int:
        """Samples journaled (a sample recorded twice counts once)."""
        self._index_new_rows()
        return self._con.execute("SELECT count(*) FROM done_index").fetchone()[0]

    def forget(self, fingerprints: Iterable[str] | None = None) -> int:
        """Drop some (or all) records so they run again; returns how many samples were dropped."""
        con = self._con
        self._index_new_rows()
        con.execute("BEGIN IMMEDIATE")
        try:
            if fingerprints is None:
                dropped = con.execute("DELETE FROM done_index").rowcount
                con.execute("DELETE FROM done")
            else:
                keys = dumps(list(fingerprints))
                dropped = con.execute("DELETE FROM done_index WHERE fingerprint IN (SELECT value FROM json_each(?))",
                                      (keys,)).rowcount
                con.execute("DELETE FROM done WHERE fingerprint IN (SELECT value FROM json_each(?))", (keys,))
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")
        return dropped

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._con.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
