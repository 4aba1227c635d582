"""Asset checks on rollouts and metrics, run with the assets on the real instance, results read back."""
import pandas as pd
import pytest
from dagster import DagsterEventType

from eval_assets.checks import (accounted_result, error_rate_result, failed_samples_meta, gate_failed_samples,
                                parse_failure_result, unaccounted_samples)
from evalpipe.project import load_config
from evalpipe.runners import Runner, register_runner
from evalpipe.core.types import Generation
from tests.helpers.configs import smoke_benchmark


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

CONFIG = smoke_benchmark(limit=4, metrics="[exact_match, {name: llm_judge, judge: j}]") + """models:
  good: {runner: echo, reply: target}
  flaky: {runner: flaky}
judges:
  j: {runner: half_readable, model: j}
checks: {max_error_rate: 0.3, max_parse_error_rate: 0.2}
"""


def check_outcomes(instance, run_id, model=None):
    """{(asset, check): evaluation} of a run; `model`: only that model's partitions (a batch run carries several)."""
    out = {}
    for rec in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
        ev = rec.dagster_event.event_specific_data
        if model is None or (ev.partition or "").endswith(f"|{model}"):
            out[(ev.asset_key.path[-1], ev.check_name)] = ev
    return out


@pytest.mark.slow
def test_checks_run_with_the_assets_and_gate_errors_and_parse_failures(instance, home, write_config):
    from eval_assets.launch import evaluate

    write_config(CONFIG)
    result = evaluate(load_config(), ["smoke/extra"], ["good", "flaky"], instance=instance)
    assert all(p.success for p in result.partitions), result  # checks report; they don't fail the runs
    runs = {p.model: p.run_id for p in result.partitions}
    good, flaky = check_outcomes(instance, runs["good"], "good"), check_outcomes(instance, runs["flaky"], "flaky")
    # no tool_integration metric in this project: its gates are not declared (test_tool_gates_are_declared_...)
    assert set(good) == {("rollouts", "error_rate"), ("metrics", "samples_accounted"), ("metrics", "judge_parse_failures")}
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
    assert unaccounted_samples(prompts, j) == []
    lost = pd.concat([j.iloc[:2].assign(status=["scored", "lost"]),
                      pd.DataFrame({"sample_id": ["a", "b", "c"], "metric": "m2", "status": "scored"})])
    assert unaccounted_samples(prompts, lost) == ["b", "c"]  # b: unknown status; c: no judgement for m
    j2 = pd.DataFrame({"metric": "m", "status": ["scored", "parse_error", "unscored", "error"]})
    ok, meta = parse_failure_result(j2, 0.4)
    assert not ok and meta["worst_parse_error_rate"] == 0.5  # unscored and failed rollouts were never judged
    assert parse_failure_result(j2, 0.5)[0]


# ---- gates that block (issue 25) -------------------------------------------------------------------------------------
def test_a_failed_gate_links_to_the_samples_that_failed_it(monkeypatch):
    """A failed gate's metadata links to the viewer's sample list narrowed to its culprits: for a tool-integration
    gate, the samples whose result records break it (a contaminated control for controls_with_integration, an
    eligible item without integration for coverage); gates over pooled scores name no sample."""
    import json
    from urllib.parse import parse_qs, urlparse

    from partitions import eval_key

    def record(kind, integrated=True, contaminated=False):
        return json.dumps({"result_version": 1, "kind": kind, "eligible": {"coverage": kind == "item"},
                           "flags": {"integrated": integrated, "contaminated": contaminated}, "calls": {}})

    j = pd.DataFrame({"sample_id": ["i1", "i2", "c1", "c2", "x"],
                      "metric": ["tool_integration"] * 4 + ["exact_match"],
                      "details": [record("item"), record("item", integrated=False), record("control"),
                                  record("control", contaminated=True), record("control", contaminated=True)]})
    assert gate_failed_samples(j, ["controls_with_integration"]) == ["c2"]  # x is another metric's row
    assert gate_failed_samples(j, ["coverage", "controls_with_integration"]) == ["c2", "i2"]
    assert gate_failed_samples(j, ["f1_strict_macro"]) == []
    monkeypatch.setenv("EVALS_VIEWER_URL", "http://viewer:8585")
    meta = failed_samples_meta(eval_key("tools/test", "m1"), ["c2", "i2"], metric="tool_integration")
    url = urlparse(meta["failed_samples_link"].url)
    assert meta["failed_samples"] == 2 and url.path == "/samples"
    assert parse_qs(url.query) == {"split": ["tools/test"], "model": ["m1"], "metric": ["tool_integration"],
                                   "ids": ["c2,i2"]}
    assert failed_samples_meta(eval_key("tools/test", "m1"), []) == {}


def _spec_names(project) -> dict[str, bool]:
    from eval_assets.checks import eval_checks

    return {spec.name: spec.blocking for c in eval_checks(project) for spec in c.check_specs}


def test_tool_gates_are_declared_only_where_a_split_has_the_metric(project_from):
    from tests.helpers.configs import SMOKE_JSONL

    def project(metrics):
        return project_from({"benchmarks": {"smoke": {
            "adapter": "file", "splits": {"extra": {"path": str(SMOKE_JSONL)}}, "metrics": metrics,
            "options": {"columns": {"prompt": "question", "target": "answer", "id": "id"}}}},
            "models": {"m": {"runner": "echo"}}})

    plain = _spec_names(project(["exact_match"]))
    assert "tool_integration_gates" not in plain and plain["samples_accounted"] is True
    assert plain["judge_parse_failures"] is False
    assert _spec_names(project(["exact_match", "tool_integration"]))["tool_integration_gates"] is True
    # the Definitions the code location serves declare the same checks
    from dagster import AssetCheckKey, AssetKey

    from eval_assets.factory import build_definitions

    keys = build_definitions(project(["exact_match"])).resolve_asset_graph().asset_check_keys
    assert AssetCheckKey(AssetKey("metrics"), "samples_accounted") in keys
    assert AssetCheckKey(AssetKey("metrics"), "tool_integration_gates") not in keys
    from eval_assets.checks import METRICS_CHECK_SPECS

    assert all(spec.description for spec in METRICS_CHECK_SPECS.values())  # each says what failing means
    assert "not ranked" in METRICS_CHECK_SPECS["tool_integration_gates"].description


def test_a_failed_gate_keeps_a_partition_unranked_with_the_reason():
    from evalpipe.pipeline.stages import build_leaderboard, leaderboard_display

    metrics = pd.DataFrame([{"benchmark_split": "s/t", "model": m, "metric": "exact_match", "slice": "all", "value": v,
                             "n": 4, "n_unscored": 0, "n_errors": 0} for m, v in (("a", 0.5), ("b", 0.9), ("c", 0.2))])
    gates = pd.DataFrame([
        {"benchmark_split": "s/t", "model": "b", "check": "tool_integration_gates", "passed": False, "severity": "ERROR",
         "description": "coverage: fail (0.5)"},
        {"benchmark_split": "s/t", "model": "c", "check": "samples_accounted", "passed": False, "severity": "WARN",
         "description": "a warning does not block"},
        {"benchmark_split": "s/t", "model": "a", "check": "samples_accounted", "passed": True, "severity": "ERROR",
         "description": None}])
    board = build_leaderboard(metrics, gates=gates)
    by = board.set_index("model")
    assert by.loc["a", "rank"] == 1 and by.loc["c", "rank"] == 2  # b's higher value does not rank
    assert pd.isna(by.loc["b", "rank"]) and by.loc["b", "gate"] == "tool_integration_gates failed: coverage: fail (0.5)"
    assert by.loc["b", "value"] == 0.9  # its numbers stay listed
    shown = leaderboard_display(board).set_index("model")
    assert shown.loc["b", "rank"] == "gate failed" and "coverage" in shown.loc["b", "gate"]
    assert list(build_leaderboard(metrics)["rank"]) == [1, 2, 3]  # no gates: as before
    only_blocked = build_leaderboard(metrics[metrics["model"] == "b"], gates=gates)  # nothing left to rank
    assert only_blocked["tied"].dtype == bool and only_blocked["rank"].isna().all()


@pytest.mark.slow
def test_a_partition_whose_blocking_gate_failed_is_off_the_leaderboard(instance, home, write_config, monkeypatch):
    """samples_accounted fails for one model only: its run stops before anything downstream, the CLI exits 3, its
    metrics stay in the warehouse, and the leaderboard (asset and `evalpipe leaderboard`) lists it unranked saying
    why; the other model ranks."""
    from evalpipe.core.types import Score
    from evalpipe.metrics import register_metric
    from evalpipe.metrics.base import Metric
    from evalpipe.store.warehouse import Warehouse
    from tests.helpers.cli import invoke, restore_cli_env

    class LosesWrongAnswers(Metric):
        name = "loses_wrong"

        def score(self, item):  # a wrong answer's verdict has an unknown status: the sample is unaccounted
            return Score(value=1.0, status="scored") if item.prediction == item.target else Score(value=None, status="lost")

    register_metric("loses_wrong", LosesWrongAnswers, replace=True)
    restore_cli_env(monkeypatch)
    write_config(smoke_benchmark(limit=2, metrics="[loses_wrong]") + """models:
  right: {runner: echo, reply: target}
  wrong: {runner: echo, reply: input}
""")
    r = invoke("run", "--model", "right", "--model", "wrong", "--no-progress")
    assert r.exit_code == 3, r.output
    assert "check samples_accounted on metrics [smoke/extra|wrong]: FAILED" in r.output
    wh = Warehouse(home / "warehouse.duckdb")
    assert set(wh.query("select model from metrics")["model"]) == {"right", "wrong"}  # still viewable
    board = wh.read_table("leaderboard").set_index("model")
    assert board.loc["right", "rank"] == 1 and pd.isna(board.loc["right", "gate"])
    assert pd.isna(board.loc["wrong", "rank"]) and board.loc["wrong", "gate"].startswith("samples_accounted failed")
    gate = [check_outcomes(instance, run.run_id, "wrong").get(("metrics", "samples_accounted")) for run in instance.get_runs()]
    failed = [g for g in gate if g is not None and not g.passed]
    link = failed[0].metadata["failed_samples_link"].url  # the UI links to the wrong model's unaccounted samples
    assert "model=wrong" in link and "ids=s1%2Cs2" in link and failed[0].metadata["failed_samples"].value == 2
    out = invoke("leaderboard").output
    line = next(x for x in out.splitlines() if " wrong " in x)
    assert "gate failed" in line and "samples_accounted failed" in line
