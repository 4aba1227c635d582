"""4 partitions materialized at once in separate processes while another process keeps a read-only DuckDB
connection open for the whole time: all succeed, nothing is lost."""
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from evalpipe.store.warehouse import Warehouse
from tests.helpers.configs import smoke_benchmark
from tests.helpers.procs import forked_at_once

SCRIPT = textwrap.dedent("""
    import sys
    from eval_assets.launch import CHAIN, run_assets
    from partitions import eval_key
    split, model = sys.argv[1], sys.argv[2]
    r = run_assets(CHAIN, eval_key(split, model))
    sys.exit(0 if r.success else 1)
""")

ROOT = Path(__file__).resolve().parents[1]
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


def _start_run(env, *args):
    return subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _said_waiting(home) -> list[str]:
    """The messages of runs in this home that waited for another run of their partition (their Dagster run logs)."""
    from dagster import DagsterInstance

    with DagsterInstance.get() as inst:
        return [e.user_message for r in inst.get_runs() for e in inst.all_logs(r.run_id)
                if "is running in run " in (e.user_message or "")]


@pytest.mark.slow
def test_one_partition_one_writer_no_second_set_of_model_calls(tmp_path, monkeypatch):
    """A second run of a partition that is running waits for it and reuses its results (one request per sample,
    counted by a loopback server); with EVALS_PARTITION_WAIT_S=0 a third refuses in one line naming the run.
    On eaf6be7: 64 requests for 40 samples, and no refusal (issue 20 item 7)."""
    import json
    import os

    from benchmarks.mock_server import MockLLM, serve_in_thread

    n = 40
    data = tmp_path / "many.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "question": f"q{i}?", "answer": f"a{i}"}) + "\n"
                            for i in range(n)))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster_home" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # the first run's rollouts stay slow (1 s a sample, one at a time) until the other two have met its lock
    with serve_in_thread(MockLLM(latency=1.0)) as (mock, url):
        config = tmp_path / "evals.yaml"
        config.write_text(smoke_benchmark("test", path=data) + f"""models:
  m: {{runner: litellm, model: openai/m, api_base: "{url}", options: {{concurrency: 1}}}}
""")
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
        env.update(DAGSTER_HOME=str(home), EVALS_CONFIG=str(config), EVALS_WARM="0", PYTHONPATH=str(ROOT))
        first = _start_run(env, "--model", "m")
        deadline = time.monotonic() + 120
        while mock.requests == 0 and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # until the first run's rollouts have started
        assert mock.requests, first.communicate()[0][-3000:]
        second = _start_run(env, "--model", "m")
        refused = _start_run({**env, "EVALS_PARTITION_WAIT_S": "0"}, "--model", "m")
        while (refused.poll() is None or not _said_waiting(home)) and time.monotonic() < deadline:
            time.sleep(0.5)
        mock.latency = 0.0  # both met it (or the deadline passed): let the first run finish
        outs = [p.communicate(timeout=240)[0] for p in (first, second, refused)]
        codes = [p.returncode for p in (first, second, refused)]
    assert codes[:2] == [0, 0], outs[0][-2000:] + outs[1][-2000:]
    assert mock.requests == n and set(mock.counts.values()) == {1}, (mock.requests, outs[1][-2000:])
    # the third found the first's rollouts running: refused, naming it (the CLI's failed-partition line), exit 1
    assert codes[2] == 1, outs[2][-2000:]
    err = [ln for ln in outs[2].splitlines() if "PartitionBusy" in ln]
    assert len(err) == 1 and "rollouts of smoke/test|m is already running in run " in err[0], outs[2][-2000:]
    # the second waited (its Dagster run log says for whom), then took every sample from the journal
    said = _said_waiting(home)
    assert len(said) == 1 and said[0].startswith("rollouts of smoke/test|m is running in run "), said


def _journal_writer(path: str, i: int, barrier) -> None:
    from evalpipe.store.journal import Journal

    barrier.wait(30)
    with Journal(path) as j:
        j.record(f"fp{i}", f"s{i}", {"i": i})


def _warehouse_writer(path: str, i: int, barrier) -> None:
    import pandas as pd

    barrier.wait(30)
    Warehouse(path).write("metrics", pd.DataFrame({"benchmark_split": ["s"], "model": [f"m{i}"], "metric": ["x"],
                                                   "slice": ["all"], "value": [float(i)]}),
                          {"benchmark_split": "s", "model": f"m{i}"})


@pytest.mark.parametrize("start", ["missing", "malformed"])
def test_a_journal_created_or_set_aside_by_many_processes_at_once_keeps_every_record(tmp_path, start):
    """Shard workers open one partition's journal at once: created (or a malformed one set aside) exactly once,
    every process's record in the journal that stays. (Held on eaf6be7 too in 10 trials; the set-aside now also
    runs under a lock with a re-check, so a late process can't move the fresh journal aside.)"""
    from evalpipe.store.journal import Journal

    path = tmp_path / "j.sqlite"
    if start == "malformed":
        path.write_bytes(b"not a database" * 100)
    assert forked_at_once(_journal_writer, str(path)) == [0] * 8
    with Journal(path) as j:
        assert j.count() == 8
    aside = [f for f in tmp_path.glob("j.sqlite.malformed-*") if not f.name.endswith(("-wal", "-shm"))]
    assert len(aside) == (start == "malformed")


def test_a_fresh_warehouse_written_by_many_processes_at_once(tmp_path, monkeypatch):
    """The first writes to a new warehouse (schema files, the DuckDB views) from 8 processes at once."""
    monkeypatch.delenv("EVALS_WAREHOUSE_URI", raising=False)
    path = tmp_path / "warehouse.duckdb"
    assert forked_at_once(_warehouse_writer, str(path)) == [0] * 8
    assert Warehouse(path).query("select count(*) as n from metrics")["n"][0] == 8
    con = duckdb.connect(str(path), read_only=True)  # the views were made in the file
    try:
        assert con.execute("select count(*) from metrics").fetchone()[0] == 8
    finally:
        con.close()
