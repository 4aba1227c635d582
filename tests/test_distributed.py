"""The distributed deployment on one machine, with real services (docs/deployment.md): PostgreSQL as the Dagster
instance storage (dagster-postgres), Redis as the broker of dagster-celery, two celery worker processes executing
the steps, a backfill of 4 model partitions launched with Dagster's own CLI, and the warehouse written by the
workers read back from another process. The test starts and stops every service itself.

Needs the Debian packages postgresql and redis-server (.ci/run installs them); skipped without them."""
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["m1", "m2", "m3", "m4"]
SPLIT = "smoke/extra"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not bins:
        pytest.skip("PostgreSQL is not installed (.ci/run: apt-get install -y postgresql)")
    bindir = Path(bins[-1]).parent
    root = tempfile.mkdtemp(prefix="evalpipe-pg-")
    as_pg: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the server as the postgres user
        shutil.chown(root, "postgres", "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    data, port = f"{root}/data", _free_port()
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", data, "-l", f"{root}/log", "-w", "-o",
                            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres")
        con.autocommit = True
        con.cursor().execute("CREATE DATABASE dagster")
        con.close()
        # SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3; dagster-postgres ships with psycopg2
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/dagster"
    finally:
        subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"],
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def redis_broker():
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (.ci/run: apt-get install -y redis-server)")
    port = _free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    import redis

    r = redis.Redis(port=port)
    for _ in range(200):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_backfill_on_celery_workers_with_postgres_storage(postgres, redis_broker, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(f"""
telemetry:
  enabled: false
storage:
  postgres:
    postgres_url: {postgres}
run_coordinator:              # runs launch when submitted (the compose file uses the daemon's queue instead)
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
""")
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {ROOT}/data/smoke/test.jsonl, limit: 4}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
    metrics: [exact_match]
models:
  m1: {{runner: echo, reply: target}}
  m2: {{runner: echo}}
  m3: {{runner: echo, reply: fixed, text: Paris}}
  m4: {{runner: echo, reply: target}}
""")
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "EVALS_EXECUTOR": "celery",
           "EVALS_CELERY_BROKER": redis_broker, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("EVALS_WAREHOUSE", None)
    bindir = Path(sys.executable).parent
    celery_yaml = tmp_path / "celery.yaml"
    celery_yaml.write_text(f"execution:\n  config:\n    broker: {redis_broker}\n    backend: {redis_broker}\n")

    # the instance schema, the dataset and the model partitions (the CLI's own helpers, on the Postgres instance)
    subprocess.run([sys.executable, "-c", f"""
from evalpipe.project import load_config
from eval_assets.launch import get_instance, run_assets, sync_model_partitions
inst = get_instance()
assert type(inst.run_storage).__name__ == "PostgresRunStorage", type(inst.run_storage)
sync_model_partitions(inst, {MODELS!r})
assert run_assets(["dataset"], {SPLIT!r}, inst).success
"""], cwd=ROOT, env=env, check=True, timeout=300)

    workers, logs = [], []
    try:
        for i in range(2):
            log = tmp_path / f"worker{i}.log"
            logs.append(log)
            workers.append(subprocess.Popen(
                [str(bindir / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(celery_yaml),
                 "-n", f"w{i}", "--", "--concurrency=1"],
                cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 240
        while not all("ready" in log.read_text() for log in logs):
            assert time.time() < deadline, [log.read_text()[-2000:] for log in logs]
            assert all(w.poll() is None for w in workers), [log.read_text()[-2000:] for log in logs]
            time.sleep(1)

        # a backfill of the 4 model partitions with Dagster's CLI: 4 runs, their steps on the celery workers
        keys = ",".join(f"{SPLIT}|{m}" for m in MODELS)
        out = subprocess.run([str(bindir / "dagster"), "job", "backfill", "-w", "workspace.yaml", "-j", "evaluate",
                              "--partitions", keys, "--noprompt"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]

        from dagster import DagsterInstance, DagsterRunStatus
        from dagster._core.instance.ref import InstanceRef

        os.environ["DAGSTER_HOME"] = str(home)
        try:
            with DagsterInstance.from_ref(InstanceRef.from_dir(str(home))) as inst:
                deadline = time.time() + 900
                while True:
                    runs = [r for r in inst.get_runs() if r.job_name == "evaluate"]
                    if len(runs) == 4 and all(r.is_finished for r in runs):
                        break
                    assert time.time() < deadline, [(r.run_id, r.status) for r in runs]
                    time.sleep(2)
                assert all(r.status == DagsterRunStatus.SUCCESS for r in runs), [(r.run_id, r.status) for r in runs]
                assert sorted(r.tags.get("dagster/partition/model") for r in runs) == MODELS
                # every step went through a celery worker
                from dagster import DagsterEventType

                for r in runs:
                    msgs = [e.message for e in inst.all_logs(r.run_id, of_type=DagsterEventType.ENGINE_EVENT)]
                    assert any("in celery worker" in (m or "") for m in msgs), msgs
        finally:
            os.environ.pop("DAGSTER_HOME", None)
        # both workers took tasks
        assert all("succeeded" in log.read_text() for log in logs), [log.read_text()[-1500:] for log in logs]
    finally:
        for w in workers:
            _stop(w)

    # the warehouse the workers wrote, read by another process (this one)
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(home / "warehouse.duckdb")
    counts = wh.query("SELECT model, count(*) AS n FROM rollouts GROUP BY model ORDER BY model")
    assert counts.to_dict("records") == [{"model": m, "n": 4} for m in MODELS]
    metrics = wh.query("SELECT model, value FROM metrics WHERE slice = 'all' AND metric = 'exact_match' ORDER BY model")
    assert dict(zip(metrics["model"], metrics["value"]))["m1"] == 1.0
    assert dict(zip(metrics["model"], metrics["value"]))["m2"] == 0.0


@pytest.mark.parametrize("kind,name", [("celery", "celery_executor"), ("k8s", "k8s"), ("in_process", "in_process")])
def test_executor_is_chosen_by_env(kind, name):
    """The same code location runs in process, on celery workers or as Kubernetes jobs (dagster-k8s)."""
    env = {**os.environ, "EVALS_EXECUTOR": kind, "EVALS_CELERY_BROKER": "redis://127.0.0.1:1/0"}
    out = subprocess.run([sys.executable, "-c", "from eval_assets.jobs import evaluate_job as j; "
                          "print(j.executor_def.name)"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == name
