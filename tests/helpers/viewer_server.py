"""`evalpipe view --web` on a free port in a process of its own, for the tests that drive it from a browser."""
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tests.helpers.services import free_port

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def viewer_server(env: dict[str, str], timeout_s: float = 60.0) -> Iterator[str]:
    """Starts the viewer with `env` added to this process's environment (EVALS_WAREHOUSE, EVALS_CONFIG, ...) and
    yields its base URL; stops it (its whole process group) afterwards."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "view", "--web", "--port", str(port)], cwd=REPO,
                            env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(url + "/index.json", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read().decode() if proc.poll() is not None else "(still running)"
                    raise RuntimeError(f"viewer did not start: {out}")
                time.sleep(0.3)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
