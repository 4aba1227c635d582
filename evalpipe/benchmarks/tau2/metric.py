"""`tau2_reward`: the official tau2-bench reward of each conversation (evaluate.py), and pass^k rows over the
split's epochs (trials) (evalpipe/metrics/tau2_pass_hat_k.py). Registered here, beside the domain toolkits it
replays, as `gaia` is registered beside its adapter."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.benchmarks.tau2.data import load_domain
from evalpipe.benchmarks.tau2.env import DomainEnv
from evalpipe.benchmarks.tau2.evaluate import evaluate
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import NoSettings
from evalpipe.metrics.tau2_pass_hat_k import pass_hat_k_rows

EPOCH_COUNTS = "epoch_counts"  # (evalpipe/metrics/aggregate.py: a reduced row's [epochs, epochs scoring >= 1])


@register_metric("tau2_reward")
class Tau2Reward(Metric):
    name = "tau2_reward"
    requires_target = False
    option_schema = NoSettings
    inputs = frozenset({"metadata", "trajectory", "stop_reason"})

    def score(self, item: JudgeInput) -> Score:
        from evalpipe.benchmarks.tau2 import toolkit_for

        md = item.metadata
        task, domain = md.get("task"), md.get("domain")
        if not task or not domain:
            return Score(value=None, status="error", reason="not a tau2 sample (no task in its metadata)")
        dom = load_domain(Path(md["data_path"]), domain)
        kit = toolkit_for(domain, "tau2_reward")
        v = evaluate(task, item.trajectory or [], item.stop_reason, lambda: DomainEnv(kit, dom["db"], task))
        details: dict[str, Any] = {"termination": item.stop_reason, "reward_breakdown": v.breakdown,
                                   "db_match": v.db_match, "action_checks": v.action_checks,
                                   "communicate_checks": v.communicate_checks}
        if v.db_diff:
            details["db_diff"] = v.db_diff  # path -> [expected, got] (the viewer shows it)
        if v.note:
            details["note"] = v.note
        if v.needs_judge:
            return Score(value=None, status="unscored", details=details,
                         reason=f"task {task['id']}: {len(v.needs_judge)} nl_assertions need a judge, which "
                                f"tau2_reward does not run yet (the official reward would use one)")
        return Score(value=v.reward, correct=v.reward == 1.0, reason=v.note or "", details=details)

    @staticmethod
    def summary_rows(metric: str, counted: pd.DataFrame, details: list[dict], seed: int) -> list[dict]:
        """`tau2_reward_pass^k`, k = 1 .. the fewest trials of any task (official pass^k; trials = epochs)."""
        counts = []
        for d, v in zip(details, counted["score"].to_numpy(dtype=float)):
            n, c = (d.get(EPOCH_COUNTS) or [1, int(v >= 1.0 - 1e-6)])
            counts.append((int(n), int(c)))
        return pass_hat_k_rows(metric, counts, seed)
