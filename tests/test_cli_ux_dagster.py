"""Issue 14 in the Dagster UI: the leaderboard follows `metrics` by declarative automation (no hourly
schedule), each metrics materialization carries a chart and a viewer link, and `make dev`'s launcher."""
import pytest


def test_definitions_have_the_automation_sensor_and_no_hourly_schedule():
    from dagster import AutomationCondition

    from eval_assets.assets import leaderboard
    from eval_assets.definitions import defs

    assert isinstance(leaderboard.automation_conditions_by_key[leaderboard.key], AutomationCondition)
    names = {s.name for s in defs.sensors}
    assert "leaderboard_automation_sensor" in names
    assert "refresh_leaderboard_schedule" not in {s.name for s in defs.schedules}


@pytest.mark.slow
def test_leaderboard_is_requested_when_a_metrics_partition_changes(instance, write_config):
    from dagster import AssetKey, Definitions, evaluate_automation_conditions

    from eval_assets.assets import eval_assets

    from evalpipe.project import Project
    from eval_assets.launch import CHAIN, run_assets, sync_model_partitions
    from resources import project_resources

    write_config("""
benchmarks:
  smoke:
    adapter: file
    splits: {extra: {path: {repo}/data/smoke/test.jsonl, limit: 2}}
    options: {columns: {prompt: question, target: answer, id: id}}
    metrics: [exact_match]
models:
  good: {runner: echo}
""")
    sync_model_partitions(instance, ["good"])
    board = AssetKey("leaderboard")
    graph = Definitions(assets=eval_assets(Project.from_file()), resources=project_resources(Project.from_file()))
    first = evaluate_automation_conditions(defs=graph, instance=instance)
    cursor = first.cursor
    assert run_assets(["dataset"], "smoke/extra", instance).success
    r = run_assets(CHAIN, "smoke/extra|good", instance)
    assert r.success
    # the metrics materialization carries a chart and the viewer link
    mat = instance.get_latest_materialization_event(AssetKey("metrics")).asset_materialization
    assert "| exact_match | all | 0.000 |" in mat.metadata["chart"].value
    assert mat.metadata["viewer"].value.startswith("http://127.0.0.1:8585/samples?split=smoke%2Fextra&model=good")

    after = evaluate_automation_conditions(defs=graph, instance=instance, cursor=cursor)
    assert after.get_num_requested(board) == 1  # a metrics partition changed: rebuild
    again = evaluate_automation_conditions(defs=graph, instance=instance, cursor=after.cursor)
    assert again.get_num_requested(board) == 0  # handled: not requested twice for one change
    assert run_assets(["leaderboard"], None, instance).success
    idle = evaluate_automation_conditions(defs=graph, instance=instance, cursor=again.cursor)
    assert idle.get_num_requested(board) == 0


def test_chart_markdown_and_link(monkeypatch):
    import pandas as pd

    from evalpipe.viewer.links import metrics_chart_md, viewer_url

    df = pd.DataFrame([{"metric": "gaia", "slice": "all", "value": 0.5, "ci_low": 0.3, "ci_high": 0.7},
                       {"metric": "gaia", "slice": "level=1", "value": float("nan"), "ci_low": float("nan"),
                        "ci_high": float("nan")},
                       {"metric": "latency_s_p50", "slice": "usage", "value": 3.0, "ci_low": None, "ci_high": None}])
    md = metrics_chart_md(df)
    assert "| gaia | all | 0.500 | 0.300-0.700 | `" + "█" * 10 + "░" * 10 + "` |" in md
    assert "| gaia | level=1 | - | - | |" in md and "latency" not in md
    monkeypatch.setenv("EVALS_VIEWER_URL", "http://viewer.internal:9000/")
    assert viewer_url("gaia/validation", "m@x") == \
        "http://viewer.internal:9000/samples?split=gaia%2Fvalidation&model=m%40x"


def test_dev_launcher_stops_every_service_on_the_first_signal(tmp_path):
    import subprocess
    import sys
    import time

    from evalpipe.cli.dev import commands, stop

    cmds = commands("127.0.0.1", 3999, "workspace.yaml")
    assert cmds[0][0].endswith("dagster-webserver") and cmds[1][0].endswith("dagster-daemon") and cmds[1][1] == "run"
    # a service that ignores SIGTERM is killed after the grace period; one that obeys stops at once
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); time.sleep(60)"], start_new_session=True)
    polite = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    time.sleep(0.5)
    t = time.monotonic()
    stop([stubborn, polite], grace_s=1.0)
    assert stubborn.poll() is not None and polite.poll() is not None and time.monotonic() - t < 10


def test_samples_accounted_is_a_blocking_gate(home, write_config, monkeypatch):
    """A partition whose metrics don't account for every sample fails the blocking check: Dagster stops what is
    downstream in that run, and `evalpipe run` exits 3 naming the check (not 1, as for a crash)."""
    from click.testing import CliRunner

    from eval_assets.checks import METRICS_CHECK_SPECS
    from evalpipe.metrics import register_metric
    from evalpipe.metrics.base import Metric
    from evalpipe.core.types import Score

    assert METRICS_CHECK_SPECS["samples_accounted"].blocking
    assert not METRICS_CHECK_SPECS["judge_parse_failures"].blocking

    class Bogus(Metric):
        name = "bogus_status"

        def score(self, item):
            return Score(value=None, status="lost")  # not scored, unscored or an error: unaccounted

    register_metric("bogus_status", Bogus, replace=True)
    for var in ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL"):
        monkeypatch.setenv(var, "")
    write_config("""
benchmarks:
  smoke:
    adapter: file
    splits: {extra: {path: {repo}/data/smoke/test.jsonl, limit: 2}}
    options: {columns: {prompt: question, target: answer, id: id}}
    metrics: [bogus_status]
models:
  good: {runner: echo}
""")
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--model", "good", "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "check samples_accounted on metrics [smoke/extra|good]: FAILED" in r.output
    assert "gate failed" in r.output
