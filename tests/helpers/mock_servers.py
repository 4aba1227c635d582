"""The loopback model server (benchmarks/mock_server.py) in a process of its own, for tests whose clients are other
processes (`evalpipe run` children). In-process tests use benchmarks.mock_server.serve_in_thread instead."""
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def mock_server_process(latency: float = 0.0) -> Iterator[int]:
    """Starts `python -m benchmarks.mock_server` and yields its port (it prints `port <n>` first)."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.mock_server", "--latency", str(latency)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield int(proc.stdout.readline().split()[1])
    finally:
        proc.terminate()
        proc.wait(10)


def litellm_models(port: int, n: int) -> str:
    """YAML lines for `models:` m0..m{n-1}, each a litellm model openai/mock-<i> on the mock at port."""
    return "".join(f"  m{i}:\n    runner: litellm\n    model: openai/mock-{i}\n"
                   f"    api_base: http://127.0.0.1:{port}/v1\n    params: {{max_tokens: 8}}\n" for i in range(n))
