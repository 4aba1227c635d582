"""The kill -9 resume harness: a run in a child process, killed with SIGKILL once its journal holds enough samples."""
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


def journaled(journal: Path) -> set[str]:
    """The sample ids a rollouts journal has finished, read while another process may be writing it."""
    if not journal.exists():
        return set()
    # as a URI, the path percent-encoded (a split key's journal folder holds `%2F`, which a raw URI decodes to `/`)
    con = sqlite3.connect(f"{Path(journal).resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in con.execute("SELECT sample_id FROM done")}
    except sqlite3.OperationalError:  # table not created yet
        return set()
    finally:
        con.close()


def start_child(code: str, home: Path) -> subprocess.Popen:
    """`python -c code` with the repository importable (so that it can import tests.*) and DAGSTER_HOME=home."""
    prelude = f"import sys\nsys.path.insert(0, {str(REPO)!r})\n"
    return subprocess.Popen([sys.executable, "-c", prelude + code], env={**os.environ, "DAGSTER_HOME": str(home)})


def kill9_when(child: subprocess.Popen, ready: Callable[[], bool], timeout_s: float = 60, poll_s: float = 0.02) -> None:
    """SIGKILL the child as soon as `ready()` holds; fails if the child ends first or makes no progress in time."""
    deadline = time.time() + timeout_s
    while not ready():
        assert child.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, "the run made no progress"
        time.sleep(poll_s)
    child.send_signal(signal.SIGKILL)
    child.wait()
