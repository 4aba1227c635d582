"""Judges' usage (issue 34): each judge call's tokens, cost and latency in its verdict's details, summed into the
partition's `judge_*` usage rows, adding up to what the (priced, loopback) judge endpoint counted; cached and
duplicate calls count 0; a judge's calls count against `budget:` and a judge stopped by it fails its partition."""
import asyncio
import json

import pandas as pd
import pytest

from benchmarks.mock_server import serve_in_thread
from evalpipe.core.errors import RunFailed
from evalpipe.metrics.aggregate import aggregate
from evalpipe.metrics.base import JudgeInput
from evalpipe.metrics.llm_judge import LLMJudge
from evalpipe.store.ratelimit import budget_for, budget_ledgers, spend_scope
from tests.helpers.priced import PRICING, PricedMock

VERDICT = '{"rationale": "same answer as the reference", "verdict": "correct"}'


class JudgeMock(PricedMock):
    def answer_for(self, prompt: str) -> str:
        return VERDICT


def _metric(url: str) -> LLMJudge:
    return LLMJudge(judge={"name": "j", "runner": "litellm", "model": "openai/judge", "api_base": url,
                           "options": {"pricing": PRICING}}, concurrency=4)


def _items(n: int, dup: int = 0) -> list[JudgeInput]:
    items = [JudgeInput(sample_id=f"s{i}", input=f"question {i}", target="Paris", prediction=f"Paris {i}")
             for i in range(n)]
    return items + [JudgeInput(sample_id=f"d{i}", input=f"question {i}", target="Paris", prediction=f"Paris {i}")
                    for i in range(dup)]  # the same messages as s0..: sent once


def _judgements(scores) -> pd.DataFrame:
    return pd.DataFrame({"sample_id": [f"x{i}" for i in range(len(scores))], "metric": "llm_judge",
                         "status": [s.status for s in scores], "score": [s.value for s in scores],
                         "target": "Paris", "slices": None, "details": [json.dumps(s.details) for s in scores]})


def _usage(df: pd.DataFrame) -> dict[str, float]:
    rows = aggregate(df)
    return dict(zip(rows.loc[rows["slice"] == "usage", "metric"], rows.loc[rows["slice"] == "usage", "value"]))


def test_judge_tokens_and_cost_add_up_to_what_the_endpoint_counted(home):
    with serve_in_thread(JudgeMock(latency=0.01)) as (mock, url):
        scores = asyncio.run(_metric(url).ascore_many(_items(12, dup=3)))
        usage = _usage(_judgements(scores))
        assert len(mock.served) == 12  # the 3 duplicates were not sent
        assert usage["judge_calls"] == 12
        assert usage["judge_input_tokens_total"] + usage["judge_output_tokens_total"] == mock.tokens()
        assert usage["judge_cost_usd_total"] == pytest.approx(mock.cost())
        assert usage["judge_latency_s_mean"] > 0.005
        per_call = scores[0].details["judges"]["j"]["usage"]
        assert set(per_call) == {"cached", "input_tokens", "output_tokens", "cost", "latency_s"}

        again = asyncio.run(_metric(url).ascore_many(_items(12)))  # from the judge cache: nothing sent, nothing paid
        assert len(mock.served) == 12
        assert _usage(_judgements(again))["judge_cost_usd_total"] == 0.0


def test_a_judge_counts_against_the_budget_and_stops_with_its_partition(home, tmp_path):
    rl = {"store": str(tmp_path / "rl.sqlite")}
    with serve_in_thread(JudgeMock()) as (mock, url):
        budget = budget_for({"run": {"cost_usd": 0.2}}, budget_ledgers("r", project="p"), rl)
        with spend_scope(budget), pytest.raises(RunFailed, match="stopped by budget run"):
            asyncio.run(_metric(url).ascore_many(_items(40)))
        spent = budget.status()[0]["cost_usd"]
    assert spent == pytest.approx(mock.cost()) and 0.2 <= spent < 0.2 + 4 * mock.max_request_cost()
    assert len(mock.served) < 40


class HMSMock(PricedMock):
    """DiscoveryBench's judge calls by prompt kind (split, context, variables, relation); a prediction that holds
    "unreadable" gets a context reply that is never JSON, so its sample fails after five tries, its calls paid."""

    def answer_for(self, prompt: str) -> str:
        if "Split the hypothesis" in prompt:
            ctx = "adults in the US" if "Hypothesis: GOLD" in prompt else "American adults"
            text = "older adults earn more" + (" unreadable" if "unreadable" in prompt else "")
            return json.dumps({"sub_hypo": [{"text": text, "context": ctx,
                                             "variables": ["age", "income"], "relations": "positive"}]})
        if "same context" in prompt:
            return "They match." if "unreadable" in prompt else '{"match": true}'
        if "Count the variables" in prompt:
            return '{"sizeA": 2, "sizeB": 3, "intersection": 2, "explanation": "age, income"}'
        return '{"answer": "A) very similar", "explanation": "same"}'


def test_hms_score_judge_calls_are_in_the_usage_rows(home):
    from evalpipe.metrics import build_metric

    with serve_in_thread(HMSMock()) as (mock, url):
        metric = build_metric({"name": "hms_score", "judge": {"name": "j", "runner": "litellm", "model": "openai/judge",
                                                              "api_base": url, "options": {"pricing": PRICING}}})
        items = [JudgeInput(sample_id=f"s{i}", input=f"How does income relate to age? {i}", target=f"GOLD {i}",
                            prediction=f"PRED {i}" + (" unreadable" if i == 2 else "")) for i in range(3)]
        scores = asyncio.run(metric.ascore_many(items))
        assert [s.status for s in scores] == ["scored", "scored", "parse_error"]
        df = _judgements(scores).assign(metric="hms_score")
        usage = _usage(df)
        assert usage["judge_calls"] == len(mock.served)  # every call sent, the failed sample's too
        assert usage["judge_input_tokens_total"] + usage["judge_output_tokens_total"] == mock.tokens()
        assert usage["judge_cost_usd_total"] == pytest.approx(mock.cost())
