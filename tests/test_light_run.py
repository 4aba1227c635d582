"""A lighter `evalpipe run`: Dagster's SQLite storage without an fsync per event (evalpipe/instance_storage.py),
and the partitions of one run going concurrently (eval_assets/launch.py)."""
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import eval_assets.launch  # noqa: F401  the partitions are read at import: from the test config, not a test's own

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fast_home(home):
    from evalpipe.instance_storage import storage_yaml

    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + storage_yaml())
    return home


def test_fast_storage_is_dagsters_own_tables(fast_home, monkeypatch):
    """A run on the fast storage is readable by Dagster's stock storage classes on the same folder (same files,
    same tables), its connections use synchronous=NORMAL in WAL mode, and a finished run leaves no WAL behind."""
    from dagster import DagsterInstance

    from eval_assets.launch import run_assets, sync_model_partitions
    from evalpipe.instance_storage import FastSqliteEventLogStorage, engine_for

    with DagsterInstance.get() as inst:
        assert isinstance(inst.event_log_storage, FastSqliteEventLogStorage)
        sync_model_partitions(inst, ["perfect"])
        assert run_assets(["dataset"], "smoke/extra", inst).success
        r = run_assets(["prompts", "rollouts", "judgements", "metrics"], "smoke/extra|perfect", inst)
        assert r.success
        db = fast_home / "history" / "runs" / f"{r.run_id}.db"
        assert db.exists() and not Path(f"{db}-wal").exists()  # folded back when the run ended
        with engine_for(inst.event_log_storage.conn_string_for_shard("index")).connect() as con:
            assert con.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert con.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        run_id = r.run_id
    # the stock classes (no dagster.yaml storage entries) read the same history in another process
    (fast_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    code = (f"from dagster import DagsterInstance, DagsterEventType as T\ni = DagsterInstance.get()\n"
            f"assert type(i.event_log_storage).__name__ == 'SqliteEventLogStorage'\n"
            f"r = i.get_run_by_id({run_id!r}); assert r is not None and r.is_success, r\n"
            f"assert len(i.all_logs({run_id!r}, of_type=T.ASSET_MATERIALIZATION)) == 4\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "DAGSTER_HOME": str(fast_home)})
    assert out.returncode == 0, out.stderr[-2000:]


def test_partitions_of_one_run_go_concurrently(home, write_config):
    """Two models against a server with latency: their partitions overlap in time (max_concurrent_partitions: 2),
    per-sample progress reaches the caller, and results come back in (split, model) order."""
    from benchmarks.mock_server import MockLLM, serve_in_thread
    from evalpipe.config import load_config

    with serve_in_thread(MockLLM(latency=0.4)) as (mock, url):
        write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {{repo}}/data/smoke/test.jsonl, limit: 4}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
    metrics: [exact_match]
models:
  a: {{runner: litellm, model: openai/a, api_base: "{url}", options: {{concurrency: 1}}}}
  b: {{runner: litellm, model: openai/b, api_base: "{url}", options: {{concurrency: 1}}}}
max_concurrent_partitions: 2
""")
        from dagster import DagsterInstance

        from eval_assets.launch import evaluate

        samples: list[tuple[str, int, int]] = []
        threads: set[str] = set()

        def on_sample(split, model, done, total, errors=None):
            samples.append((model, done, total))
            threads.add(threading.current_thread().name)

        with DagsterInstance.get() as inst:
            t0 = time.perf_counter()
            result = evaluate(load_config(), ["smoke/extra"], ["a", "b"], instance=inst, on_sample=on_sample)
            wall = time.perf_counter() - t0
            assert result.success, result
            assert [(p.benchmark_split, p.model) for p in result.partitions] == [("smoke/extra", "a"),
                                                                                  ("smoke/extra", "b")]
            spans = [(inst.get_run_record_by_id(p.run_id).start_time, inst.get_run_record_by_id(p.run_id).end_time)
                     for p in result.partitions]
    (s1, e1), (s2, e2) = sorted(spans)
    assert s2 < e1, spans  # the second partition's run started before the first one ended
    assert {(m, d) for m, d, t in samples if d == t == 4} == {("a", 4), ("b", 4)}
    assert all(n.startswith("evalpipe-partition") for n in threads)
    assert mock.requests == 8
    print(f"wall {wall:.1f}s")


def test_max_concurrent_partitions_one_is_sequential(home, write_config, monkeypatch):
    from evalpipe.config import load_config
    from eval_assets.launch import concurrent_partitions

    write_config("benchmarks: {}\nmodels: {}\nmax_concurrent_partitions: 1\n")
    assert concurrent_partitions(load_config()) == 1
    assert concurrent_partitions(load_config(), 3) == 3
