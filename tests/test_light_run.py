"""A lighter `evalpipe run`: Dagster's SQLite storage without an fsync per event (evalpipe/store/instance_storage.py),
and the partitions of one run going concurrently (eval_assets/launch.py)."""
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import eval_assets.launch  # noqa: F401  the partitions are read at import: from the test config, not a test's own
from tests.helpers.configs import smoke_benchmark

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fast_home(home):
    from evalpipe.store.instance_storage import storage_yaml

    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + storage_yaml())
    return home


def test_fast_storage_is_dagsters_own_tables(fast_home, monkeypatch):
    """A run on the fast storage is readable by Dagster's stock storage classes on the same folder (same files,
    same tables), its connections use synchronous=NORMAL in WAL mode, and a finished run leaves no WAL behind."""
    from dagster import DagsterInstance

    from eval_assets.launch import run_assets, sync_model_partitions
    from evalpipe.store.instance_storage import FastSqliteEventLogStorage, engine_for

    from dagster import __version__ as dagster_version

    template = fast_home / "history" / "runs" / ".template" / f"run-{dagster_version}.db"
    with DagsterInstance.get() as inst:
        assert isinstance(inst.event_log_storage, FastSqliteEventLogStorage)
        assert template.exists()  # made with the instance, before its first run
        sync_model_partitions(inst, ["perfect"])
        assert run_assets(["dataset"], "smoke/extra", inst).success
        r = run_assets(["prompts", "rollouts", "judgements", "metrics"], "smoke/extra|perfect", inst)
        assert r.success
        db = fast_home / "history" / "runs" / f"{r.run_id}.db"
        assert db.exists() and not Path(f"{db}-wal").exists()  # folded back when the run ended
        # run databases are copies of one template made by Dagster's own initialization, which is no run itself
        assert template.exists()
        assert set(inst.event_log_storage.get_all_run_ids()) == {rec.dagster_run.run_id for rec in inst.get_run_records()}
        heads = {sqlite3.connect(f).execute("SELECT version_num FROM alembic_version").fetchone()
                 for f in (fast_home / "history" / "runs").glob("*.db") if f.name != "index.db"}
        assert len(heads) == 1 and None not in heads, heads
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
    from evalpipe.project import load_config

    with serve_in_thread(MockLLM(latency=0.4)) as (mock, url):
        write_config(smoke_benchmark(limit=4) + f"""models:
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
    from evalpipe.project import load_config
    from eval_assets.launch import concurrent_partitions

    write_config("benchmarks: {}\nmodels: {}\nmax_concurrent_partitions: 1\n")
    assert concurrent_partitions(load_config()) == 1
    assert concurrent_partitions(load_config(), 3) == 3


def _runs_by_assets(inst) -> list[tuple[str, ...]]:
    """Each run of the instance as the sorted asset keys it materialized, oldest first."""
    from dagster import DagsterEventType

    out = []
    for rec in reversed(inst.get_run_records()):
        mats = inst.all_logs(rec.dagster_run.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)
        out.append(tuple(sorted({m.dagster_event.asset_key.to_user_string() for m in mats})))
    return out


def _one_split_config(write_config, data: Path, models: str = "m: {runner: echo, reply: target}") -> None:
    write_config(smoke_benchmark(path=data) + f"""models:
  {models}
""")


def test_a_rerun_is_one_dagster_run_and_a_changed_file_is_reloaded(fast_home, write_config, tmp_path):
    """First run: `dataset`, then one run with the chain and the leaderboard. Re-run with nothing changed: only the
    chain's run (the dataset on record is current). The data file changes: `dataset` is loaded again, and the
    new sample is evaluated. `reload_datasets` forces a reload."""
    from dagster import DagsterInstance

    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    data = tmp_path / "qa.jsonl"
    data.write_text("".join((ROOT / "data/smoke/test.jsonl").read_text().splitlines(keepends=True)[:3]))
    _one_split_config(write_config, data)
    chain = ("judgements", "leaderboard", "metrics", "prompts", "rollouts")
    with DagsterInstance.get() as inst:
        assert evaluate(load_config(), ["smoke/extra"], ["m"], instance=inst).success
        assert _runs_by_assets(inst) == [("dataset",), chain]
        assert evaluate(load_config(), ["smoke/extra"], ["m"], instance=inst).success
        assert _runs_by_assets(inst) == [("dataset",), chain, chain]
        with data.open("a") as fh:  # a fourth sample
            fh.write((ROOT / "data/smoke/test.jsonl").read_text().splitlines(keepends=True)[3])
        assert evaluate(load_config(), ["smoke/extra"], ["m"], instance=inst).success
        assert _runs_by_assets(inst)[3:] == [("dataset",), chain]
        assert evaluate(load_config(), ["smoke/extra"], ["m"], instance=inst, reload_datasets=True).success
        assert _runs_by_assets(inst)[5:] == [("dataset",), chain]
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    n = Warehouse(warehouse_path()).query("SELECT count(*) AS n FROM rollouts WHERE model = 'm'")["n"].iloc[0]
    assert n == 4


def test_in_process_runs_capture_no_compute_logs_and_the_configured_instance_still_does(fast_home, write_config,
                                                                                         tmp_path):
    """`evaluate()` (the CLI, the Python API, `evalpipe serve`) opens the instance with Dagster's compute-log
    capture off: no `tail` and watcher processes per run, nothing under storage/<run>/compute_logs, fds 1/2 left
    alone. The run's events are all recorded; an instance opened plainly (the UI's, the daemon's) still captures."""
    import resource

    from dagster import DagsterEventType, DagsterInstance
    from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager

    from eval_assets.launch import evaluate, get_instance
    from evalpipe.project import load_config

    data = tmp_path / "qa.jsonl"
    data.write_text("".join((ROOT / "data/smoke/test.jsonl").read_text().splitlines(keepends=True)[:2]))
    _one_split_config(write_config, data)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    inst = get_instance()
    assert isinstance(inst.compute_log_manager, NoOpComputeLogManager)
    result = evaluate(load_config(), ["smoke/extra"], ["m"], instance=inst)
    assert result.success
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime) < 0.01  # nothing spawned
    run_id = result.partitions[0].run_id
    assert not (fast_home / "storage" / run_id / "compute_logs").exists()
    assert len(inst.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION)) == 5
    with DagsterInstance.get() as plain:
        assert not isinstance(plain.compute_log_manager, NoOpComputeLogManager)


def test_changed_options_reload_the_dataset_and_two_models_share_one_leaderboard_run(fast_home, write_config, tmp_path):
    """A different adapter option (`slice_by`) makes the dataset on record stale; with two models the leaderboard is a
    run of its own, after both chains. (A run-time `limit` is refused there: tests/test_limit_isolation.py.)"""
    from dagster import DagsterInstance

    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from resources import EvalConfigResource

    _one_split_config(write_config, ROOT / "data/smoke/test.jsonl",
                      "a: {runner: echo, reply: target}\n  b: {runner: echo, reply: target}")
    chain = ("judgements", "metrics", "prompts", "rollouts")
    with DagsterInstance.get() as inst:
        two = {"eval_config": EvalConfigResource(split_options={"slice_by": ["category"]})}
        assert evaluate(load_config(), ["smoke/extra"], ["a", "b"], resources=two, instance=inst).success
        # [sweeps] the two chains in one batch run (eval_assets/batch.py), each partition materialized on its own
        assert _runs_by_assets(inst) == [("dataset",), chain, ("leaderboard",)]
        three = {"eval_config": EvalConfigResource(split_options={"slice_by": []})}
        assert evaluate(load_config(), ["smoke/extra"], ["a"], resources=three, instance=inst).success
        assert _runs_by_assets(inst)[3:] == [("dataset",), tuple(sorted(chain + ("leaderboard",)))]
        assert evaluate(load_config(), ["smoke/extra"], ["a"], resources=three, instance=inst).success
        assert _runs_by_assets(inst)[5:] == [tuple(sorted(chain + ("leaderboard",)))]


def test_new_instance_databases_use_small_pages(fast_home):
    """Every database the fast storage creates has 1 KB pages (an event rewrites ~9 pages: 4x fewer bytes than
    SQLite's default 4 KB), and Dagster's own tables are in them."""
    from dagster import DagsterInstance

    from evalpipe.store.instance_storage import PAGE_SIZE

    with DagsterInstance.get() as inst:
        inst.add_dynamic_partitions("model", ["x"])
        assert inst.has_dynamic_partition("model", "x") and not inst.has_dynamic_partition("model", "y")
    for db in (fast_home / "history" / "runs.db", fast_home / "history" / "runs" / "index.db",
               fast_home / "schedules" / "schedules.db"):
        con = sqlite3.connect(db)
        try:
            assert con.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 1024, db
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
        assert "alembic_version" in tables, (db, tables)
    assert "dynamic_partitions" in {r[0] for r in sqlite3.connect(fast_home / "history" / "runs" / "index.db")
                                    .execute("SELECT name FROM sqlite_master")}


def test_dataset_version_follows_files_and_template(write_config, tmp_path):
    """The token changes with the data file, the prompt template file and the options; GAIA's local copy has one,
    a GAIA split from the Hub has none (loaded every run)."""
    import os

    from eval_assets.launch import dataset_version
    from evalpipe.project import load_config

    data, template = tmp_path / "qa.jsonl", tmp_path / "t.j2"
    data.write_text('{"id": "a", "question": "q?", "answer": "x"}\n')
    template.write_text("Q: {{ prompt }}")

    def version(limit=None):
        write_config(f"""
benchmarks:
  smoke:
    adapter: file
    prompt_template: {template}
    splits: {{extra: {{path: {data}{', limit: ' + str(limit) if limit else ''}}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
  gaia:
    adapter: gaia
    splits:
      validation: {{path: {{repo}}/data/gaia_sample}}
      test: {{}}
models: {{}}
""")
        cfg = load_config()
        return dataset_version(cfg.split("smoke/extra")), cfg

    v0, cfg = version()
    assert v0 and version()[0] == v0
    assert dataset_version(cfg.split("gaia/validation")) and dataset_version(cfg.split("gaia/test")) is None
    assert version(limit=1)[0] != v0
    st = template.stat()
    template.write_text("Question: {{ prompt }}")
    os.utime(template, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    v1 = version()[0]
    assert v1 != v0
    data.write_text(data.read_text() + '{"id": "b", "question": "r?", "answer": "y"}\n')
    assert version()[0] != v1


def test_plain_asset_names_skip_dagsters_selection_parser():
    """`run_assets(["prompts", ...])` hands Dagster a key selection: strings would each go through its ANTLR
    grammar (~0.1-0.5 s of a cold run) to the same selection; anything else passes as it is."""
    import sys

    from dagster import AssetSelection

    from eval_assets.launch import CHAIN, asset_selection

    assert asset_selection(CHAIN) == AssetSelection.assets(*CHAIN)
    assert asset_selection(["a+"]) == ["a+"] and asset_selection("*") == "*"
    custom = AssetSelection.assets("metrics").without_checks()
    assert asset_selection(custom) is custom
    code = ("import sys; from eval_assets.launch import asset_selection; asset_selection(['dataset']); "
            "print('antlr4' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert out.stdout.strip() == "False", out.stderr


def test_a_run_on_the_main_thread_leaves_sigterm_as_it_found_it(home):
    """A process started in the background by a shell has SIGINT ignored; Dagster's interrupt handling gives SIGTERM
    SIGINT's handler when a main-thread run ends, which left the process (and the compute-log `tail`s it starts
    later) ignoring SIGTERM."""
    code = ("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "from dagster import DagsterInstance\nfrom eval_assets.launch import run_assets\n"
            "with DagsterInstance.get() as inst:\n    assert run_assets(['dataset'], 'smoke/extra', inst).success\n"
            "ignored = [int(l.split()[1], 16) for l in open('/proc/self/status') if l.startswith('SigIgn')][0]\n"
            "print('SIGTERM ignored' if ignored & (1 << (signal.SIGTERM - 1)) else 'SIGTERM default',"
            " signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "DAGSTER_HOME": str(home)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["SIGTERM", "default", "True"], out.stdout
