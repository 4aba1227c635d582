"""The resume journal on its own: durable per-sample commits, one-pass lookups, damaged files."""
import sqlite3

import pytest

from evalpipe.core.errors import DataError
from evalpipe.store.journal import Journal


def test_records_survive_reopening_and_lookup_returns_only_wanted(tmp_path):
    path = tmp_path / "j" / "x.sqlite"
    with Journal(path) as j:
        for i in range(5):
            j.record(f"f{i}", f"s{i}", {"sample_id": f"s{i}", "raw_output": f"out {i}", "status": "ok"})
        j.record("f1", "s1", {"sample_id": "s1", "raw_output": "again", "status": "ok"})  # replaced, not duplicated
    with Journal(path) as j:
        assert j.count() == 5
        got = j.lookup(["f1", "f3", "nope"])
        assert set(got) == {"f1", "f3"} and got["f1"]["raw_output"] == "again"
        assert j.lookup([]) == {}
        assert j.forget(["f3"]) == 1 and j.count() == 4


def test_lookup_of_many_fingerprints_is_chunked(tmp_path):
    with Journal(tmp_path / "x.sqlite") as j:
        con = j._con
        con.execute("BEGIN")
        con.executemany("INSERT INTO done VALUES (?, ?, ?, 0)", ((f"f{i}", f"s{i}", '{"i": %d}' % i) for i in range(50_000)))
        con.execute("COMMIT")
        got = j.lookup(f"f{i}" for i in range(0, 60_000, 2))
        assert len(got) == 25_000 and got["f49998"] == {"i": 49998}


def test_a_damaged_record_reruns_and_a_damaged_file_is_a_clear_error(tmp_path):
    path = tmp_path / "x.sqlite"
    with Journal(path) as j:
        j.record("good", "s1", {"a": 1})
    con = sqlite3.connect(path)
    con.execute("INSERT INTO done VALUES ('bad', 's2', '{not json', 0)")
    con.commit()
    con.close()
    with Journal(path) as j:
        assert set(j.lookup(["good", "bad"])) == {"good"}
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with Journal(junk) as j:  # set aside, named, and a fresh journal: its samples run again (issue 12)
        assert j.count() == 0 and j.set_aside_to is not None and j.set_aside_to.read_bytes().startswith(b"this is")


def test_lookups_see_indexed_and_newest_rows_and_the_latest_record_wins(tmp_path, monkeypatch):
    import evalpipe.store.journal as journal_mod

    monkeypatch.setattr(journal_mod, "INDEX_AFTER_ROWS", 3)  # index every few rows: both read paths are used
    path = tmp_path / "x.sqlite"
    with Journal(path) as j:
        for i in range(5):
            j.record(f"f{i}", f"s{i}", {"v": i})
        assert set(j.lookup(["f0", "f4", "nope"])) == {"f0", "f4"}  # 5 rows not indexed: indexed now
        j.record("f0", "s0", {"v": "new"})  # newer than its indexed row, read from the unindexed rows
        j.record("f5", "s5", {"v": 5})
        got = j.lookup(["f0", "f1", "f5"])
        assert got == {"f0": {"v": "new"}, "f1": {"v": 1}, "f5": {"v": 5}}
        j._con.execute("INSERT INTO done VALUES ('f1', 's1', '{not json', 0)")  # the latest record of f1 is damaged
        assert set(j.lookup(["f0", "f1"])) == {"f0"}
    with Journal(path) as j:  # the same answers after reopening, and each sample counts once
        assert j.lookup(["f0", "f5"]) == {"f0": {"v": "new"}, "f5": {"v": 5}}
        assert j.count() == 6
        assert j.forget(["f0", "f5"]) == 2 and j.lookup(["f0", "f5"]) == {} and j.count() == 4


@pytest.mark.parametrize("finished_at", [True, False])
def test_a_journal_of_the_older_layout_is_converted_when_opened(tmp_path, finished_at):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE done (fingerprint TEXT PRIMARY KEY, sample_id TEXT, record TEXT"
                + (", finished_at REAL)" if finished_at else ")"))
    con.executemany("INSERT INTO done VALUES (?, ?, ?" + (", 1.5)" if finished_at else ")"),
                    [(f"f{i}", f"s{i}", '{"i": %d}' % i) for i in range(3)])
    con.commit()
    con.close()
    with Journal(path) as j:
        assert j.lookup(["f0", "f2", "f9"]) == {"f0": {"i": 0}, "f2": {"i": 2}}
        j.record("f3", "s3", {"i": 3})
        assert j.count() == 4
    con = sqlite3.connect(path)
    assert [r[5] for r in con.execute("PRAGMA table_info(done)")] == [0, 0, 0, 0]  # no key on `done` any more
    assert con.execute("SELECT finished_at FROM done WHERE fingerprint = 'f0'").fetchone()[0] == (
        1.5 if finished_at else None)
    con.close()


def test_a_journal_another_process_holds_is_never_set_aside(tmp_path, monkeypatch):
    """"database is locked" is another writer, not damage: the journal and its finished samples stay where they are
    (it used to be moved aside as malformed, and its samples ran again)."""
    import evalpipe.store.journal as journal

    path = tmp_path / "x.sqlite"
    with Journal(path) as j:
        j.record("f1", "s1", {"sample_id": "s1", "raw_output": "done", "status": "ok"})
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another run of the partition, writing
    monkeypatch.setattr(journal, "BUSY_WAIT_S", 0.2)
    with pytest.raises(DataError, match="stayed locked by another process"):
        Journal(path)
    holder.execute("ROLLBACK")
    holder.close()
    assert not list(tmp_path.glob("x.sqlite.malformed*"))
    with Journal(path) as j:
        assert j.lookup(["f1"])["f1"]["raw_output"] == "done" and j.set_aside_to is None
