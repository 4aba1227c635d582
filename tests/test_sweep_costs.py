"""[sweeps] What a cached partition costs (docs/scale.md "Sweeps"): a partition file whose new content is byte for
byte the one on disk is left as it is (a changed input or a deleted file is written), small partition files are
decoded once for their readers, a write scans its text columns for secrets in one pass."""
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


def test_a_write_scans_its_text_columns_in_one_pass_and_masks_the_same_cells(monkeypatch):
    import pyarrow as pa

    from evalpipe.core.redact import Redactor, get_redactor
    from evalpipe.store.warehouse import redact_arrow, to_arrow

    key = "sk-" + "a1B2" * 10  # an API-key-shaped string
    df = pd.DataFrame({"sample_id": ["q1", "q2", "q3"], "prediction": ["fine", f"leaked {key}", None],
                       "error": [None, None, f"auth failed for {key}"], "status": ["ok", "ok", "error"]})
    data = to_arrow("rollouts", df, fill=P)
    r = get_redactor()
    one_by_one = {f.name: [r.for_field(f.name)(v) if isinstance(v, str) and r.could_match(v) else v
                           for v in data.column(f.name).to_pylist()]
                  for f in data.schema if pa.types.is_string(f.type) and f.name not in P}
    scans = []
    real = Redactor.could_match_cells
    monkeypatch.setattr(Redactor, "could_match_cells", lambda self, cells, *a, **k: (scans.append(len(cells)),
                                                                                      real(self, cells, *a, **k))[1])
    out = redact_arrow(data, keep=P)
    assert len(scans) == 1
    assert {name: out.column(name).to_pylist() for name in one_by_one} == one_by_one
    assert key not in str(out.to_pylist()) and out.column("benchmark_split").to_pylist() == [P["benchmark_split"]] * 3


def test_the_run_folders_redaction_check_scans_each_kind_of_column_once(monkeypatch):
    import json

    import pyarrow as pa

    from evalpipe.core.redact import Redactor, get_redactor
    from evalpipe.store.artifacts import _might_redact

    key = "sk-" + "a1B2" * 10
    df = pd.DataFrame({"sample_id": ["q1", "q2", "q3", "q4"], "target": ["a", None, "c", "d"],
                       "messages": [json.dumps([{"content": "hi"}]), json.dumps([{"content": key}]), None, "[]"],
                       "metadata": ["{}", "{}", json.dumps({"api_key": "x"}), "{}"]})
    r = get_redactor()
    per_column = [False] * len(df)
    for c, as_json in (("sample_id", False), ("target", False), ("messages", True), ("metadata", True)):
        flags = r.could_match_cells(pa.array(df[c], type=pa.string(), from_pandas=True), json_text=as_json)
        per_column = [a or bool(b) for a, b in zip(per_column, flags)]
    scans = []
    real = Redactor.could_match_cells
    monkeypatch.setattr(Redactor, "could_match_cells", lambda self, cells, *a, **k: (scans.append(len(cells)),
                                                                                      real(self, cells, *a, **k))[1])
    got = _might_redact(r, df, ("sample_id", "target"), ("messages", "metadata"))
    assert got.tolist() == per_column and per_column == [False, True, True, False] and len(scans) == 2


def test_the_decoded_files_held_stay_within_their_budget(tmp_path, monkeypatch):
    import evalpipe.store.warehouse as warehouse

    held = warehouse._Decoded(limit=3 * 32768)  # (about 3 of these files held: their tables and converted frames)
    monkeypatch.setattr(warehouse, "_decoded", held)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    for m in range(20):
        part = {"benchmark_split": "qa/dev", "model": f"m{m}"}
        wh.write("rollouts", _rollouts(50, f"m{m}-"), part)
        assert wh.read("rollouts", part)["prediction"].tolist()[:1] == [f"m{m}-0"]
    assert held.size <= held.limit and 0 < len(held.items) < 20


def test_large_text_is_scanned_a_column_at_a_time_with_the_same_cells(monkeypatch):
    import evalpipe.store.warehouse as warehouse
    from evalpipe.store.warehouse import redact_arrow, to_arrow

    key = "sk-" + "a1B2" * 10
    df = pd.DataFrame({"sample_id": ["q1", "q2"], "prediction": [f"leaked {key}", "fine"], "error": [None, key]})
    data = to_arrow("rollouts", df, fill=P)
    together = redact_arrow(data, keep=P)
    monkeypatch.setattr(warehouse, "ONE_SCAN_BYTES", 0)  # (what a batch of more text than that takes)
    assert redact_arrow(data, keep=P).equals(together) and key not in str(together.to_pylist())
