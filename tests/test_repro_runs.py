"""Experiments (`<model>@<experiment>` partitions side by side) and run history (a folder per run, `latest`)."""
import json

import pytest

from evalpipe.project import load_config
from tests.helpers.cli import invoke
from tests.helpers.configs import smoke_benchmark

CONFIG = smoke_benchmark(limit=4) + """models:
  parrot: {runner: echo}
  parrot-fixed: {runner: echo, experiment: fixed-paris, reply: fixed, text: Paris}
default_models: [parrot]
"""


@pytest.fixture
def cli(home, write_config):
    write_config(CONFIG)
    return invoke


def test_two_experiments_side_by_side_and_both_runs_kept(cli, home):
    cfg_keys = sorted(load_config().models)
    assert cfg_keys == ["parrot", "parrot-fixed@fixed-paris"]  # `experiment:` makes the partition key
    r1 = cli("run", "--split", "extra", "--model", "parrot", "--no-progress", "--run-id", "baseline-run")
    assert r1.exit_code == 0, r1.output
    r2 = cli("run", "--split", "extra", "--model", "parrot", "--experiment", "fixed", "--runner-option", "reply=fixed",
             "--runner-option", "text=Paris", "--no-progress", "--run-id", "fixed-run")
    assert r2.exit_code == 0, r2.output
    r3 = cli("run", "--split", "extra", "--model", "parrot-fixed", "--no-progress")  # its name without the suffix
    assert r3.exit_code == 0, r3.output
    from evalpipe.cli.main import _warehouse

    board = _warehouse().query("select model, value, rank from leaderboard order by rank, model").to_dict("records")
    assert board == [{"model": "parrot-fixed@fixed-paris", "value": 0.25, "rank": 1},
                     {"model": "parrot@fixed", "value": 0.25, "rank": 1},
                     {"model": "parrot", "value": 0.0, "rank": 3}]
    assert "parrot@fixed" in r3.output  # the leaderboard printed by the CLI shows the experiment keys

    # a second run of the same partition keeps the first run's folder; `latest` points at the newest
    r4 = cli("run", "--split", "extra", "--model", "parrot", "--no-progress", "--run-id", "second-run")
    assert r4.exit_code == 0
    part = home / "artifacts" / "smoke" / "extra" / "parrot"
    assert {p.name for p in part.iterdir()} == {"baseline-run", "second-run", "latest"}
    assert (part / "latest").resolve() == part / "second-run"
    assert json.loads((part / "baseline-run" / "manifest.json").read_text())["run_id"] == "baseline-run"
    runs = cli("runs", "--split", "smoke/extra", "--model", "parrot")
    assert runs.exit_code == 0 and "baseline-run" in runs.output and "second-run" in runs.output

    s = cli("summarize", "--run-dir", str(part / "baseline-run"), "--json")
    assert s.exit_code == 0, s.output
    assert json.loads(s.output)[0]["metric"] == "exact_match"
    s = cli("summarize", "--run-dir", str(home / "artifacts" / "smoke" / "extra" / "parrot@fixed"))
    assert s.exit_code == 0 and "run fixed-run" in s.output and "0.2500" in s.output
    bad = cli("summarize", "--run-dir", str(home))
    assert bad.exit_code == 2 and "no summary.json" in bad.output
    bad = cli("run", "--split", "extra", "--run-id", "latest", "--no-progress")
    assert bad.exit_code == 2
