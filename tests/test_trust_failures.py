"""Failures provoked on purpose print one line naming the cause and the file: a truncated Parquet partition (through
the CLI, a real instance), a write past the file-size limit (RLIMIT_FSIZE, in a child process), a reader holding the
DuckDB file while the views need rebuilding, stray files, a malformed journal, leftovers of a killed write."""
import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import eval_assets.definitions  # noqa: F401  (partitions come from the test config at first import, not from ours)

from evalpipe.store.journal import Journal
from evalpipe.store.warehouse import Warehouse
from tests.helpers.configs import smoke_benchmark

REPO = Path(__file__).resolve().parents[1]
P = {"benchmark_split": "smoke/test", "model": "m"}


def _metrics(value: float, split: str = "smoke/test", model: str = "m") -> pd.DataFrame:
    return pd.DataFrame([{"benchmark_split": split, "model": model, "metric": "exact_match", "slice": "all",
                          "value": value, "n": 4}])


@pytest.mark.slow
def test_truncated_parquet_names_the_file_in_one_line(home, write_config):
    write_config(smoke_benchmark(limit=2, metrics=None) + """models:
  perfect: {runner: echo, reply: target}
  parrot: {runner: echo}
""")
    from evalpipe.cli.main import main

    cli = CliRunner()
    first = cli.invoke(main, ["run", "--model", "perfect", "--model", "parrot", "--no-progress"])
    assert first.exit_code == 0, first.output
    bad = home / "warehouse" / "metrics" / "benchmark_split=smoke%2Fextra" / "model=parrot" / "part.parquet"
    bad.write_bytes(bad.read_bytes()[:40])  # truncated, as by a full disk or a killed copy
    again = cli.invoke(main, ["run", "--model", "perfect", "--no-progress"])
    assert again.exit_code == 1, again.output
    errors = [line for line in again.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(bad) in errors[0] and "damaged metrics partition file" in errors[0], again.output
    assert "evalpipe run --split smoke/extra --model parrot" in errors[0]
    assert "^^^" not in again.output
    # the full traceback is kept in the run's log, which the line names
    log = errors[0].split("full traceback: ")[1].rstrip(")")
    assert "Traceback" in Path(log).read_text() or "Stack Trace" in Path(log).read_text()
    sql = cli.invoke(main, ["sql", "select count(*) from metrics"])
    assert sql.exit_code == 2 and str(bad) in sql.output and len(sql.output.strip().splitlines()) == 1, sql.output
    # re-materializing the named partition repairs it
    fixed = cli.invoke(main, ["run", "--model", "parrot", "--no-progress"])
    assert fixed.exit_code == 0, fixed.output


def test_write_past_the_file_size_limit_names_the_file(tmp_path):
    code = textwrap.dedent(f"""
        import resource, signal, sys
        import pandas as pd
        sys.path.insert(0, {str(REPO)!r})
        from evalpipe.store.warehouse import Warehouse
        from evalpipe.core.errors import WarehouseError, describe_exception
        wh = Warehouse({str(tmp_path / 'warehouse.duckdb')!r})
        wh.write("metrics", pd.DataFrame([{{"metric": "m", "slice": "all", "value": 1.0, "n": 1}}]),
                 {{"benchmark_split": "smoke/test", "model": "small"}})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG instead of killing us
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        big = pd.DataFrame([{{"metric": "m" * 50 + str(i), "slice": "s" * 50 + str(i), "value": float(i), "n": i}}
                            for i in range(20000)])
        try:
            wh.write("metrics", big, {{"benchmark_split": "smoke/test", "model": "big"}})
        except WarehouseError as exc:
            print(describe_exception(exc))
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = r.stdout.strip()
    assert r.returncode == 0 and len(line.splitlines()) == 1, (r.stdout, r.stderr)
    assert "cannot write the metrics partition file" in line and "model=big/part.parquet" in line
    assert "File too large" in line
    leftovers = list((tmp_path / "warehouse").rglob("*.tmp"))
    assert leftovers == []


def test_writes_succeed_while_a_reader_holds_stale_views(tmp_path, caplog):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P)
    wh._sidecar.write_text(json.dumps({"signature": "stale"}))  # views need rebuilding (e.g. a schema change)
    reader = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(wh.duckdb_path)!r}, read_only=True)
        print("open", flush=True)
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        with caplog.at_level(logging.WARNING, logger="evalpipe.store.warehouse"):
            wh.write("metrics", _metrics(0.7, model="m2"), {**P, "model": "m2"})  # must not fail
        assert "views were not rebuilt" in caplog.text and not wh.views_current()
        assert sorted(wh.query("select value from metrics")["value"]) == [0.5, 0.7]
    finally:
        reader.communicate("\n", timeout=30)
    wh.write("metrics", _metrics(0.9, model="m3"), {**P, "model": "m3"})  # the reader is gone: rebuilt now
    assert wh.views_current()
    import duckdb

    con = duckdb.connect(str(wh.duckdb_path), read_only=True)
    assert con.execute("select count(*) from metrics").fetchone()[0] == 3
    con.close()


def test_stray_files_are_skipped_with_a_warning_and_tmp_leftovers_cleaned(tmp_path, caplog):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P)
    part_dir = wh.partition_file("metrics", P).parent
    (wh.table_dir("metrics") / "notes.parquet").write_text("not parquet")
    (part_dir / "copy of part.parquet").write_bytes(wh.partition_file("metrics", P).read_bytes())
    dead = part_dir / ".part.parquet.999999.abc.tmp"  # a killed writer's leftover (no such pid)
    dead.write_bytes(b"half")
    with caplog.at_level(logging.WARNING, logger="evalpipe.store.warehouse"):
        assert wh.query("select value from metrics")["value"].tolist() == [0.5]
    assert "skipping stray file" in caplog.text and "notes.parquet" in caplog.text
    wh.write("metrics", _metrics(0.6), P)
    assert not dead.exists()
    assert wh.query("select value from metrics")["value"].tolist() == [0.6]


def test_damaged_partition_read_names_the_file(tmp_path):
    from evalpipe.core.errors import WarehouseError

    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("metrics", _metrics(0.5), P)
    f = wh.partition_file("metrics", P)
    f.write_bytes(f.read_bytes()[:30])
    with pytest.raises(WarehouseError, match="damaged metrics partition file .*part.parquet.*evalpipe run "
                                             "--split smoke/test --model m"):
        wh.read("metrics", P)
    with pytest.raises(WarehouseError, match="damaged metrics partition file"):
        wh.read_table("metrics")


def test_malformed_journal_is_set_aside_and_its_samples_rerun(tmp_path, caplog):
    path = tmp_path / "j.sqlite"
    with Journal(path) as j:
        for i in range(200):
            j.record(f"fp{i}", f"s{i}", {"text": "x" * 200})
    raw = bytearray(path.read_bytes())
    raw[4096:8192] = b"\xff" * 4096  # damage a page in the middle, keep the header
    path.write_bytes(bytes(raw))
    for extra in (path.with_name("j.sqlite-wal"), path.with_name("j.sqlite-shm")):
        extra.unlink(missing_ok=True)
    with caplog.at_level(logging.WARNING, logger="evalpipe.store.journal"):
        with Journal(path) as j:
            found = j.lookup([f"fp{i}" for i in range(200)])
            assert found == {}  # nothing trusted: every sample runs again
            j.record("fp0", "s0", {"text": "again"})
            assert j.count() == 1
            aside = j.set_aside_to
    assert aside is not None and aside.exists() and "malformed" in aside.name
    assert str(path) in caplog.text and str(aside) in caplog.text


def _can_mount_read_only(tmp_path: Path) -> bool:
    d = tmp_path / "probe"
    d.mkdir()
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {d} {d} && mount -o remount,bind,ro {d} && "
                        f"! touch {d}/x"], capture_output=True)
    return r.returncode == 0


@pytest.mark.slow
def test_read_only_warehouse_names_the_file(home, write_config, tmp_path):
    if not _can_mount_read_only(tmp_path):
        pytest.skip("needs a private mount namespace (unshare -m as root) for a read-only folder")
    cfg = write_config(smoke_benchmark(limit=2, metrics=None) + """models:
  perfect: {runner: echo, reply: target}
""")
    ro = tmp_path / "ro"
    ro.mkdir()
    import os

    env = {**os.environ, "EVALS_CONFIG": str(cfg), "DAGSTER_HOME": str(home),
           "EVALS_WAREHOUSE": str(ro / "warehouse.duckdb")}
    r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && "
                        f"exec {sys.executable} -m evalpipe.cli.main run --no-progress"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    assert f"{ro}/warehouse/" in errors[0] and "Read-only file system" in errors[0], errors
    assert "Error occurred while handling output" not in out and "caused by FileNotFoundError" not in out
    assert "1 partition(s) failed too, first smoke/extra x perfect: dataset: cannot write the datasets" in errors[0]
