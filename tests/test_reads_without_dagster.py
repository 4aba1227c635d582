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
