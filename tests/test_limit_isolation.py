"""`--limit` is a try that changes nothing else (issue 20 item 3): the shared `dataset` partition always holds the
whole split; the limit lives in the model key `<model>@limit<N>`, so any materialization of a key (CLI,
`evaluate()`, the Dagster UI or a backfill) evaluates the same samples, and a real key never gets a limit."""
import json

import pytest
from click.testing import CliRunner

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {path: {repo}/data/smoke/test.jsonl}
    options:
      columns: {prompt: question, target: answer, id: id}
    metrics: [exact_match]
models:
  perfect: {runner: echo, reply: target}
  parrot: {runner: echo}
default_models: [perfect]
default_benchmarks: [smoke]
"""
CHAIN = ["prompts", "rollouts", "judgements", "metrics"]


@pytest.fixture
def cli(home, write_config, monkeypatch):
    for var in ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL"):
        monkeypatch.setenv(var, "")
    write_config(CONFIG)
    from evalpipe.cli.main import main

    def invoke(*args: str):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke


def _n(model: str, split: str = "smoke/extra") -> int | None:
    from evalpipe.cli.main import _warehouse

    m = _warehouse().query("SELECT n FROM metrics WHERE slice = 'all' AND metric = 'exact_match' "
                           "AND benchmark_split = ? AND model = ?", [split, model])
    return int(m["n"].iloc[0]) if len(m) else None


def _dataset_rows(split: str = "smoke/extra") -> int:
    from evalpipe.cli.main import _warehouse

    return int(_warehouse().query("SELECT count(*) AS n FROM datasets WHERE benchmark_split = ?", [split])["n"][0])


def _materialize(model: str, split: str = "smoke/extra"):
    """What the Dagster UI (or a backfill, or the checkpoint sensor's `evaluate` job) does for one partition: the
    chain below `dataset`, reading the dataset partition on record, with the default resources."""
    from dagster import DagsterInstance, materialize

    from eval_assets.assets import eval_assets

    from evalpipe.project import Project
    from partitions import eval_key
    from resources import project_resources

    with DagsterInstance.get() as instance:
        return materialize(eval_assets(Project.from_file()), selection=CHAIN, partition_key=eval_key(split, model), instance=instance,
                           resources=project_resources(Project.from_file()), raise_on_error=False)


def test_limit_run_keeps_the_dataset_whole_for_every_later_materialization(cli):
    full = cli("run", "--model", "perfect", "--split", "extra", "--no-progress")
    assert full.exit_code == 0, full.output
    lim = cli("run", "--model", "perfect", "--split", "extra", "--limit", "3", "--no-progress")
    assert lim.exit_code == 0, lim.output
    assert (_n("perfect"), _n("perfect@limit3")) == (8, 3)
    assert _dataset_rows() == 8  # the shared partition still holds the whole split
    listed = json.loads(cli("list", "benchmarks", "--format", "json").output)["benchmarks"]
    assert {b["benchmark_split"]: b["samples"] for b in listed}["smoke/extra"] == 8

    # the real key materialized from Dagster (UI, backfill, sensor): the whole split, not the try's 3 samples
    assert _materialize("perfect").success
    assert _n("perfect") == 8
    # the try's key materialized from Dagster: its own N, from the key itself
    assert _materialize("perfect@limit3").success
    assert _n("perfect@limit3") == 3
    from evalpipe.cli.main import _warehouse

    wh = _warehouse()
    ids = wh.query("SELECT sample_id FROM rollouts WHERE model = 'perfect@limit3' ORDER BY sample_id")["sample_id"]
    assert list(ids) == ["s1", "s2", "s3"]  # the first N of the split, as the adapter loads it
    board = wh.query("SELECT model, n FROM leaderboard")
    assert list(board["model"]) == ["perfect"] and list(board["n"]) == [8]  # a try is never ranked
    # the fingerprints of both keys name the same (whole) split
    fp = wh.query("SELECT model, dataset_sha256 FROM fingerprints WHERE benchmark_split = 'smoke/extra'")
    shas = dict(zip(fp["model"], fp["dataset_sha256"]))
    assert shas["perfect"] == shas["perfect@limit3"] and shas["perfect"]


def test_a_limit_after_a_config_limit_takes_the_first_n_of_the_configured_split(cli, write_config):
    """A `limit:` in the config file defines the split (every key sees it); --limit tries the first N of that.
    (Every test file's config has `smoke/extra`: Dagster reads the split keys once per process.)"""
    write_config(CONFIG.replace("extra: {path: {repo}/data/smoke/test.jsonl}",
                                "extra: {path: {repo}/data/smoke/test.jsonl, limit: 4}"))
    r = cli("run", "--model", "perfect", "--split", "extra", "--no-progress")
    assert r.exit_code == 0, r.output
    r = cli("run", "--model", "perfect", "--split", "extra", "--limit", "2", "--no-progress")
    assert r.exit_code == 0, r.output
    assert (_n("perfect"), _n("perfect@limit2"), _dataset_rows()) == (4, 2, 4)


def test_benchmark_option_limit_is_the_same_try_and_a_conflict_is_refused(cli):
    r = cli("run", "--model", "parrot", "--split", "extra", "--benchmark-option", "limit=2", "--no-progress")
    assert r.exit_code == 0, r.output
    assert (_n("parrot"), _n("parrot@limit2"), _dataset_rows()) == (None, 2, 8)
    for args, text in [(["--limit", "3", "--benchmark-option", "limit=2"], "--limit 3 and --benchmark-option limit=2"),
                       (["--benchmark-option", "limit=0"], "limit must be a whole number >= 1"),
                       (["--benchmark-option", "limit=x"], "limit must be a whole number >= 1")]:
        bad = cli("run", "--model", "parrot", *args, "--no-progress")
        assert bad.exit_code == 2 and text in bad.output, (args, bad.output)


def test_evaluate_with_a_limit_leaves_the_real_key_untouched_and_unranked(home, write_config):
    import evalpipe

    write_config(CONFIG)
    full = evalpipe.evaluate(benchmarks=["smoke/extra"], models=["perfect"])
    assert full.success and _n("perfect") == 8
    res = evalpipe.evaluate(benchmarks=["smoke/extra"], models=["perfect"], limit=2)
    assert res.success and [p.model for p in res.partitions] == ["perfect@limit2"]
    assert (_n("perfect"), _n("perfect@limit2"), _dataset_rows()) == (8, 2, 8)
    assert list(res.leaderboard["model"]) == ["perfect"] and list(res.leaderboard["n"]) == [8]
    # the result reads the try under the name it was asked for, and says which key it is
    assert res.metric("smoke/extra", "perfect", "exact_match") == 1.0
    assert len(res.samples("smoke/extra", "perfect")) == 2
    opt = evalpipe.evaluate(benchmarks=["smoke/extra"], models=["parrot"], benchmark_options={"limit": 3})
    assert [p.model for p in opt.partitions] == ["parrot@limit3"] and _n("parrot") is None
    with pytest.raises(evalpipe.ConfigError, match="limit=2 and benchmark_options"):
        evalpipe.evaluate(benchmarks=["smoke/extra"], models=["parrot"], limit=2, benchmark_options={"limit": 3})


def test_a_run_time_limit_on_the_dataset_asset_is_refused(home, write_config):
    """The Dagster launchpad's `eval_config.split_options` can't shrink the shared dataset partition either."""
    write_config(CONFIG)
    from dagster import DagsterInstance

    from eval_assets.launch import _first_error, run_assets
    from resources import EvalConfigResource

    with DagsterInstance.get() as instance:
        r = run_assets(["dataset"], "smoke/extra", instance,
                       {"eval_config": EvalConfigResource(split_options={"limit": 2})})
        assert not r.success
        assert "<model>@limit<N>" in _first_error(r)


def test_dry_run_of_a_try_counts_its_n_samples(cli):
    r = cli("run", "--model", "perfect", "--split", "extra", "--limit", "3", "--dry-run")
    assert r.exit_code == 0, r.output
    row = [ln for ln in r.output.splitlines() if "perfect@limit3" in ln]
    assert row and [c.strip() for c in row[0].split("|")][3] == "3", r.output
