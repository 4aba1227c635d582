import os
from pathlib import Path

# Before anything imports Dagster code or litellm: offline settings, and the config of the environment's project
# (what Project.from_file() reads when a test does not build its own project; partitions no longer depend on it).
FIXTURES = Path(__file__).parent / "fixtures"
TEST_CONFIG = FIXTURES / "evals.test.yaml"
os.environ["EVALS_CONFIG"] = str(TEST_CONFIG)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402

from evalpipe.project.redaction import install_redaction  # noqa: E402

# The tests are an entry point like the CLI: the environment's config file's secrets are masked everywhere.
install_redaction()

# A suite started in the background by a shell (CI) inherits SIGINT ignored. Dagster's interrupt handling gives
# SIGTERM SIGINT's handler when a run on the main thread ends (tests call `materialize` there), so the worker, and
# the compute-log `tail`s its later runs start, would ignore SIGTERM: each such run then waited ~60 s on its `tail`s.
# Run as from a terminal instead. (evalpipe's own runs put SIGTERM back: eval_assets/launch.py _sigterm_kept.)
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_SIGTERM_AT_START = signal.getsignal(signal.SIGTERM)


@pytest.fixture(autouse=True)
def _environment_config(monkeypatch):
    """Every test starts from the suite's config file: an in-process `evalpipe --config X` sets EVALS_CONFIG for its
    process (as a CLI should), which leaked into later tests of the same worker (the try rule then compared a
    Python call's dataset with another test's config)."""
    monkeypatch.setenv("EVALS_CONFIG", str(TEST_CONFIG))


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh DAGSTER_HOME (instance storage, warehouse, journals) for one test."""
    h = tmp_path / "dagster_home"
    h.mkdir()
    # no compute-log capture in the tests' own instances (as evalpipe's in-process runs have none): each captured run
    # spawns `tail` processes that hang the run ~60 s when the worker ignores SIGTERM (_sigterm_not_left_ignored)
    (h / "dagster.yaml").write_text("telemetry:\n  enabled: false\ncompute_logs:\n  module: "
                                    "dagster._core.storage.noop_compute_log_manager\n  class: NoOpComputeLogManager\n")
    monkeypatch.setenv("DAGSTER_HOME", str(h))
    monkeypatch.delenv("EVALS_WAREHOUSE", raising=False)
    return h


@pytest.fixture
def instance(home):
    from dagster import DagsterInstance

    with DagsterInstance.get() as inst:
        yield inst


@pytest.fixture
def project_from(home):
    """Build a test's own project over the test's home: project_from({...}) from a dict (no file; relative paths
    resolve from the repo root), project_from(path) from a config file."""
    from evalpipe.project import Project

    def build(source, **kw):
        if isinstance(source, dict):
            return Project.from_dict(source, base_dir=kw.pop("base_dir", Path(__file__).parents[1]), home=home, **kw)
        return Project.from_file(source, home=home, **kw)

    return build


@pytest.fixture
def write_config(tmp_path, monkeypatch):
    """Write a config file (YAML text) and make it the active one. Paths in it resolve from the repo root."""

    def write(text: str) -> Path:
        p = tmp_path / "evals.yaml"
        p.write_text(text.replace("{repo}", str(Path(__file__).parents[1])))
        monkeypatch.setenv("EVALS_CONFIG", str(p))
        return p

    return write


# ---- real local services (tests/helpers/services.py); a test that asks for one is skipped where it isn't installed --
@pytest.fixture
def redis_url():
    """A fresh redis-server for one test: its URL."""
    from tests.helpers.services import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL server with an empty database `dagster` for one test: its psycopg2 SQLAlchemy URL."""
    from tests.helpers.services import postgres_server

    with postgres_server() as url:
        yield url


@pytest.fixture(autouse=True)
def _sigterm_not_left_ignored(request):
    """A test that leaves this worker ignoring SIGTERM would make every later Dagster run with compute-log capture
    (tests that open `DagsterInstance.get()` themselves) wait on `tail` processes that inherit the ignore and never
    die (~60 s per run, and the processes pile up). Put the default back and name the test that left it. (The cause
    seen so far, Dagster copying an ignored SIGINT onto SIGTERM, is dealt with at the top of this file.)"""
    import signal
    import sys

    yield
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN or _sigterm_ignored_by_the_os():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        print(f"\n{request.node.nodeid} left SIGTERM ignored; put back to the default", file=sys.__stderr__,
              flush=True)
    elif signal.getsignal(signal.SIGTERM) != _SIGTERM_AT_START and _SIGTERM_AT_START is not None:
        # a Python handler left behind that doesn't end the process: a child forked later (a multiprocessing pool)
        # inherits it and never stops on the SIGTERM its pool sends it (CI hung in test_ratelimit's pool)
        signal.signal(signal.SIGTERM, _SIGTERM_AT_START)
        print(f"\n{request.node.nodeid} left a SIGTERM handler; put back the worker's own", file=sys.__stderr__,
              flush=True)


def _sigterm_ignored_by_the_os() -> bool:
    """C code (an extension's sigaction) can ignore SIGTERM without Python's handler table knowing: ask the kernel."""
    import signal

    try:
        for line in open("/proc/self/status"):
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return False
