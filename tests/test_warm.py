"""The warm server (evalpipe/cli/warm.py): `evalpipe run` served by a forked child of a process that imported
everything once, with the same output and exit codes as a cold run; anything stale goes cold and stops the server."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def warm_env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "dagster_home" / "dagster.yaml").read_text())
    config = tmp_path / "evals.yaml"
    shutil.copy(ROOT / "tests" / "fixtures" / "evals.test.yaml", config)
    # the fixture's relative data paths resolve from its own folder
    text = config.read_text().replace("../../data/", f"{ROOT}/data/")
    config.write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("EVALS_WARM", "EVALS_WARM_CHILD")}
    env.update(DAGSTER_HOME=str(home), EVALS_CONFIG=str(config), PYTHONPATH=str(ROOT))
    yield env, home, config
    subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "serve", "--stop"], env=env, cwd=ROOT,
                   capture_output=True, timeout=120)


def _cli(env, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "evalpipe.cli.main", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _served(home: Path) -> list[str]:
    log = home / "logs" / "warm.log"
    return [line for line in log.read_text().splitlines() if " exited " in line] if log.exists() else []


def test_warm_run_matches_cold_and_keeps_exit_codes(warm_env):
    env, home, _ = warm_env
    cold = _cli({**env, "EVALS_WARM": "0"}, "run", "--no-progress", "--split", "smoke/extra")
    assert cold.returncode == 0, cold.stderr[-2000:]
    started = _cli(env, "serve", "--background", "--idle-s", "120")
    assert started.returncode == 0 and (home / ".evalpipe-warm.sock").exists(), started.stdout + started.stderr
    warm = _cli(env, "run", "--no-progress", "--split", "smoke/extra")
    assert warm.returncode == 0, warm.stderr[-2000:]
    assert len(_served(home)) == 1 and " exited 0 " in _served(home)[0]
    # the server's throwaway warm-up run (evalpipe/cli/warm.py _warm_up) ran in its own temp home: nothing of it here
    assert "warm-up run of " in (home / "logs" / "warm.log").read_text()
    assert not [p for p in home.rglob("*") if "warm-up" in p.name or "warm.jsonl" in p.name]
    assert "warm-up" not in _cli({**env, "EVALS_WARM": "0"}, "list", "models").stdout
    table = [line for line in warm.stdout.splitlines() if line.startswith("| smoke/extra")]
    assert table and table == [line for line in cold.stdout.splitlines() if line.startswith("| smoke/extra")]
    bad = _cli(env, "run", "--no-progress", "--model", "no-such-model")  # a config error: exit 2, one line
    assert bad.returncode == 2 and "no-such-model" in bad.stderr, bad.stderr
    assert len(_served(home)) == 2 and " exited 2 " in _served(home)[1]
    other = _cli(env, "list", "models")  # only `run` is served
    assert other.returncode == 0 and len(_served(home)) == 2
    secret = "sk-proj-" + "Zq7" * 12  # a key pasted into an argument: refused by the run, never in the server's log
    leaked = _cli(env, "run", "--no-progress", "--runner-option", f"api_key={secret}")
    assert leaked.returncode == 2 and len(_served(home)) == 3, leaked.stderr
    assert secret not in (home / "logs" / "warm.log").read_text() and secret not in leaked.stderr


def test_a_stale_server_is_never_used(warm_env):
    """After the config file changes, the run goes cold (and still succeeds), and the server stops."""
    env, home, config = warm_env
    assert _cli(env, "serve", "--background", "--idle-s", "120").returncode == 0
    time.sleep(0.01)
    config.write_text(config.read_text() + "\n# edited\n")
    r = _cli(env, "run", "--no-progress", "--split", "smoke/extra")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _served(home) == []
    assert "config" in (home / "logs" / "warm.log").read_text()
    for _ in range(100):
        if not (home / ".evalpipe-warm.sock").exists():
            break
        time.sleep(0.1)
    assert not (home / ".evalpipe-warm.sock").exists()


def test_which_commands_go_warm(monkeypatch):
    from evalpipe.cli.warm import wants_warm

    monkeypatch.delenv("EVALS_WARM", raising=False)
    monkeypatch.delenv("EVALS_WARM_CHILD", raising=False)
    assert wants_warm(["run", "--limit", "1"]) and wants_warm(["--debug", "run"])
    assert not wants_warm(["list", "models"]) and not wants_warm([])
    assert not wants_warm(["--config", "x.yaml", "run"]) and not wants_warm(["run", "--config=x.yaml"])
    monkeypatch.setenv("EVALS_WARM", "0")
    assert not wants_warm(["run"])
