"""A per-partition journal of finished samples, so an interrupted run resumes where it stopped.

SQLite in WAL mode: every finished sample is committed as it finishes, a `kill -9` loses nothing committed,
and lookups for a whole partition are one indexed query. Keyed by the sample's fingerprint (model, decoding
params, prompt, sample), so a change to any of them misses the journal and re-runs exactly what it affects.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Iterable, Mapping


class Journal:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self._con.execute("PRAGMA journal_mode=WAL")
        self._con.execute("PRAGMA synchronous=NORMAL")  # survives a process crash; fsync happens at checkpoints
        self._con.execute("CREATE TABLE IF NOT EXISTS done (fingerprint TEXT PRIMARY KEY, sample_id TEXT, record TEXT)")

    def lookup(self, fingerprints: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Finished records for these fingerprints, in one pass (no query per sample)."""
        wanted = list(fingerprints)
        if not wanted:
            return {}
        self._con.execute("CREATE TEMP TABLE IF NOT EXISTS wanted (fingerprint TEXT PRIMARY KEY)")
        self._con.execute("DELETE FROM wanted")
        self._con.executemany("INSERT OR IGNORE INTO wanted VALUES (?)", ((f,) for f in wanted))
        rows = self._con.execute("SELECT d.fingerprint, d.record FROM done d JOIN wanted w USING (fingerprint)")
        return {fp: json.loads(rec) for fp, rec in rows}

    def record(self, fingerprint: str, sample_id: str, record: Mapping[str, Any]) -> None:
        self._con.execute("INSERT OR REPLACE INTO done VALUES (?, ?, ?)",
                          (fingerprint, sample_id, json.dumps(record, default=str)))

    def count(self) -> int:
        return self._con.execute("SELECT count(*) FROM done").fetchone()[0]

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
