"""Commands that only read never import Dagster (issue 31): `evalpipe list`, `sql`, `leaderboard`, `view`,
`compare`, `summarize` run in a fresh process over a small warehouse, and Dagster must not be among the modules
that process imported. (Dagster alone costs ~1 s of a read command's start.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_reads import synthetic_metrics

ROOT = Path(__file__).resolve().parents[1]
# runs the CLI as `python -m evalpipe.cli.main ...` does, then names the Dagster modules it imported
PROBE = ("import json, runpy, sys\n"
         "sys.argv = ['evalpipe', *json.loads(sys.argv[1])]\n"
         "code = 0\n"
         "try:\n"
         "    runpy.run_module('evalpipe.cli.main', run_name='__main__')\n"
         "except SystemExit as exc:\n"
         "    code = exc.code or 0\n"
         "print('\\nDAGSTER=' + json.dumps(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.'))[:5]))\n"
         "sys.exit(code)\n")


@pytest.fixture(scope="module")
def small_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("reads_home")
    synthetic_metrics(home / "warehouse.duckdb", models=2, splits=2)
    return home


def _dagster_modules(home: Path, *argv: str) -> tuple[list[str], str]:
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("EVALS_WAREHOUSE", None)
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(argv))], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    marker = [line for line in proc.stdout.splitlines() if line.startswith("DAGSTER=")]
    assert marker, proc.stdout + proc.stderr
    return json.loads(marker[-1].split("=", 1)[1]), proc.stdout + proc.stderr


@pytest.mark.parametrize("argv", [
    ("sql", "select count(*) AS n FROM metrics"),
    ("list",),
    ("leaderboard",),
    ("summarize",),
    ("compare", "model-000", "model-001", "--split", "bench0/split0"),
    ("view", "--split", "bench0/split0", "--model", "model-000"),
], ids=lambda a: a[0])
def test_read_commands_do_not_import_dagster(small_home, argv):
    imported, output = _dagster_modules(small_home, *argv)
    assert imported == [], f"evalpipe {' '.join(argv)} imported Dagster: {imported}\n{output[-2000:]}"


def test_sql_reads_the_warehouse(small_home):
    _, output = _dagster_modules(small_home, "sql", "select count(*) AS n FROM metrics", "--json")
    assert '"n":24' in output.replace(" ", "")  # 2 models x 2 splits x 3 metrics x 2 slices


# ---- the leaderboard at scale: metrics and gates read through a rollup (evalpipe/store/rollup.py) ------------------
def _direct(wh, table: str, where: str = "TRUE"):
    return wh.query(f"SELECT * FROM {table} WHERE {where}")


def _same_rows(a, b) -> None:
    import pandas as pd

    cols = ["benchmark_split", "model", "metric", "slice"]
    a, b = (x.sort_values(cols).reset_index(drop=True)[sorted(x.columns)] for x in (a, b))
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_rollup_follows_new_replaced_and_forgotten_partitions(tmp_path):
    import pandas as pd

    from evalpipe.store.rollup import rollup_path, table_rows
    from evalpipe.store.warehouse import Warehouse

    synthetic_metrics(tmp_path / "warehouse.duckdb", models=3, splits=2)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    _same_rows(table_rows(wh, "metrics"), _direct(wh, "metrics"))
    assert rollup_path(wh, "metrics").exists()
    # a partition replaced (a re-run), one added, one forgotten: each seen at the next read
    part = {"benchmark_split": "bench0/split0", "model": "model-000"}
    old = wh.read("metrics", part)
    wh.write("metrics", old.assign(value=0.999), part)
    wh.write("metrics", old.assign(model="model-new"), {"benchmark_split": "bench0/split0", "model": "model-new"})
    wh.delete("metrics", {"benchmark_split": "bench0/split1", "model": "model-002"})
    got = table_rows(wh, "metrics", "slice = 'all'")
    _same_rows(got, _direct(wh, "metrics", "slice = 'all'"))
    assert set(got.loc[(got["model"] == "model-000") & (got["benchmark_split"] == "bench0/split0"), "value"]) == {0.999}
    assert "model-new" in set(got["model"])
    assert not ((got["model"] == "model-002") & (got["benchmark_split"] == "bench0/split1")).any()
    # a damaged rollup is rebuilt, never trusted
    rollup_path(wh, "metrics").write_bytes(b"not parquet")
    _same_rows(table_rows(wh, "metrics"), _direct(wh, "metrics"))
    # a table with no partition yet: no rows, the table's columns
    assert list(table_rows(wh, "gates").columns) == list(_direct(wh, "gates").columns)
    assert len(table_rows(wh, "gates")) == 0 and isinstance(table_rows(wh, "gates"), pd.DataFrame)


def test_leaderboard_through_the_rollup_equals_the_direct_one(tmp_path):
    import pandas as pd

    from evalpipe.pipeline.stages import build_leaderboard, leaderboard_from
    from evalpipe.store.warehouse import Warehouse

    synthetic_metrics(tmp_path / "warehouse.duckdb", models=4, splits=3)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("gates", pd.DataFrame([{"benchmark_split": "bench0/split1", "model": "model-002",
                                     "check": "samples_accounted", "passed": False, "severity": "ERROR",
                                     "description": "2 samples missing", "checked_at": "2026-11-27"}]),
             {"benchmark_split": "bench0/split1", "model": "model-002"})
    direct = build_leaderboard(wh.read_table("metrics"), gates=wh.read_table("gates"))
    for _ in range(2):  # the rollup built, then read as is
        pd.testing.assert_frame_equal(leaderboard_from(wh), direct, check_dtype=False)
    assert direct["gate"].notna().sum() == 3  # the gated partition's three metrics, listed unranked
