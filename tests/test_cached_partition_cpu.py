"""[sweeps] What a cached partition costs, cut without changing what it records (issue 31): the data versions,
the instance's event rows and the warehouse files stay as they were."""
import hashlib

import numpy as np
import pandas as pd
import pytest

from evalpipe.core.fingerprint import canonical_json


def _old_content_version(frames, columns=None, **fixed) -> str:
    """ContentVersion as first written (pandas categorizing object columns before hashing them)."""
    sha = hashlib.sha256(canonical_json(fixed).encode())
    for df in frames:
        cols = [c for c in (columns or sorted(df.columns)) if c in df.columns]
        sha.update(canonical_json(cols).encode())
        if len(df):
            sha.update(pd.util.hash_pandas_object(df[cols].astype(str), index=False).values.tobytes())
    return sha.hexdigest()[:16]


FRAMES = [
    pd.DataFrame({"sample_id": ["a", "b", "a", "c"], "prediction": ["x", None, "x", "é ünïcode \x00"],
                  "score": [1.0, np.nan, 0.5, 1.0], "n": [1, 2, 3, 4], "ok": [True, False, True, True],
                  "turns": [[1, 2], None, [], {"k": "v"}], "empty": ["", "", None, ""]}),
    pd.DataFrame({"sample_id": pd.Series([], dtype=object), "prediction": pd.Series([], dtype=object)}),
    pd.DataFrame({"sample_id": ["s"] * 50, "value": list(range(50)), "none": [None] * 50,
                  "cat": pd.Categorical(["u", "v"] * 25)}),
]


@pytest.mark.parametrize("columns", [None, ["sample_id", "prediction", "missing"], ["n", "turns", "score", "sample_id"]])
def test_content_version_is_the_hash_it_always_was(columns):
    from eval_assets.assets import ContentVersion, frame_version

    v = ContentVersion(columns, fingerprint="fp", other=None)
    for df in FRAMES:
        v.add(df)
    assert v.version().value == _old_content_version(FRAMES, columns, fingerprint="fp", other=None)
    for df in FRAMES:
        assert frame_version(df, columns).value == _old_content_version([df], columns)


P = {"benchmark_split": "qa/dev", "model": "m"}


def _rollouts(n: int, prediction: str = "x") -> pd.DataFrame:
    return pd.DataFrame({"sample_id": [f"q{i}" for i in range(n)], "status": ["ok"] * n, "latency_s": [0.5] * n,
                         "prediction": [f"{prediction}{i}" if i % 3 else None for i in range(n)],
                         "input_tokens": list(range(n))})


def test_a_held_partition_is_converted_once_and_every_reader_gets_its_own_frame(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    with wh.writer("rollouts", P) as w:  # two row groups
        w.write(_rollouts(5, "a"))
        w.write(_rollouts(5, "b").assign(sample_id=[f"r{i}" for i in range(5)]))
    path = wh.partition_file("rollouts", P)
    cols = ["sample_id", "prediction", "latency_s", "input_tokens"]
    fresh = [b.to_pandas() for b in pq.ParquetFile(path).iter_batches(batch_size=4, columns=cols, use_threads=False)]
    whole = pq.read_table(path).to_pandas()
    conversions = []
    import pyarrow.pandas_compat as compat

    real = compat.table_to_dataframe  # (what Table.to_pandas and RecordBatch.to_pandas call)
    monkeypatch.setattr(compat, "table_to_dataframe", lambda *a, **k: (conversions.append(1), real(*a, **k))[1])
    for _ in range(3):
        got = list(wh.reader("rollouts", P).batches(4, cols))
        assert len(got) == len(fresh) and all(g.equals(f) and (g.dtypes == f.dtypes).all() for g, f in zip(got, fresh))
        got[0].loc[0, "prediction"] = "changed by a reader"  # no other reader sees it
        got[0]["extra"] = 1
        table = wh.read("rollouts", P)
        assert table.equals(whole) and list(table.columns) == list(whole.columns)
        table.loc[1, "sample_id"] = "changed too"
    assert len(conversions) == len(fresh) + 1  # each batch once, the whole file once
    wh.write("rollouts", _rollouts(2, "new"), P)  # a new version is converted anew
    assert wh.read("rollouts", P)["prediction"].tolist() == [None, "new1"]
    assert [len(b) for b in wh.reader("rollouts", P).batches(4, cols)] == [2]


def test_a_schema_placeholder_found_right_is_checked_again_once_its_file_changes(tmp_path, monkeypatch):
    import pyarrow.parquet as pq

    import evalpipe.store.warehouse as warehouse
    from evalpipe.core.schema import TABLES
    from evalpipe.store.warehouse import SCHEMA_FILE, Warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    placeholder = wh.table_dir("rollouts") / SCHEMA_FILE
    wh.write("rollouts", _rollouts(2), P)
    reads = []
    real = pq.read_schema
    monkeypatch.setattr(warehouse.pq, "read_schema", lambda *a, **k: (reads.append(a), real(*a, **k))[1])
    for m in range(3):
        wh.write("rollouts", _rollouts(2, f"m{m}"), {**P, "model": f"m{m}"})
    assert reads == []  # found right before, the same file since: not read again
    placeholder.write_bytes(b"not parquet")  # damaged (or replaced by another process)
    wh.write("rollouts", _rollouts(2), P)
    assert real(placeholder).equals(TABLES["rollouts"]) and len(reads) == 1
    placeholder.unlink()
    wh.write("rollouts", _rollouts(3), P)
    assert real(placeholder).equals(TABLES["rollouts"])
    assert wh.query("SELECT count(*) AS n FROM rollouts")["n"].tolist() == [2 + 2 + 2 + 3]


def test_the_views_signature_follows_the_tables_definitions(tmp_path, monkeypatch):
    import pyarrow as pa

    from evalpipe.core import schema
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    before = wh._signature()
    assert Warehouse(tmp_path / "warehouse.duckdb")._signature() == before
    assert Warehouse(tmp_path / "other.duckdb")._signature() != before  # another folder, other globs
    monkeypatch.setitem(schema.TABLES, "gates", schema.TABLES["gates"].append(pa.field("new_column", pa.string())))
    assert wh._signature() != before


def _old_preview(df, columns, n=10):
    from eval_assets.assets import redact

    cols = [c for c in columns if c in df.columns]
    short = df[cols].head(n).copy()
    for c in cols:
        if short[c].dtype == object:
            short[c] = short[c].map(lambda v: (str(v)[:80] + "...") if isinstance(v, str) and len(v) > 80 else v)
    return redact(short.to_markdown(index=False)) if len(short) else "_empty_"


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"sample_id": ["q1", "q2"], "prediction": ["short", None], "error": [None, None]}),
    pd.DataFrame({"sample_id": ["q1", "q2"], "prediction": ["x" * 81, "y" * 80], "n": [1, 2]}),
    pd.DataFrame({"sample_id": ["q1", "q2", "q3"], "value": pd.Series([1.5, None, 2], dtype=object),
                  "count": pd.Series([1, 2, None], dtype=object), "flag": pd.Series([True, None, False], dtype=object)}),
    pd.DataFrame({"sample_id": [f"q{i}" for i in range(40)], "text": ["long " * 30] * 40, "score": [0.5] * 40}),
    pd.DataFrame({"sample_id": pd.Series([], dtype=object), "prediction": pd.Series([], dtype=object)}),
])
def test_a_preview_is_the_text_it_always_was(frame):
    from eval_assets.assets import _preview

    for columns, n in ((list(frame.columns), 10), (["prediction", "missing", "sample_id"], 30)):
        assert _preview(frame, columns, n).value == _old_preview(frame, columns, n)


def test_a_runs_start_time_is_read_once_it_has_one(monkeypatch):
    from types import SimpleNamespace

    import eval_assets.assets as assets

    monkeypatch.setattr(assets, "_STARTED", {})
    asked, records = [], {"r1": SimpleNamespace(start_time=None)}
    instance = SimpleNamespace(get_run_record_by_id=lambda run_id: (asked.append(run_id), records.get(run_id))[1])
    assert assets._run_started(instance, "r1") is None  # not started yet: asked again next time
    records["r1"] = SimpleNamespace(start_time=123.5)
    assert [assets._run_started(instance, "r1") for _ in range(3)] == [123.5] * 3
    assert assets._run_started(instance, "gone") is None
    assert asked == ["r1", "r1", "gone"]


def _old_judgements_version(df) -> str:
    from evalpipe.core.fingerprint import fingerprint

    cols = [c for c in ("sample_id", "metric", "score", "status", "judge_fingerprint") if c in getattr(df, "columns", [])]
    if not cols or len(df) == 0:
        return fingerprint([], 16)
    rows = df[cols].sort_values(cols[:2]).astype(object).where(df[cols].notna(), None).values.tolist()
    return fingerprint(rows, 16)


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"sample_id": ["q2", "q1", "q1"], "metric": ["em", "em", "f1"], "score": [1.0, np.nan, 0.25],
                  "status": ["scored", "unscored", None], "judge_fingerprint": [None, "abc", np.nan]}),
    pd.DataFrame({"sample_id": ["q1", "q2"], "metric": ["em", "em"], "score": pd.Series([1, None], dtype="Int64"),
                  "status": pd.Series(["scored", pd.NA], dtype=object)}),
    pd.DataFrame({"sample_id": [3, 1, 2], "metric": ["m"] * 3, "score": [1, 0, 1], "status": [True, False, True]}),
    pd.DataFrame({"sample_id": ["q1"], "score": [0.5]}),
    pd.DataFrame({"sample_id": pd.Series([], dtype=object), "metric": pd.Series([], dtype=object)}),
    pd.DataFrame({"other": [1]}),
])
def test_the_judgements_version_is_the_hash_it_always_was(frame):
    from evalpipe.metrics.base import judgements_version

    assert judgements_version(frame) == _old_judgements_version(frame)


@pytest.mark.parametrize("models", [["m", "other"], ["m", None], pd.Categorical(["m", "x"])])
def test_a_row_of_another_partition_is_refused(tmp_path, models):
    from evalpipe.core.errors import WarehouseError
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", _rollouts(2).assign(model=["m", "m"]), P)  # its own partition's rows: written
    with pytest.raises(WarehouseError, match="but the partition is model='m'"):
        wh.write("rollouts", _rollouts(2).assign(model=models), P)
    assert wh.read("rollouts", P)["model"].tolist() == ["m", "m"]


def test_held_frames_of_any_columns_are_the_conversions_of_those_columns(tmp_path):
    import pyarrow.parquet as pq

    from evalpipe.store.warehouse import PartitionReader, Warehouse

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", _rollouts(7), P)
    path = wh.partition_file("rollouts", P)
    names = pq.read_schema(path).names

    def converted(n, cols):  # what a reader gave before frames were held: each batch's columns converted anew
        want = list(cols) if cols is not None else names
        have = [c for c in want if c in names]
        return [PartitionReader._frame(b.select(have).to_pandas(), want)
                for b in pq.ParquetFile(path).iter_batches(batch_size=n, use_threads=False)]

    for cols in (["prediction"], ["input_tokens", "sample_id"], ["latency_s", "missing_column", "status"], [],
                 ["sample_id", "sample_id"], None):
        for n in (3, 20):
            got, want = list(wh.reader("rollouts", P).batches(n, cols)), converted(n, cols)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.equals(w) and list(g.columns) == list(w.columns) and list(g.dtypes) == list(w.dtypes)
        whole = pq.read_table(path)
        want_cols = list(cols) if cols is not None else names
        w = PartitionReader._frame(whole.select([c for c in want_cols if c in names]).to_pandas(), want_cols)
        g = wh.read("rollouts", P, cols)
        assert g.equals(w) and list(g.columns) == list(w.columns) and list(g.dtypes) == list(w.dtypes)
