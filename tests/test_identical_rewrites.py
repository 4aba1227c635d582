"""[sweeps] A partition file whose new content is byte for byte the one on disk is left as it is (no fsync, no
rename): a cached re-run of a sweep rewrites nothing, a changed input or a deleted file is written
(docs/scale.md "Sweeps")."""
import os

import pandas as pd
import pytest

from evalpipe.store.warehouse import Warehouse

P = {"benchmark_split": "qa/dev", "model": "m1"}


def _metrics(value: float) -> pd.DataFrame:
    return pd.DataFrame([{"metric": "exact_match", "slice": "all", "value": value, "n": 3}])


def _stamp(path) -> tuple:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def test_the_same_content_again_leaves_the_file_alone(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    path = wh.write("metrics", _metrics(0.5), P)
    before = _stamp(path)
    os.utime(path, ns=(before[1] - 10**9, before[1] - 10**9))  # an older mtime: a rewrite would show
    before = _stamp(path)
    assert wh.write("metrics", _metrics(0.5), P) == path
    assert _stamp(path) == before
    assert not [p for p in path.parent.iterdir() if p.name != path.name]  # no temp file left behind
    assert wh.read("metrics", P)["value"].tolist() == [0.5]


def test_changed_content_is_written(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    path = wh.write("metrics", _metrics(0.5), P)
    before = _stamp(path)
    wh.write("metrics", _metrics(0.75), P)
    assert _stamp(path) != before
    assert wh.read("metrics", P)["value"].tolist() == [0.75]


def test_a_deleted_partition_file_is_written_again(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    path = wh.write("metrics", _metrics(0.5), P)
    path.unlink()
    wh.write("metrics", _metrics(0.5), P)
    assert path.exists() and wh.read("metrics", P)["value"].tolist() == [0.5]


def test_a_damaged_file_of_the_same_size_is_written_again(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    path = wh.write("metrics", _metrics(0.5), P)
    good = path.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    path.write_bytes(bytes(bad))
    wh.write("metrics", _metrics(0.5), P)
    assert path.read_bytes() == good


def test_a_partitions_reviews_are_read_without_duckdb_when_the_warehouse_has_none(tmp_path, monkeypatch):
    from evalpipe.metrics.reviews import new_review_id, write_reviews
    from evalpipe.store.artifacts import partition_reviews

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P)  # (the schema placeholders exist)
    calls = []
    real = Warehouse.query
    monkeypatch.setattr(Warehouse, "query", lambda self, *a, **k: (calls.append(a), real(self, *a, **k))[1])
    assert partition_reviews(wh, "qa/dev", "m1") == [] and not calls  # no review anywhere: no query
    review = {"review_id": new_review_id(), "benchmark_split": "qa/dev", "reviewer": "ann", "source": "person",
              "created_at": "2026-01-01T00:00:00", "kind": "verdict", "sample_id": "q1", "model": "m1",
              "verdict": "correct"}
    write_reviews(wh, [review])
    got = partition_reviews(wh, "qa/dev", "m1")
    assert [r["review_id"] for r in got] == [review["review_id"]] and calls
    assert partition_reviews(wh, "qa/dev", "m2") == []


def _rollouts(n: int, prediction: str = "x") -> pd.DataFrame:
    return pd.DataFrame({"sample_id": [f"q{i}" for i in range(n)], "status": ["ok"] * n,
                         "prediction": [f"{prediction}{i}" for i in range(n)]})


def test_a_small_partition_is_decoded_once_for_its_readers(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import evalpipe.store.warehouse as warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    with wh.writer("rollouts", P) as w:  # three row groups: batches as the file's reader cuts them
        for part in range(3):
            w.write(_rollouts(5, f"p{part}-").assign(sample_id=[f"q{part}-{i}" for i in range(5)]))
    want = [b.to_pandas() for b in pq.ParquetFile(wh.partition_file("rollouts", P)).iter_batches(
        batch_size=4, columns=["sample_id", "prediction"], use_threads=False)]
    opened = []
    real = pq.ParquetFile
    monkeypatch.setattr(warehouse.pq, "ParquetFile", lambda *a, **k: (opened.append(a), real(*a, **k))[1])
    for _ in range(3):  # (the stages, the checks and the run folder each read it)
        r = wh.reader("rollouts", P)
        got = list(r.batches(4, ["sample_id", "prediction"]))
        assert len(got) == len(want) and all(g.equals(w) for g, w in zip(got, want))
        assert r.to_pandas(["prediction"])["prediction"].tolist() == [f"p{p}-{i}" for p in range(3) for i in range(5)]
        assert len(r) == 15
    assert len(opened) <= 2  # (its footer, and its batches once)
    wh.write("rollouts", _rollouts(2, "new"), P)  # a new version is read, not the one held
    assert wh.read("rollouts", P)["prediction"].tolist() == ["new0", "new1"]
    assert len(wh.reader("rollouts", P)) == 2
