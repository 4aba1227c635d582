"""`tau2_reward`: the official tau2-bench reward of each conversation (evaluate.py), and pass^k rows over the
split's epochs (trials) (evalpipe/metrics/tau2_pass_hat_k.py). Registered here, beside the domain toolkits it
replays, as `gaia` is registered beside its adapter."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from pydantic import Field

from evalpipe.benchmarks.tau2.data import load_domain
from evalpipe.benchmarks.tau2.env import DomainEnv
from evalpipe.benchmarks.tau2.evaluate import evaluate
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import MetricSettings, JudgeSpec
from evalpipe.metrics.tau2_pass_hat_k import pass_hat_k_rows

EPOCH_COUNTS = "epoch_counts"  # (evalpipe/metrics/aggregate.py: a reduced row's [epochs, epochs scoring >= 1])


class Tau2RewardSettings(MetricSettings):
    """The judge of the tasks whose reward basis holds NL_ASSERTION (unused by the others)."""

    judge: Optional[JudgeSpec] = Field(None, description="a name under 'judges:' or a mapping with runner and model")
    concurrency: Optional[int] = Field(None, ge=1, description="a whole number >= 1")
    timeout_s: Optional[float] = Field(None, gt=0, description="a number of seconds > 0")
    max_retries: Optional[int] = Field(None, ge=0, description="a whole number >= 0")


def judge_spec(metrics: list[Any] | None) -> Any:
    """The `judge:` of the split's `tau2_reward` entry (None: none given)."""
    for spec in metrics or []:
        if isinstance(spec, dict) and spec.get("name") == "tau2_reward":
            return spec.get("judge")
    return None


@register_metric("tau2_reward")
class Tau2Reward(Metric):
    """Settings: `judge` (a name under `judges:` or an inline model entry), the judge of natural-language
    assertions, needed only by tasks with NL_ASSERTION in their reward basis (the adapter refuses a split holding
    such tasks without one, before any model call); `concurrency`, `timeout_s`, `max_retries` of its calls."""

    name = "tau2_reward"
    requires_target = False
    option_schema = Tau2RewardSettings
    takes_config = True  # `judges:` (the judge named by `judge:`) and `rate_limits:`
    inputs = frozenset({"metadata", "trajectory", "stop_reason"})

    def __init__(self, config: Any = None, **settings: Any):
        super().__init__(**settings)
        self.config, self._client = config, None

    def identity(self) -> dict[str, Any]:
        from evalpipe.metrics.judge_client import CALL_SETTINGS

        out: dict[str, Any] = {"metric": self.name, "settings": {}}
        if self.settings.get("judge") is not None:
            out["judge"] = self.client().identity
        return {**out, "settings": {k: v for k, v in self.settings.items() if k not in CALL_SETTINGS + ("judge",)}}

    def client(self) -> Any:
        from evalpipe.metrics.judge_client import CALL_SETTINGS, JudgeClient, resolve_judge

        if self._client is None:
            model = resolve_judge(self.settings["judge"], "judge", self.config)
            call = {k: self.settings[k] for k in CALL_SETTINGS if k in self.settings}
            rate_limits = self.config.raw.get("rate_limits") if self.config is not None else None
            self._client = JudgeClient(model, call, rate_limits=rate_limits)
        return self._client

    def score(self, item: JudgeInput) -> Score:
        return asyncio.run(self.ascore_many([item]))[0]

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        """Each conversation's verdict; the NL assertions of those that need them asked of the judge in one batch."""
        from evalpipe.benchmarks.tau2.nl import judge_messages, read_reply

        done = [self._verdict(i) for i in items]
        ask = [k for k, (_, v, _d) in enumerate(done) if v is not None and v.needs_judge]
        replies: list[Any] = []
        if ask and self.settings.get("judge") is not None:
            batch = [judge_messages(items[k].trajectory or [], done[k][1].needs_judge) for k in ask]
            replies = await self.client().ask_many(batch)
        out: list[Score] = []
        for k, (score, v, details) in enumerate(done):
            if score is not None:
                out.append(score)
                continue
            if not v.needs_judge:
                out.append(Score(value=v.reward, correct=v.reward == 1.0, reason=v.note or "", details=details))
                continue
            task_id = items[k].metadata["task"]["id"]
            if self.settings.get("judge") is None:
                out.append(Score(value=None, status="unscored", details=details,
                                 reason=f"task {task_id}: {len(v.needs_judge)} nl_assertions need a judge: give "
                                        f"tau2_reward one (metrics: [{{name: tau2_reward, judge: <a name under "
                                        f"judges:>}}])"))
                continue
            reply = replies[ask.index(k)]
            if reply.text is None:
                out.append(Score(value=None, status="error", details=details,
                                 reason=f"task {task_id}: the NL-assertion judge failed: {reply.error}"))
                continue
            nl, checks, why = read_reply(reply.text)
            details["nl_assertions"] = checks
            if nl is None:
                details["judge_reply"] = reply.text[:2000]
                out.append(Score(value=None, status="parse_error", details=details, reason=f"task {task_id}: {why}"))
                continue
            details["reward_breakdown"]["NL_ASSERTION"] = nl
            reward = 1.0
            for value in details["reward_breakdown"].values():
                reward *= value
            out.append(Score(value=reward, correct=reward == 1.0, reason=v.note or "", details=details))
        return out

    def _verdict(self, item: JudgeInput) -> tuple[Score | None, Any, dict[str, Any]]:
        from evalpipe.benchmarks.tau2 import toolkit_for, user_side

        md = item.metadata
        task, domain = md.get("task"), md.get("domain")
        if not task or not domain:
            return Score(value=None, status="error", reason="not a tau2 sample (no task in its metadata)"), None, {}
        dom = load_domain(Path(md["data_path"]), domain)
        kit = toolkit_for(domain, "tau2_reward")
        side = user_side(domain, dom, "tau2_reward")
        v = evaluate(task, item.trajectory or [], item.stop_reason, lambda: DomainEnv(kit, dom["db"], task, **side))
        details: dict[str, Any] = {"termination": item.stop_reason, "reward_breakdown": v.breakdown,
                                   "db_match": v.db_match, "action_checks": v.action_checks,
                                   "communicate_checks": v.communicate_checks}
        if v.db_diff:
            details["db_diff"] = v.db_diff  # path -> [expected, got] (the viewer shows it)
        if v.note:
            details["note"] = v.note
        return None, v, details

    @staticmethod
    def summary_rows(metric: str, counted: pd.DataFrame, details: list[dict], seed: int) -> list[dict]:
        """`tau2_reward_pass^k`, k = 1 .. the fewest trials of any task (official pass^k; trials = epochs)."""
        counts = []
        for d, v in zip(details, counted["score"].to_numpy(dtype=float)):
            n, c = (d.get(EPOCH_COUNTS) or [1, int(v >= 1.0 - 1e-6)])
            counts.append((int(n), int(c)))
        return pass_hat_k_rows(metric, counts, seed)
