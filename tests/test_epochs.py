"""Epochs and sample selection (issue 23): `--epochs N` evaluates each sample N times (each epoch its own prompt row
`<id>#epoch<e>` and rollout fingerprint), scores are reduced per sample (mean, median, max, at_least_<k>,
pass_at_<k>, as Inspect AI) before aggregation, so n and the interval are over samples; `--sample-id` is a try
under `<model>@ids-<h>` that never touches the full partition."""
import json

import pandas as pd
import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

MODELS = """models:
  perfect: {runner: echo, reply: target}
  parrot: {runner: echo}
default_models: [perfect]
"""
CONFIG = smoke_benchmark() + MODELS


def _judgements(scores: dict[str, list]) -> pd.DataFrame:
    from evalpipe.core.run_marks import epoch_id

    rows = [{"sample_id": epoch_id(sid, e), "metric": "exact_match", "score": v,
             "status": "error" if v is None else "scored", "target": "x", "slices": None, "details": None}
            for sid, values in scores.items() for e, v in enumerate(values, 1)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("reducer, value", [("mean", 0.5), ("median", 0.5), ("max", 1.0), ("at_least_2", 0.5),
                                            ("at_least_3", 0.0), ("pass_at_1", 0.5)])
def test_reducers_score_each_sample_then_aggregate_over_samples(reducer, value):
    from evalpipe.metrics.aggregate import aggregate

    # a: 2 of 3 epochs right, b: 1 of 3 (its error counts as wrong)
    j = _judgements({"a": [1.0, 0.0, 1.0], "b": [0.0, None, 1.0]})
    row = aggregate(j, reducer=reducer, epochs=3).iloc[0]
    assert (row["metric"], row["n"]) == ("exact_match", 2)  # n counts samples, not the 6 epochs
    assert row["value"] == pytest.approx({"mean": 0.5, "median": 0.5, "pass_at_1": 0.5}.get(reducer, value))
    if reducer in ("max", "at_least_3"):  # right/wrong per sample: Wilson over the 2 samples
        from evalpipe.metrics.aggregate import wilson_ci

        assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_ci(int(value * 2), 2))


def test_interval_is_over_samples_not_epochs():
    from evalpipe.metrics.aggregate import aggregate, wilson_ci

    # 4 samples, each right in every one of 5 epochs or in none: the interval is that of 2/4, not 10/20
    j = _judgements({"a": [1.0] * 5, "b": [1.0] * 5, "c": [0.0] * 5, "d": [0.0] * 5})
    row = aggregate(j, reducer="mean", epochs=5).iloc[0]
    assert (row["value"], row["n"]) == (0.5, 4)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_ci(2, 4))
    assert row["ci_high"] - row["ci_low"] > wilson_ci(10, 20)[1] - wilson_ci(10, 20)[0]


def test_reducer_errors_are_one_line_and_say_how_to_fix():
    from evalpipe.metrics.aggregate import epoch_reducer

    with pytest.raises(ValueError, match="needs at least 4 epochs, got epochs=3"):
        epoch_reducer("at_least_4", 3)
    with pytest.raises(ValueError, match="unknown epochs_reducer 'best'.*at_least_<k>"):
        epoch_reducer("best", 3)


def test_pass_at_k_counts_each_epoch_as_a_completion():
    from evalpipe.metrics.aggregate import aggregate

    j = _judgements({"t1": [1.0, 0.0, 0.0, 0.0], "t2": [0.0, 0.0, 0.0, 0.0]})
    j["details"] = json.dumps({"pass_at_k": [1, 2]})
    rows = aggregate(j, reducer="mean", epochs=4).set_index("metric")
    # pass@1 = 1/4 for t1, 0 for t2; pass@2 = 1 - C(3,2)/C(4,2) = 1/2 for t1
    assert rows.loc["exact_match_pass@1", "value"] == pytest.approx(0.125)
    assert rows.loc["exact_match_pass@2", "value"] == pytest.approx(0.25)
    assert rows.loc["exact_match_pass@2", "n"] == 2


def test_each_epoch_has_its_own_rollout_fingerprint_and_epoch_one_keeps_the_old_one(home, write_config):
    write_config(CONFIG)
    import dataclasses

    from evalpipe.pipeline.stages import build_dataset, build_prompts, rollout_requests
    from evalpipe.project import Project
    from evalpipe.runners import build_runner

    cfg = Project.from_file().config
    split = cfg.split("smoke/extra")
    ds = build_dataset(split)
    one = build_prompts(split, "perfect", ds)
    three = build_prompts(dataclasses.replace(split, options={**split.options, "epochs": 3}), "perfect", ds)
    assert len(three) == 3 * len(one) == 24
    assert three["sample_id"].tolist()[:3] == ["s1", "s1#epoch2", "s1#epoch3"]
    runner = build_runner(cfg.model("perfect"))
    fp1 = {r.sample_id: r.fingerprint for r in rollout_requests(runner, one)}
    fp3 = {r.sample_id: r.fingerprint for r in rollout_requests(runner, three)}
    assert len(set(fp3.values())) == 24
    assert fp3["s1"] == fp1["s1"]  # epoch 1 is the run without epochs: its journal entry is reused


@pytest.fixture
def cli(home, write_config, monkeypatch):
    write_config(CONFIG)
    return cli_in_process(monkeypatch)


def _metric(wh, model: str) -> tuple[float, int]:
    m = wh.query("SELECT value, n FROM metrics WHERE slice = 'all' AND metric = 'exact_match' AND model = ?", [model])
    assert len(m) == 1, m
    return float(m["value"].iloc[0]), int(m["n"].iloc[0])


def test_cli_epochs_and_sample_id_try_leaves_full_results_unchanged(cli):
    from evalpipe.cli.main import _warehouse

    full = cli("run", "--model", "perfect", "--epochs", "2", "--no-progress")
    assert full.exit_code == 0, full.output
    wh = _warehouse()
    assert _metric(wh, "perfect") == (1.0, 8)  # 8 samples, not 16 epochs
    rows = wh.query("SELECT count(*) AS n FROM rollouts WHERE model = 'perfect'")["n"].iloc[0]
    assert rows == 16
    before = wh.query("SELECT * FROM judgements WHERE model = 'perfect' ORDER BY sample_id")

    tried = cli("run", "--model", "perfect", "--sample-id", "s2", "--sample-id", "s5", "--no-progress")
    assert tried.exit_code == 0, tried.output
    from evalpipe.core.run_marks import selected_key

    key = selected_key("perfect", ["s5", "s2"])
    assert key.startswith("perfect@ids-") and key in tried.output
    assert _metric(wh, key) == (1.0, 2)
    assert sorted(wh.query("SELECT sample_id FROM prompts WHERE model = ?", [key])["sample_id"]) == ["s2", "s5"]
    assert _metric(wh, "perfect") == (1.0, 8)  # the full partition untouched
    pd.testing.assert_frame_equal(before, wh.query("SELECT * FROM judgements WHERE model = 'perfect' ORDER BY sample_id"))
    assert key not in set(wh.query("SELECT DISTINCT model FROM leaderboard")["model"])  # a try is never ranked

    bad = cli("run", "--model", "perfect", "--sample-id", "nope", "--no-progress", catch_exceptions=True)
    assert bad.exit_code != 0 and "'nope': no such sample in smoke/extra" in bad.output
    both = cli("run", "--model", "perfect", "--sample-id", "s1", "--limit", "2", catch_exceptions=True)
    assert both.exit_code == 2 and "--limit and --sample-id" in both.output
    red = cli("run", "--model", "perfect", "--epochs", "2", "--epochs-reducer", "at_least_3", catch_exceptions=True)
    assert red.exit_code == 2 and "needs at least 3 epochs" in red.output


def test_api_epochs_reducers_on_a_function_and_sample_ids(home):
    import evalpipe

    calls: dict[str, int] = {}

    def first_try_only(prompt: str) -> str:  # right on its first call per question, wrong afterwards
        calls[prompt] = calls.get(prompt, 0) + 1
        return prompt.split()[-1] if calls[prompt] == 1 else "no"

    data = [{"id": f"q{i}", "prompt": f"say w{i}", "target": f"w{i}"} for i in range(4)]
    r = evalpipe.evaluate(first_try_only, data, ["exact_match"], epochs=3, epochs_reducer="max")
    assert r.success, r.errors
    row = r.metrics[(r.metrics["metric"] == "exact_match") & (r.metrics["slice"] == "all")].iloc[0]
    assert (row["value"], row["n"]) == (1.0, 4)
    assert sum(calls.values()) == 12 and len(r.samples) == 12

    calls.clear()
    mean = evalpipe.evaluate(first_try_only, data, ["exact_match"], epochs=3, model_name="again")
    assert mean.score("exact_match") == pytest.approx(1 / 3)

    tried = evalpipe.evaluate(first_try_only, data, ["exact_match"], sample_ids=["q1"], model_name="again")
    assert tried.partitions[0][1].startswith("again@ids-") and len(tried.samples) == 1
    assert mean.result.warehouse.query("SELECT n FROM metrics WHERE model = 'again' AND metric = 'exact_match' "
                                       "AND slice = 'all'")["n"].tolist() == [4]


def test_api_configured_sample_ids(home, write_config):
    write_config(CONFIG)
    import evalpipe

    res = evalpipe.evaluate(benchmarks=["smoke"], models=["parrot"], sample_ids=["s3"], epochs=2)
    assert res.success, [p.error for p in res.partitions]
    assert res.partitions[0].model.startswith("parrot@ids-")
    assert res.metric("smoke/extra", "parrot", "exact_match") == 0.0  # read under the try's key
    n = res.metrics[(res.metrics["metric"] == "exact_match") & (res.metrics["slice"] == "all")]["n"].tolist()
    assert n == [1]


def test_config_sample_ids_define_the_split_and_epochs_is_a_config_option(home, write_config):
    write_config(smoke_benchmark(options="sample_ids: [s4, s1]\nepochs: 2") + MODELS)
    from evalpipe.core.errors import ConfigError
    from evalpipe.pipeline.stages import build_dataset, build_prompts
    from evalpipe.project import Project

    split = Project.from_file().config.split("smoke/extra")
    ds = build_dataset(split)
    assert ds["sample_id"].tolist() == ["s1", "s4"]
    assert build_prompts(split, "perfect", ds)["sample_id"].tolist() == ["s1", "s1#epoch2", "s4", "s4#epoch2"]
    import dataclasses

    with pytest.raises(ConfigError, match="sample_ids names 1 id.*'s9'"):
        build_dataset(dataclasses.replace(split, options={**split.options, "sample_ids": ["s1", "s9"]}))
