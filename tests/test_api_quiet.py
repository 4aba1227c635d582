"""No Dagster warning from any API call: each form in a fresh process with every warning shown (`-W default`, as a
notebook shows them), stderr captured."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]

SCRIPT = """
import asyncio, sys, warnings
import evalpipe
rows = [{"input": "a", "target": "x"}, {"input": "b", "target": "y"}]
def agent(q: str) -> str:
    return "x"
async def run_task(task):
    return "?"
evalpipe.evaluate(benchmarks=["smoke/extra"], models=["fixed"])
evalpipe.evaluate(agent=agent, dataset=rows, metrics=["exact_match"])
evalpipe.stale_status(agent, rows)
evalpipe.Evaluator(metrics=["exact_match"]).evaluate(agent, rows)
asyncio.run(evalpipe.GAIA().run(run_task, level=1, max_n=1))
asyncio.run(evalpipe.evaluate_async(agent=agent, dataset=rows, name="again"))
warnings.warn("the user's own warning still shows")
print("done", file=sys.stderr)
"""


def test_no_dagster_warning_from_any_api_form(home, tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-W", "default", "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stderr.rstrip().endswith("done"), r.stderr[-3000:]
    warned = [line for line in r.stderr.splitlines() if "Warning" in line]
    assert len(warned) == 1 and "the user's own warning still shows" in warned[0], r.stderr[-3000:]
