"""tau2-bench recordings replayed through the tool loop (tests/test_tau2*.py), and the dump the official evaluator
reads (scripts/tau2_official_verdicts.py):

    PYTHONPATH=$PWD .venv/bin/python -m tests.helpers.tau2 DOMAIN > /tmp/DOMAIN_trajectories.json
"""
import asyncio
import json
import sys
from pathlib import Path

from evalpipe.benchmarks import adapter_for
from evalpipe.core.config import ModelConfig, SplitConfig
from evalpipe.core.types import RolloutRequest
from evalpipe.runners.base import build_runner
from evalpipe.runners.tool_loop import run_conversation

REPO = Path(__file__).resolve().parents[2]
REC = REPO / "data/tau2/recordings"


def user_entry(domain: str) -> dict:
    return {"runner": "echo", "reply": "script", "script": str(REC / f"{domain}_user.jsonl")}


def split(name: str = "retail", metrics=None, **options) -> SplitConfig:
    return SplitConfig(key=f"tau2/{name}", benchmark="tau2", split=name, adapter="tau2",
                       options={"path": "data/tau2", "user_simulator": user_entry(name), **options},
                       metrics=metrics, prompt_template=None, base_dir=REPO)


def recorded_rows(domain: str) -> list[str]:
    return [json.loads(line)["sample_id"] for line in (REC / f"{domain}_agent.jsonl").read_text().splitlines()
            if line.strip()]


def converse(adapter, env, runner, sample, row_id):
    req = RolloutRequest(sample_id=row_id, messages=adapter.build_messages(sample), fingerprint="f",
                         tools=sample.tools, metadata=sample.metadata)
    return asyncio.run(run_conversation(runner, req, env, 60))


def replay(domain: str, metrics=None) -> dict:
    """Every recorded conversation of the domain: row id -> (sample, generation)."""
    ad = adapter_for(split(domain, metrics=metrics))
    env = ad.tool_env()
    agent = build_runner(ModelConfig(key="rec", runner="echo", options={
        "reply": "script", "script": str(REC / f"{domain}_agent.jsonl")}))
    samples = {s.id: s for s in ad.load()}
    out = {}
    for row in recorded_rows(domain):
        s = samples[row.split("#")[0]]
        out[row] = (s, converse(ad, env, agent, s, row))
    asyncio.run(env.aclose())
    return out


def main() -> None:
    domain = sys.argv[1]
    judged = {"metrics": [{"name": "tau2_reward", "judge": {"runner": "echo"}}]}
    rows = replay(domain, **judged)
    json.dump({row: {"trajectory": [m for m in gen.trajectory if m.get("role") != "system"],
                     "stop_reason": gen.stop_reason} for row, (_, gen) in rows.items()}, sys.stdout, indent=1)


if __name__ == "__main__":
    main()


def run_recordings(home, write_config, monkeypatch, domain: str, split_entry: str, extra: str = "",
                   metrics: str = "") -> dict:
    """`evalpipe run` of `domain`'s shipped recordings (agent and user scripts) with 3 epochs, through the CLI and
    the warehouse: {metric: value} of the split's `all` slice. `extra`: more top-level config (e.g. `judges:`);
    `metrics`: the benchmark's `metrics:` line."""
    from evalpipe.store.warehouse import Warehouse
    from tests.helpers.cli import invoke, restore_cli_env

    restore_cli_env(monkeypatch)
    write_config(f"""{extra}benchmarks:
  tau2:
    adapter: tau2
    splits:
      {domain}: {split_entry}
{metrics}    options:
      path: {REPO}/data/tau2
      epochs: 3
      user_simulator: {{runner: echo, reply: script, script: {REC}/{domain}_user.jsonl}}
models:
  recorded: {{runner: echo, reply: script, script: {REC}/{domain}_agent.jsonl}}
""")
    r = invoke("run", "--model", "recorded", "--no-progress")
    assert r.exit_code in (0, 3), r.output
    m = Warehouse(home / "warehouse.duckdb").query("select metric, value from metrics where slice = 'all'")
    return dict(zip(m["metric"], m["value"]))
