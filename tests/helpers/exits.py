"""A Python script in its own process, under a hard timeout: for code that might hang or keep its process alive
(a regression then fails its test instead of hanging the suite)."""
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class ScriptRun:
    reports: list  # the JSON objects the script printed, one per `report(...)` line
    returncode: int | None  # None: killed at the hard timeout
    exit_after_s: float | None  # seconds from the script's last report to its process's exit (None: no report)
    output: str


PRELUDE = """
import json as _json, sys as _sys, time as _time
def report(**fields):
    _sys.stdout.write("REPORT " + _json.dumps({**fields, "at": _time.time()}, default=str) + "\\n")
    _sys.stdout.flush()
"""


def run_script(code: str, timeout_s: float = 120, env: dict | None = None) -> ScriptRun:
    """Runs `code` (which may call `report(**fields)`) in a fresh interpreter from the repository root; kills it
    at `timeout_s`. The exit time is measured against the last report's wall-clock time."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
           "LITELLM_OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + code], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        ended, code_ = time.time(), proc.returncode
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        ended, code_ = None, None
    reports = [json.loads(line[len("REPORT "):]) for line in out.splitlines() if line.startswith("REPORT ")]
    after = ended - reports[-1]["at"] if reports and ended is not None else None
    return ScriptRun(reports, code_, after, out)
