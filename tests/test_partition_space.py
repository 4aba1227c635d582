"""A benchmark's `models:`: the models meant to run it. A run that names no model evaluates only those pairs, and
the leaderboard says where the intended pairs stand (docs/operations.md "The partition space")."""
import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import SMOKE_COLUMNS, SMOKE_JSONL

CONFIG = f"""benchmarks:
  alpha:
    adapter: file
    splits: {{extra: {{path: "{SMOKE_JSONL}", limit: 2}}}}
    options: {{columns: {SMOKE_COLUMNS}}}
    metrics: [exact_match]
    models: [perfect]
  beta:
    adapter: file
    splits: {{extra: {{path: "{SMOKE_JSONL}", limit: 2}}}}
    options: {{columns: {SMOKE_COLUMNS}}}
    metrics: [exact_match]
models:
  perfect: {{runner: echo, reply: target}}
  parrot: {{runner: echo}}
default_models: [parrot, perfect]
"""


def _pairs(home):
    from evalpipe.store.warehouse import Warehouse

    m = Warehouse(home / "warehouse.duckdb").read_table("metrics")
    return sorted(set(zip(m["benchmark_split"], m["model"])))


@pytest.mark.slow
def test_a_run_without_models_evaluates_only_the_intended_pairs(home, write_config, monkeypatch, instance):
    from dagster import AssetKey

    write_config(CONFIG)
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "alpha/extra" in r.output and r.output.count("alpha/extra") == 1  # perfect only
    assert r.output.count("beta/extra") == 2  # the default models
    r = cli("run", "--no-progress")
    assert r.exit_code == 0, r.output
    assert _pairs(home) == [("alpha/extra", "perfect"), ("beta/extra", "parrot"), ("beta/extra", "perfect")]
    meta = instance.get_latest_materialization_event(AssetKey("leaderboard")).asset_materialization.metadata
    assert meta["intended_pairs"].value == "3 of 3 ranked, 0 held by a gate, 0 not evaluated yet"

    # a model named on the command line runs wherever it is asked, intended or not
    r = cli("run", "--benchmark", "alpha", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    assert ("alpha/extra", "parrot") in _pairs(home)


@pytest.mark.slow
def test_the_leaderboard_counts_intended_pairs_not_yet_evaluated(home, write_config, monkeypatch, instance):
    from dagster import AssetKey

    write_config(CONFIG)
    r = cli_in_process(monkeypatch)("run", "--benchmark", "beta", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    meta = instance.get_latest_materialization_event(AssetKey("leaderboard")).asset_materialization.metadata
    assert meta["intended_pairs"].value == "1 of 3 ranked, 0 held by a gate, 2 not evaluated yet"
    assert "alpha/extra x perfect" in meta["intended_pairs_missing"].value
    assert "beta/extra x perfect" in meta["intended_pairs_missing"].value


@pytest.mark.slow
def test_the_api_without_models_runs_the_intended_pairs(home, write_config):
    import evalpipe

    write_config(CONFIG)
    result = evalpipe.evaluate(benchmarks=["alpha", "beta"])
    assert sorted((p.benchmark_split, p.model) for p in result.partitions) == [
        ("alpha/extra", "perfect"), ("beta/extra", "parrot"), ("beta/extra", "perfect")]


def test_an_unknown_model_under_a_benchmark_is_refused_at_load(tmp_path):
    from evalpipe.core.errors import ConfigError
    from evalpipe.project import Project

    p = tmp_path / "evals.yaml"
    p.write_text(CONFIG.replace("models: [perfect]", "models: [perfekt]"))
    with pytest.raises(ConfigError, match=r"benchmark 'alpha' lists model 'perfekt' under its 'models:'"):
        Project.from_file(p, home=tmp_path / "home")


def test_intended_pairs_follow_models_then_default_models(tmp_path):
    from evalpipe.project import Project

    p = tmp_path / "evals.yaml"
    p.write_text(CONFIG)
    cfg = Project.from_file(p, home=tmp_path / "home").config
    assert cfg.models_for("alpha/extra") == ["perfect"]
    assert cfg.models_for("beta/extra") == ["parrot", "perfect"]
    assert cfg.intended_pairs() == [("alpha/extra", "perfect"), ("beta/extra", "parrot"), ("beta/extra", "perfect")]
