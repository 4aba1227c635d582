"""Agent usage deltas (issue 22, the GAIA harness's executor): an agent reused across samples that keeps cumulative
usage has it read before and after each sample; the difference is the sample's usage (tokens, cost) and an event."""
import json

import evalpipe
from evalpipe.runners.agent import usage_delta, usage_owner, usage_snapshot

ROWS = [{"id": f"q{i}", "question": "x" * (i + 1), "answer": "ok"} for i in range(4)]


class CountingAgent:
    """Like an SDK client: one object for every sample, its usage a running total (prompt/completion naming)."""

    def __init__(self):
        self.usage = {"prompt_tokens": 100, "completion_tokens": 7, "cost": 0.5}  # from before this run

    def run(self, question: str) -> str:
        self.usage["prompt_tokens"] += 10 * len(question)
        self.usage["completion_tokens"] += len(question)
        self.usage["cost"] += 0.25
        return "ok"


def test_each_sample_gets_its_own_delta_of_the_agents_cumulative_usage(home):
    agent = CountingAgent()
    res = evalpipe.evaluate(agent=agent.run, dataset=ROWS, metrics=["exact_match"], name="usage-delta")
    assert res.success, res.errors
    s = res.samples.set_index("sample_id")
    for i in range(4):  # q{i} asks i+1 characters: 10 tokens in, 1 out per character; 0.25 each
        assert s.loc[f"q{i}", "input_tokens"] == 10 * (i + 1) and s.loc[f"q{i}", "output_tokens"] == i + 1
        assert abs(s.loc[f"q{i}", "cost"] - 0.25) < 1e-9
    from evalpipe.store.warehouse import Warehouse

    rollouts = Warehouse(home / "warehouse.duckdb").read(
        "rollouts", {"benchmark_split": s["benchmark_split"].iloc[0], "model": s["model"].iloc[0]}).set_index("sample_id")
    traj = rollouts.loc["q2", "trajectory"]  # the delta is stored with the rollout
    events = [e for e in (json.loads(traj) if isinstance(traj, str) else traj) if e.get("type") == "usage_delta"]
    assert events[0]["delta"] == {"input_tokens": 30, "output_tokens": 3, "cost": 0.25}
    assert agent.usage["prompt_tokens"] == 100 + 10 * (1 + 2 + 3 + 4)  # one agent, reused by every sample


def test_usage_owner_and_snapshot_forms():
    class Usage:
        input_tokens, output_tokens = 5, 2

    class Summarized:
        def usage_summary(self):
            return Usage()

        def __call__(self, task):
            return "x"

    assert usage_owner(lambda t: "x") is None  # a plain function keeps no usage
    owner = usage_owner(Summarized())
    assert usage_snapshot(owner) == {"input_tokens": 5, "output_tokens": 2}
    assert usage_delta({"input_tokens": 5}, {"input_tokens": 9, "cost": 0.1}) == {"input_tokens": 4, "cost": 0.1}
