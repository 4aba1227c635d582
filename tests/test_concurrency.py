"""4 partitions materialized at once in separate processes while another process keeps a read-only DuckDB
connection open for the whole time: all succeed, nothing is lost."""
import subprocess
import sys
import textwrap

import duckdb
import pytest

from evalpipe.warehouse import Warehouse

SCRIPT = textwrap.dedent("""
    import sys
    from eval_assets.launch import CHAIN, run_assets
    from partitions import eval_key
    split, model = sys.argv[1], sys.argv[2]
    r = run_assets(CHAIN, eval_key(split, model))
    sys.exit(0 if r.success else 1)
""")

PARTITIONS = [("smoke/test", "perfect"), ("smoke/test", "parrot"), ("smoke/extra", "perfect"), ("smoke/extra", "fixed")]


@pytest.mark.slow
def test_four_writer_processes_and_an_open_reader(instance, home):
    from eval_assets.launch import run_assets, sync_model_partitions

    sync_model_partitions(instance, ["perfect", "parrot", "fixed"])
    for split in ("smoke/test", "smoke/extra"):
        assert run_assets(["dataset"], split, instance).success
    wh = Warehouse(home / "warehouse.duckdb")
    reader = duckdb.connect(str(wh.duckdb_path), read_only=True)  # held open for the whole test
    try:
        procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, s, m], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for s, m in PARTITIONS]
        outs = [(p.wait(timeout=300), p.stdout.read()) for p in procs]
        for code, out in outs:
            assert code == 0, out[-3000:]
            assert "Conflicting lock" not in out
        got = reader.execute("select benchmark_split, model, value from metrics where slice = 'all' "
                             "order by 1, 2").fetchall()
    finally:
        reader.close()
    assert got == [("smoke/extra", "fixed", 0.25), ("smoke/extra", "perfect", 1.0),
                   ("smoke/test", "parrot", 0.0), ("smoke/test", "perfect", 1.0)]
