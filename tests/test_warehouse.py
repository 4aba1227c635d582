import duckdb
import pandas as pd
import pytest

from evalpipe.core.errors import WarehouseError
from evalpipe.store.warehouse import Warehouse

P1 = {"benchmark_split": "qa/dev", "model": "m1"}
P2 = {"benchmark_split": "qa/dev", "model": "org/m2"}


def _metrics(value: float, n: int = 3) -> pd.DataFrame:
    return pd.DataFrame([{"metric": "exact_match", "slice": "all", "value": value, "n": n}])


def test_write_read_and_views_in_the_duckdb_file(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P1)
    wh.write("metrics", _metrics(1.0), P2)
    assert wh.read("metrics", P2)["value"].tolist() == [1.0]
    con = duckdb.connect(str(wh.duckdb_path), read_only=True)
    rows = con.execute("select model, benchmark_split, metric, value, n from metrics order by model").fetchall()
    assert rows == [("m1", "qa/dev", "exact_match", 0.5, 3), ("org/m2", "qa/dev", "exact_match", 1.0, 3)]
    # every table exists as a view, with its columns, even before it has data
    assert con.execute("select count(*) from judgements").fetchone() == (0,)
    cols = [r[0] for r in con.execute("describe rollouts").fetchall()]
    assert {"benchmark_split", "model", "sample_id", "status", "error", "prediction"} <= set(cols)


def test_rematerializing_replaces_never_duplicates(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    for v in (0.1, 0.2, 0.3):
        wh.write("metrics", _metrics(v), P1)
    assert wh.query("select value from metrics")["value"].tolist() == [0.3]
    assert wh.partitions("metrics") == [P1]


def test_partition_columns_must_agree_with_the_partition(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    bad = _metrics(0.5).assign(model="someone-else")
    with pytest.raises(WarehouseError, match="model='someone-else'"):
        wh.write("metrics", bad, P1)
    assert wh.partitions("metrics") == []  # nothing half-written


def test_unknown_columns_are_refused(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    with pytest.raises(WarehouseError, match="no column"):
        wh.write("metrics", _metrics(0.5).assign(oops=1), P1)


def test_a_failed_write_keeps_the_previous_partition(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P1)
    import pyarrow.parquet as pq

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", boom)  # partitions are written batch by batch
    from evalpipe.core.errors import WarehouseError

    with pytest.raises(WarehouseError, match="cannot write the metrics partition file .*part.parquet: OSError: disk full"):
        wh.write("metrics", _metrics(0.9), P1)
    monkeypatch.undo()
    assert wh.read("metrics", P1)["value"].tolist() == [0.5]
    assert not list(wh.root.rglob("*.tmp"))


def test_missing_partition_says_what_to_do(tmp_path):
    with pytest.raises(WarehouseError, match="materialize it first"):
        Warehouse(tmp_path / "w.duckdb").read("rollouts", P1)


def test_views_are_not_rewritten_while_a_reader_holds_the_file(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.ensure_views()
    reader = duckdb.connect(str(wh.duckdb_path), read_only=True)
    wh.write("metrics", _metrics(0.7), P1)  # must not need the DuckDB file
    assert reader.execute("select value from metrics").fetchall() == [(0.7,)]


def test_queries_share_one_duckdb_database_per_process_and_see_new_partitions(tmp_path, monkeypatch):
    opened = []
    real_connect = duckdb.connect

    def counting_connect(*args, **kwargs):
        con = real_connect(*args, **kwargs)
        if not args and not kwargs.get("database"):  # in-memory: the query side (the DuckDB file has a path)
            opened.append(con)
        return con

    monkeypatch.setattr(duckdb, "connect", counting_connect)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P1)
    assert wh.query("select model, value from metrics")["value"].tolist() == [0.5]
    # written after the first query: the views read the files at every query, so the cached database sees it
    wh.write("metrics", _metrics(1.0), P2)
    assert sorted(wh.query("select value from metrics")["value"].tolist()) == [0.5, 1.0]
    assert wh.query("select count(*) as n from judgements")["n"].tolist() == [0]
    con = wh.connect(["metrics"])
    con.close()  # a caller's close ends its cursor, not the shared database
    assert wh.query("select count(*) as n from metrics")["n"].tolist() == [2]
    assert len(opened) == 1
    # another warehouse (another folder) gets its own database and views
    other = Warehouse(tmp_path / "other" / "warehouse.duckdb")
    other.write("metrics", _metrics(0.25), P1)
    assert other.query("select value from metrics")["value"].tolist() == [0.25]
    assert len(opened) == 2
