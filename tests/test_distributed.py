"""The distributed deployment on one machine, with real services (docs/deployment.md): PostgreSQL as the Dagster
instance storage (dagster-postgres), Redis as the broker of dagster-celery, two celery worker processes executing
the steps, a backfill of 4 model partitions launched with Dagster's own CLI, and the warehouse written by the
workers read back from another process. The test starts and stops every service itself.

Needs the Debian packages postgresql and redis-server (.ci/run installs them); skipped without them."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.configs import smoke_benchmark

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["m1", "m2", "m3", "m4"]
SPLIT = "smoke/extra"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_backfill_on_celery_workers_with_postgres_storage(postgres_url, redis_url, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(f"""
telemetry:
  enabled: false
storage:
  postgres:
    postgres_url: {postgres_url}
run_coordinator:              # runs launch when submitted (the compose file uses the daemon's queue instead)
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
""")
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(smoke_benchmark(limit=4) + f"""models:
  m1: {{runner: echo, reply: target}}
  m2: {{runner: echo}}
  m3: {{runner: echo, reply: fixed, text: Paris}}
  m4: {{runner: echo, reply: target}}
""")
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "EVALS_EXECUTOR": "celery",
           "EVALS_CELERY_BROKER": redis_url, "PYTHONPATH": str(ROOT),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("EVALS_WAREHOUSE", None)
    bindir = Path(sys.executable).parent
    celery_yaml = tmp_path / "celery.yaml"
    celery_yaml.write_text(f"execution:\n  config:\n    broker: {redis_url}\n    backend: {redis_url}\n")

    # first start, as documented (docs/deployment.md; the compose file's `migrate` service): Dagster's tables are
    # created once, before any worker starts; workers that each created them at the same moment raced
    # (DuplicateObject on a fresh Postgres)
    subprocess.run([str(bindir / "dagster"), "instance", "migrate"], cwd=ROOT, env=env, check=True, timeout=300,
                   capture_output=True)

    workers, logs = [], []
    try:
        # two workers started at the same moment on the fresh instance: both come up, neither creates tables
        logs = [tmp_path / f"worker{i}.log" for i in range(2)]
        commands = [[str(bindir / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y",
                     str(celery_yaml), "-n", f"w{i}", "--", "--concurrency=1"] for i in range(2)]
        outs = [log.open("w") for log in logs]
        workers = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                   for cmd, out in zip(commands, outs)]
        deadline = time.time() + 240
        while not all("ready" in log.read_text() for log in logs):
            assert time.time() < deadline, [log.read_text()[-2000:] for log in logs]
            assert all(w.poll() is None for w in workers), [log.read_text()[-2000:] for log in logs]
            time.sleep(1)
        assert not any("database creation" in log.read_text() for log in logs), [log.read_text() for log in logs]

        # the dataset and the model partitions (the CLI's own helpers, on the Postgres instance)
        subprocess.run([sys.executable, "-c", f"""
from evalpipe.project import load_config
from eval_assets.launch import get_instance, run_assets, sync_model_partitions
inst = get_instance()
assert type(inst.run_storage).__name__ == "PostgresRunStorage", type(inst.run_storage)
sync_model_partitions(inst, {MODELS!r})
assert run_assets(["dataset"], {SPLIT!r}, inst).success
"""], cwd=ROOT, env=env, check=True, timeout=300)

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


def test_deploy_files_migrate_once_and_pool_by_op():
    """What docs/deployment.md says of the shipped deployment files: the compose file's `migrate` service runs before
    every process that opens the instance, and the pools are per step as in dagster_home/dagster.yaml."""
    import yaml

    compose = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert services["migrate"]["command"] == ["dagster", "instance", "migrate"]
    for name in ("webserver", "daemon", "worker"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name
    pools = yaml.safe_load((ROOT / "deploy" / "dagster.yaml").read_text())["concurrency"]["pools"]
    local = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())["concurrency"]["pools"]
    assert pools == local == {"granularity": "op"}


@pytest.mark.parametrize("kind,name", [("celery", "celery_executor"), ("k8s", "k8s"), ("in_process", "in_process")])
def test_executor_is_chosen_by_env(kind, name):
    """The same code location runs in process, on celery workers or as Kubernetes jobs (dagster-k8s)."""
    env = {**os.environ, "EVALS_EXECUTOR": kind, "EVALS_CELERY_BROKER": "redis://127.0.0.1:1/0"}
    out = subprocess.run([sys.executable, "-c", "from eval_assets.jobs import evaluate_job as j; "
                          "print(j.executor_def.name)"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == name
