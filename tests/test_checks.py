"""Asset checks on rollouts and metrics, run with the assets on the real instance, results read back."""
import pandas as pd
import pytest
from dagster import DagsterEventType

from eval_assets.checks import accounted_result, error_rate_result, parse_failure_result
from evalpipe.project import load_config
from evalpipe.runners import Runner, register_runner
from evalpipe.core.types import Generation


class Flaky(Runner):
    """Right on s1 and s4; fails for good on the others."""
    name = "flaky"

    async def generate(self, request):
        if request.sample_id not in ("s1", "s4"):
            raise ValueError("the model crashed")
        return Generation(text=request.target)


class HalfReadableJudge(Runner):
    """Its verdict on the answer 'Paris' can't be read; others are fine."""
    name = "half_readable"

    async def generate(self, request):
        prompt = request.messages[-1]["content"]
        return Generation(text="hmm, hard to say" if "Answer to grade:\nParis\n" in prompt else "VERDICT: correct")


register_runner("flaky", Flaky, replace=True)
register_runner("half_readable", HalfReadableJudge, replace=True)

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits: {extra: {path: "{repo}/data/smoke/test.jsonl", limit: 4}}
    options: {columns: {prompt: question, target: answer, id: id}}
    metrics: [exact_match, {name: llm_judge, judge: j}]
models:
  good: {runner: echo, reply: target}
  flaky: {runner: flaky}
judges:
  j: {runner: half_readable, model: j}
checks: {max_error_rate: 0.3, max_parse_error_rate: 0.2}
"""


def check_outcomes(instance, run_id):
    out = {}
    for rec in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
        ev = rec.dagster_event.event_specific_data
        out[(ev.asset_key.path[-1], ev.check_name)] = ev
    return out


@pytest.mark.slow
def test_checks_run_with_the_assets_and_gate_errors_and_parse_failures(instance, home, write_config):
    from eval_assets.launch import evaluate

    write_config(CONFIG)
    result = evaluate(load_config(), ["smoke/extra"], ["good", "flaky"], instance=instance)
    assert all(p.success for p in result.partitions), result  # checks report; they don't fail the runs
    runs = {p.model: p.run_id for p in result.partitions}
    good, flaky = check_outcomes(instance, runs["good"]), check_outcomes(instance, runs["flaky"])
    assert set(good) == {("rollouts", "error_rate"), ("metrics", "samples_accounted"), ("metrics", "judge_parse_failures"),
                         ("metrics", "tool_integration_gates")}
    assert good[("metrics", "tool_integration_gates")].passed  # not a tool-integration split: nothing to gate
    assert good[("rollouts", "error_rate")].passed
    assert not flaky[("rollouts", "error_rate")].passed  # 2 of 4 failed > 0.3
    assert flaky[("rollouts", "error_rate")].metadata["error_rate"].value == 0.5
    assert "the model crashed" in flaky[("rollouts", "error_rate")].metadata["first_errors"].value
    assert good[("metrics", "samples_accounted")].passed and flaky[("metrics", "samples_accounted")].passed
    # good: 1 unreadable verdict of 4 (> 0.2); flaky: 1 of the 2 judged (its failed rollouts are not judged)
    assert not good[("metrics", "judge_parse_failures")].passed
    assert good[("metrics", "judge_parse_failures")].metadata["worst_parse_error_rate"].value == 0.25
    assert good[("rollouts", "error_rate")].target_materialization_data is not None  # tied to the materialization
    # the latest result per check is what the UI shows on the asset's Checks tab
    from dagster import AssetCheckKey, AssetKey

    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [AssetCheckKey(AssetKey("rollouts"), "error_rate")])
    assert latest and list(latest.values())[0].run_id in runs.values()
    # the three metrics checks share one step (eval_assets/checks.py) yet each can be selected alone
    from dagster import AssetSelection

    from eval_assets.launch import run_assets
    from partitions import eval_key

    only = AssetSelection.assets("metrics").without_checks() | AssetSelection.checks(
        AssetCheckKey(AssetKey("metrics"), "judge_parse_failures"))
    alone = run_assets(only, eval_key("smoke/extra", "good"), instance)
    assert alone.success
    assert set(check_outcomes(instance, alone.run_id)) == {("metrics", "judge_parse_failures")}


def test_check_functions_on_hand_made_frames():
    roll = pd.DataFrame({"status": ["ok", "error", "ok", "ok"], "error": [None, "boom", None, None]})
    assert error_rate_result(roll, 0.25)[0] and not error_rate_result(roll, 0.2)[0]
    prompts = pd.DataFrame({"sample_id": ["a", "b", "c"]})
    j = pd.DataFrame({"sample_id": ["a", "b", "c"], "metric": "m", "status": ["scored", "unscored", "error"]})
    rows = pd.DataFrame([{"metric": "m", "slice": "all", "n": 2, "n_unscored": 1}])
    assert accounted_result(prompts, j, rows)[0]
    ok, meta = accounted_result(prompts, j.iloc[:2], rows)
    assert not ok and "without a judgement" in meta["problems"].value
    assert not accounted_result(prompts, j, rows.assign(n=1))[0]
    j2 = pd.DataFrame({"metric": "m", "status": ["scored", "parse_error", "unscored", "error"]})
    ok, meta = parse_failure_result(j2, 0.4)
    assert not ok and meta["worst_parse_error_rate"] == 0.5  # unscored and failed rollouts were never judged
    assert parse_failure_result(j2, 0.5)[0]
