"""The real Dagster webserver serves the code location: the asset graph and partitions are visible."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.services import free_port

REPO = Path(__file__).parents[1]

QUERY = """{ assetNodes { assetKey { path } partitionDefinition { dimensionTypes { name } } } }"""


@pytest.mark.slow
def test_webserver_serves_the_asset_graph(home):
    port = free_port()
    exe = Path(sys.executable).with_name("dagster-webserver")
    proc = subprocess.Popen([str(exe), "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        data = None
        while time.monotonic() < deadline:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": QUERY}).encode(),
                                             headers={"Content-Type": "application/json"})
                data = json.loads(urllib.request.urlopen(req, timeout=5).read())
                if data.get("data", {}).get("assetNodes"):
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert data and data["data"]["assetNodes"], data
        nodes = {"/".join(n["assetKey"]["path"]): n for n in data["data"]["assetNodes"]}
        assert set(nodes) == {"dataset", "metric_settings", "prompts", "rollouts", "judgements", "metrics", "leaderboard", "pairwise", "reviews"}
        dims = [d["name"] for d in nodes["rollouts"]["partitionDefinition"]["dimensionTypes"]]
        assert dims == ["benchmark_split", "model"]
        assert nodes["leaderboard"]["partitionDefinition"] is None
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
