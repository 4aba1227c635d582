"""Issue 14 in the Dagster UI: the leaderboard follows `metrics` by declarative automation (no hourly
schedule), each metrics materialization carries a chart and a viewer link, and `make dev`'s launcher."""
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import restore_cli_env
from tests.helpers.configs import smoke_benchmark

REPO = Path(__file__).parents[1]


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

    write_config(smoke_benchmark(limit=2) + """models:
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
    assert "| exact_match ↑ | all | 0.000 (" in mat.metadata["chart"].value
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
    assert "| gaia ↑ | all | 0.500 (0.30-0.70) | `" + "█" * 4 + "░" * 4 + "` |" in md
    assert "| gaia ↑ | level=1 | - | |" in md and "latency" not in md
    # four columns and an 8-cell bar: the table fits the Dagster UI's metadata panel (a 20-cell bar in six
    # columns, ~72 characters a row, was cut at a 1280 px window)
    assert md.splitlines()[0].count("|") == 5 and max(len(line) for line in md.splitlines()) <= 50
    monkeypatch.setenv("EVALS_VIEWER_URL", "http://viewer.internal:9000/")
    assert viewer_url("gaia/validation", "m@x") == \
        "http://viewer.internal:9000/samples?split=gaia%2Fvalidation&model=m%40x"


def test_dev_daemon_shortens_the_backfill_loop(monkeypatch):
    """`make dev`'s daemon is `dagster-daemon` with the backfill daemon's fixed 30 s loop shortened: the constant
    Dagster reads at each loop is set before the daemon's CLI starts."""
    import dagster._daemon.cli as daemon_cli
    import dagster._daemon.controller as controller

    from evalpipe.cli import dev

    seen = {}
    monkeypatch.setattr(controller, "DEFAULT_DAEMON_INTERVAL_SECONDS", 30)
    monkeypatch.setattr(daemon_cli, "main", lambda: seen.update(argv=list(sys.argv),
                                                               interval=controller.DEFAULT_DAEMON_INTERVAL_SECONDS))
    monkeypatch.setattr(sys, "argv", ["x"])
    dev.main(["daemon", "run", "-w", "workspace.yaml"])
    assert seen == {"argv": ["dagster-daemon", "run", "-w", "workspace.yaml"], "interval": dev.DAEMON_INTERVAL_S}
    monkeypatch.setenv("EVALS_DEV_DAEMON_INTERVAL_S", "3")
    dev.main(["daemon", "run"])
    assert seen["interval"] == 3


def test_dev_instance_polls_for_interactive_use():
    """The dagster.yaml `make dev` uses dequeues runs every second, in threads, and submits backfill runs in
    threads; the run limits stay."""
    import yaml

    cfg = yaml.safe_load((REPO / "dagster_home" / "dagster.yaml").read_text())
    assert cfg["run_queue"] == {"dequeue_interval_seconds": 1, "dequeue_use_threads": True}
    assert cfg["backfills"]["use_threads"] is True
    assert cfg["concurrency"]["runs"]["max_concurrent_runs"] == 4


def test_ui_runs_execute_in_process():
    """Selections made in the UI run in the implicit asset job: in-process (no Python start and import per step),
    like the `evaluate` job."""
    from dagster import in_process_executor

    from eval_assets.factory import build_definitions
    from evalpipe.project import Project

    defs = build_definitions(Project.from_dict({"benchmarks": {}, "models": {}}))
    assert defs.resolve_implicit_global_asset_job_def().executor_def is in_process_executor


def test_dev_launcher_stops_every_service_on_the_first_signal(tmp_path):
    import subprocess
    import sys
    import time

    from evalpipe.cli.dev import commands, stop

    cmds = commands("127.0.0.1", 3999, "workspace.yaml")
    assert cmds[0][0].endswith("dagster-webserver")
    assert cmds[1][1:5] == ["-m", "evalpipe.cli.dev", "daemon", "run"]  # dagster-daemon run, with a short backfill loop
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
    restore_cli_env(monkeypatch)
    write_config(smoke_benchmark(limit=2, metrics="[bogus_status]") + """models:
  good: {runner: echo}
""")
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--model", "good", "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 3, r.output
    assert "check samples_accounted on metrics [smoke/extra|good]: FAILED" in r.output
    assert "gate failed" in r.output


def test_try_keys_are_classified():
    from partitions import try_kind

    assert [try_kind(k) for k in ("echo", "adhoc:openai/gpt-4o", "echo@limit5", "echo@exp-limit5",
                                  "echo@ids-0123456789ab", "echo@exp-ids-0123456789ab", "echo@exp")] == \
        [None, "adhoc", "limit", "limit", "ids", "ids", "experiment"]


@pytest.mark.slow
def test_a_try_partition_s_run_is_tagged(instance, home, write_config, monkeypatch):
    """A throw-away key's run carries evals/try=<kind> (the Runs page filters on it), whichever way it is launched;
    a configured model's run carries none."""
    from partitions import TRY_TAG
    from tests.helpers.cli import invoke

    restore_cli_env(monkeypatch)
    write_config(smoke_benchmark(limit=2) + "models:\n  good: {runner: echo}\n")
    assert invoke("run", "--model", "good", "--no-progress").exit_code == 0
    assert invoke("run", "--model", "good", "--limit", "1", "--no-progress").exit_code == 0
    tagged = {r.tags.get("dagster/partition/model", r.tags.get("dagster/partition")): r.tags.get(TRY_TAG)
              for r in instance.get_runs() if "dagster/partition" in r.tags and "|" in r.tags["dagster/partition"]}
    by_model = {k.split("|")[-1] if "|" in k else k: v for k, v in tagged.items()}
    assert by_model == {"good": None, "good@limit1": "limit"}
