"""Instance start-up (docs/operations.md#instance-start-up): concurrent first runs on a fresh DAGSTER_HOME all
succeed; a database left with two alembic versions is repaired when that is certain, else refused in one line that
names the repair command (exit 2)."""
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAD = "29b539ebc72a"  # dagster 1.13.27's head revision (asserted below, so a Dagster upgrade says so here)
OLDER = "5771160a95ad"  # LAST_KNOWN_STAMPED_SQLITE_ALEMBIC_REVISION: what the losing process of the race stamps
OLDEST = "d3a4c9e87af3"  # OLDER's parent


def _env(tmp_path: Path, stock: bool = False) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(parents=True)
    yaml = "telemetry:\n  enabled: false\n" if stock else (ROOT / "dagster_home" / "dagster.yaml").read_text()
    (home / "dagster.yaml").write_text(yaml)
    config = tmp_path / "evals.yaml"
    config.write_text((ROOT / "tests" / "fixtures" / "evals.test.yaml").read_text().replace("../../data/",
                                                                                             f"{ROOT}/data/"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALS_")}
    env.update(DAGSTER_HOME=str(home), EVALS_CONFIG=str(config), EVALS_WARM="0", PYTHONPATH=str(ROOT))
    return env


def _run(env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _versions(db: Path) -> list[str]:
    con = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in con.execute("SELECT version_num FROM alembic_version"))
    finally:
        con.close()


def _set_versions(db: Path, rows: list[str]) -> None:
    con = sqlite3.connect(db)
    with con:
        con.execute("DELETE FROM alembic_version")
        con.executemany("INSERT INTO alembic_version VALUES (?)", [(r,) for r in rows])
    con.close()


@pytest.mark.slow
def test_four_concurrent_first_runs_on_a_fresh_home_all_succeed(tmp_path):
    # on eaf6be7: 7 of 20 such runs failed (table ... already exists, more than one head, database is locked) and 4
    # of 8 homes were left with two alembic versions
    env = _env(tmp_path)
    procs = [_run(env, "--split", "smoke/extra") for _ in range(4)]
    outs = [(p.wait(timeout=240), p.stdout.read()) for p in procs]
    for code, out in outs:
        assert code == 0, out[-3000:]
    home = Path(env["DAGSTER_HOME"])
    for rel in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
        assert _versions(home / rel) == [HEAD], rel


def _open_and_write(home: str, i: int) -> None:
    os.environ["DAGSTER_HOME"] = home
    from eval_assets.launch import get_instance

    inst = get_instance()
    inst.add_dynamic_partitions("model", [f"m{i}"])
    inst.dispose()


def test_concurrent_first_opens_with_dagster_stock_storage(tmp_path, monkeypatch):
    """A dagster.yaml with Dagster's own SQLite storages (not evalpipe's): the CLI, evaluate() and `evalpipe serve`
    open it through eval_assets.launch.get_instance, under the same lock. Forked processes: no import time."""
    import multiprocessing

    import eval_assets.launch  # noqa: F401  imported before the fork

    env = _env(tmp_path, stock=True)
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_open_and_write, args=(env["DAGSTER_HOME"], i)) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 6
    home = Path(env["DAGSTER_HOME"])
    for rel in ("history/runs.db", "history/runs/index.db", "schedules/schedules.db"):
        assert _versions(home / rel) == [HEAD], rel
    from dagster import DagsterInstance

    with DagsterInstance.get() as inst:
        assert sorted(inst.get_dynamic_partitions("model")) == [f"m{i}" for i in range(6)]


@pytest.fixture(scope="module")
def made_home(tmp_path_factory):
    """An initialized instance (made once, in this process, for the tests below, which copy it)."""
    from eval_assets.launch import get_instance

    env = _env(tmp_path_factory.mktemp("made"))
    saved = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
    try:
        get_instance().dispose()
    finally:
        os.environ["DAGSTER_HOME"] = saved or ""
        if saved is None:
            del os.environ["DAGSTER_HOME"]
    from evalpipe.store.instance_storage import dispose

    dispose()  # WALs folded back: the copies are whole databases
    return Path(env["DAGSTER_HOME"])


def _copy(made_home: Path, tmp_path: Path, monkeypatch) -> Path:
    home = tmp_path / "home"
    shutil.copytree(made_home, home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


@pytest.mark.parametrize("db", ["schedules/schedules.db", "history/runs.db", "history/runs/index.db"])
def test_the_race_signature_is_repaired_on_open(made_home, tmp_path, monkeypatch, caplog, db):
    """What the race left in 4 of 8 trials on eaf6be7: the head and the revision a late process stamps beside it."""
    from eval_assets.launch import get_instance

    home = _copy(made_home, tmp_path, monkeypatch)
    assert _versions(home / db) == [HEAD]
    _set_versions(home / db, [HEAD, OLDER])
    with get_instance() as inst:
        assert inst.get_runs() == []
    assert _versions(home / db) == [HEAD]
    assert any("repaired" in r.getMessage() and str(home / db) in r.getMessage() for r in caplog.records)


def test_uncertain_versions_are_refused_with_the_repair_command_exit_2(made_home, tmp_path, monkeypatch, capsys):
    home = _copy(made_home, tmp_path, monkeypatch)
    db = home / "schedules" / "schedules.db"
    _set_versions(db, [OLDER, OLDEST])  # no head among them: which schema the tables have is not certain
    env = {**_env(tmp_path / "cfg"), "DAGSTER_HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", "--split", "smoke/extra"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in r.stderr, r.stderr
    assert f"python -m evalpipe.store.instance_storage repair {db}" in lines[0] and "2 alembic versions" in lines[0]
    from evalpipe.store.instance_storage import repair

    assert repair([str(home)]) == 0  # what `python -m evalpipe.store.instance_storage repair` runs
    assert "dagster instance migrate" in capsys.readouterr().out
    assert _versions(db) == [OLDER]  # the newest of the two; `dagster instance migrate` takes it to the head


def test_versions_this_dagster_does_not_know_are_not_touched(made_home, tmp_path, monkeypatch):
    from evalpipe.store.instance_storage import InstanceStorageError, open_instance, repair

    home = _copy(made_home, tmp_path, monkeypatch)
    db = home / "history" / "runs.db"
    _set_versions(db, [HEAD, "0123456789ab"])  # e.g. a newer Dagster's migration
    with pytest.raises(InstanceStorageError, match="repair it with: python -m evalpipe.store.instance_storage repair"):
        open_instance()
    assert repair([str(home)]) == 2
    assert _versions(db) == sorted([HEAD, "0123456789ab"])


def test_head_revision_is_the_one_these_tests_name():
    from evalpipe.store.instance_storage import _script

    assert _script().get_current_head() == HEAD


def _probe_lock(q) -> None:
    from evalpipe.store.instance_storage import InstanceStorageError, startup_lock

    try:
        with startup_lock(wait_s=0.3):
            q.put("acquired")
    except InstanceStorageError as exc:
        q.put(str(exc))


def test_the_startup_lock_is_reentrant_and_excludes_other_processes(tmp_path, monkeypatch):
    import multiprocessing

    from evalpipe.store.instance_storage import InstanceStorageError, startup_lock

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    ctx = multiprocessing.get_context("fork")

    def probe() -> str:
        q = ctx.Queue()
        p = ctx.Process(target=_probe_lock, args=(q,))
        p.start()
        p.join(60)
        return q.get(timeout=5)

    with startup_lock(), startup_lock():  # nested in one process: no self-deadlock
        held = probe()  # a forked child (it inherits the open lock file: it must still wait)
    assert "starting for over 0 s in another process (pid %d)" % os.getpid() in held, held
    assert probe() == "acquired"
    assert InstanceStorageError.exit_code == 2


def test_an_existing_instance_opens_and_runs_without_importing_alembic(tmp_path):
    """alembic (~0.3 s of imports) loads only to create, stamp or migrate a database (evalpipe/store/
    deferred_alembic.py); an existing instance still reports the same revisions and still migrates."""
    env = _env(tmp_path)
    probe = ("import sys\n"
             "from evalpipe.store.instance_storage import open_instance\n"
             "from dagster._core.storage.runs.sqlite import sqlite_run_storage as s\n"
             "i = open_instance()\n"
             "i.get_runs(limit=1)\n"
             "with i.run_storage.connect() as conn:\n"
             "    revisions = s.check_alembic_revision(s.get_alembic_config(s.__file__), conn)\n"
             "print('alembic' in sys.modules, *revisions)\n")
    made = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert made.stdout.split()[0] == "True"  # creating the databases stamps them with alembic
    heads = list(Path(env["DAGSTER_HOME"]).rglob("alembic-head-*.txt"))
    assert heads and all(p.read_text().split() == ["dagster:_core/storage/alembic", HEAD] for p in heads)
    again = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split()[0] == "False" and again.stdout.count(HEAD) == 2, again.stdout  # (db, head)
    upgraded = subprocess.run([sys.executable, "-c", "import sys; from evalpipe.store.instance_storage import "
                               "open_instance; open_instance().upgrade(); print('alembic' in sys.modules)"],
                              cwd=ROOT, env=env, capture_output=True, text=True)
    assert upgraded.returncode == 0 and upgraded.stdout.split()[-1] == "True", upgraded.stdout + upgraded.stderr
