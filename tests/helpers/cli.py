"""The `evalpipe` command line, in this process (click's CliRunner) or as separate `evalpipe run` processes."""
import subprocess
import sys
from pathlib import Path
from typing import Callable

from click.testing import CliRunner, Result

REPO = Path(__file__).resolve().parents[2]

# The CLI sets these for the rest of the process; setting them first through monkeypatch restores them after the
# test (monkeypatch.delenv would not: only setenv restores a variable that was unset before).
CLI_SET_ENV = ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL")


def invoke(*args: str, catch_exceptions: bool = False) -> Result:
    """`evalpipe ARGS` in this process."""
    from evalpipe.cli.main import main

    return CliRunner().invoke(main, list(args), catch_exceptions=catch_exceptions)


def restore_cli_env(monkeypatch) -> None:
    """Have monkeypatch restore, after the test, the environment variables the CLI sets."""
    for var in CLI_SET_ENV:
        monkeypatch.setenv(var, "")


def cli_in_process(monkeypatch) -> Callable[..., Result]:
    """`invoke`, with the environment variables the CLI sets restored after the test."""
    restore_cli_env(monkeypatch)
    return invoke


def run_processes(env: dict[str, str], argvs: list[list[str]], timeout_s: float = 600) -> list[str]:
    """`evalpipe ARGV` for each argv, all started at once in separate processes; their outputs, once every one
    has exited 0. Dagster's SQLite schema creation races when several processes open a fresh DAGSTER_HOME: it is
    created here first."""
    from dagster import DagsterInstance

    with DagsterInstance.get():
        pass
    runs = [subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", *argv], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for argv in argvs]
    outs = [r.communicate(timeout=timeout_s)[0] for r in runs]
    assert all(r.returncode == 0 for r in runs), "\n".join(o[-3000:] for o in outs)
    return outs


# ---- a setting refused before any model call (tests/test_strict_options.py, tests/test_metric_settings.py) --------
def cli(*args: str) -> Result:
    """`evalpipe ARGS` in this process, an exception shown as the CLI shows it rather than raised."""
    return invoke(*args, catch_exceptions=True)


def error_lines(r: Result) -> list[str]:
    """The output's lines, asserted to be one or more `error: ...` lines and exit 2."""
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and lines and all(x.startswith("error: ") for x in lines), r.output
    return lines


def one_error_line(r: Result) -> str:
    """The output's one line, asserted to be `error: ...` and exit 2."""
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def no_model_call(home: Path) -> None:
    """Nothing was evaluated under DAGSTER_HOME `home`: no warehouse, no journal."""
    assert not (home / "warehouse.duckdb").exists() and not (home / "journal").exists()
