"""Statuses that say what happened (issue 20 item 8): a partition whose samples all failed is a failed partition
(no score of 0, no leaderboard row, exit 1 with the first sample's error); `--api-base` on a configured model is
refused before any model call; an ad-hoc model that produced nothing leaves no partition and no registry entry.
Against the loopback mock server (benchmarks/mock_server.py): no network."""
import json

import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

QUESTIONS = [json.loads(line)["question"] for line in open(__import__("pathlib").Path(__file__).parents[1]
                                                            / "data/smoke/test.jsonl")]
MODELS = """models:
  perfect: {{runner: echo, reply: target}}
  served: {{runner: litellm, model: openai/served-model, api_base: "{url}"}}
default_models: [perfect]
checks: {{severity: warn}}
"""
NOT_FOUND = (404, {"Content-Type": "application/json"},
             json.dumps({"error": {"message": "The model `served-model` does not exist", "type": "invalid_request_error",
                                   "code": "model_not_found"}}))


@pytest.fixture
def mock():
    with serve_in_thread(MockLLM()) as (m, url):
        yield m, url


@pytest.fixture
def cli(home, write_config, monkeypatch, mock):
    monkeypatch.setenv("MOCK_KEY", "not-a-real-key")
    write_config(smoke_benchmark(limit=3) + MODELS.format(url=mock[1]))
    return cli_in_process(monkeypatch)


def _fail_every_question(m: MockLLM, times: int = 1) -> None:
    for q in QUESTIONS:
        m.script[q] = [NOT_FOUND] * times


def _metrics_models() -> set[str]:
    from evalpipe.cli.main import _warehouse

    try:
        return set(_warehouse().query("SELECT DISTINCT model FROM metrics")["model"])
    except Exception:
        return set()


def test_a_partition_whose_samples_all_failed_reads_failed_and_exits_1_with_the_root_cause(cli, mock):
    m, _ = mock
    _fail_every_question(m)
    r = cli("run", "--model", "perfect", "--model", "served", "--runner-option", "max_retries=0", "--no-progress")
    assert r.exit_code == 1, r.output  # (a warn-only error-rate check: the failure itself must fail the run)
    assert m.requests == 3
    row = [ln for ln in r.output.splitlines() if "| served" in ln]
    assert row and "FAILED" in row[0] and "| ok " not in row[0] and "0.0000" not in row[0]
    cause = [ln for ln in r.output.splitlines() if ln.strip().startswith("smoke/extra x served:")]
    assert cause and "every one of the 3 sample(s) failed" in cause[0] and "does not exist" in cause[0], r.output
    assert _metrics_models() == {"perfect"}  # no score of 0 for a model that was never measured
    from evalpipe.cli.main import _warehouse

    assert set(_warehouse().query("SELECT model FROM leaderboard")["model"]) == {"perfect"}
    # fixed (the server answers again): the same partition evaluates, from scratch (errors are never journaled)
    ok = cli("run", "--model", "served", "--runner-option", "max_retries=0", "--no-progress")
    assert ok.exit_code == 0, ok.output
    assert "served" in _metrics_models() and m.requests == 6


def test_a_partly_failed_partition_is_still_scored(cli, mock):
    m, _ = mock
    m.script[QUESTIONS[0]] = [NOT_FOUND]
    r = cli("run", "--model", "served", "--runner-option", "max_retries=0", "--no-progress")
    assert r.exit_code == 0, r.output  # the failures count as wrong; the error-rate check reports them
    from evalpipe.cli.main import _warehouse

    n = _warehouse().query("SELECT n, n_errors FROM metrics WHERE model = 'served' AND slice = 'all'")
    assert (int(n["n"][0]), int(n["n_errors"][0])) == (3, 1)


def test_api_base_with_a_configured_model_is_refused_before_any_call(cli, mock, home):
    m, url = mock
    for args in (["--model", "served", "--api-base", url], ["--api-base", url],  # named, or the default model
                 ["--model", "served", "--model", "openai/other", "--api-base", url],
                 ["--model", "perfect", "--api-key-env", "MOCK_KEY"]):
        r = cli("run", *args, "--no-progress")
        assert r.exit_code == 2, (args, r.output)
        assert "only apply to an ad-hoc --model" in r.output and "is configured" in r.output
        assert len(r.output.strip().splitlines()) == 1
    assert m.requests == 0
    assert not (home / "models").exists() or not list((home / "models").glob("*.json"))  # nothing registered


def test_an_adhoc_model_that_produced_nothing_is_not_kept(cli, mock, home):
    from dagster import DagsterInstance

    m, url = mock
    good = cli("run", "--model", "openai/good", "--api-base", url, "--api-key-env", "MOCK_KEY",
               "--runner-option", "max_retries=0", "--no-progress")
    assert good.exit_code == 0, good.output
    _fail_every_question(m)
    bad = cli("run", "--model", "openai/missing", "--api-base", url, "--api-key-env", "MOCK_KEY",
              "--runner-option", "max_retries=0", "--no-progress")
    assert bad.exit_code == 1 and "does not exist" in bad.output, bad.output
    _fail_every_question(m)
    again = cli("run", "--model", "openai/good", "--api-base", url, "--api-key-env", "MOCK_KEY", "--limit", "2",
                "--runner-option", "max_retries=0", "--no-progress")
    assert again.exit_code == 1, again.output
    with DagsterInstance.get() as instance:
        parts = set(instance.get_dynamic_partitions("model"))
    # the failed ad-hoc model and the failed try are gone; the model with results stays, with its registry entry
    assert "adhoc:openai/missing" not in parts and "adhoc:openai/good@limit2" not in parts
    assert "adhoc:openai/good" in parts
    assert sorted(p.name for p in (home / "models").glob("*.json")) == ["adhoc:openai__good.json"]
    assert _metrics_models() == {"adhoc:openai/good"}


def test_the_retry_schedule_skips_a_model_that_was_forgotten(cli, mock, home):
    """The nightly retry of failed partitions would ask Dagster for a partition key it no longer has."""
    from dagster import DagsterInstance

    from eval_assets.schedules import failed_partitions

    m, url = mock
    _fail_every_question(m)
    bad = cli("run", "--model", "openai/missing", "--api-base", url, "--runner-option", "max_retries=0",
              "--no-progress")
    assert bad.exit_code == 1, bad.output
    with DagsterInstance.get() as instance:
        assert "adhoc:openai/missing" not in instance.get_dynamic_partitions("model")
        assert failed_partitions(instance) == []


def _register_erroring_metric():
    from evalpipe.metrics.base import Metric, register_metric
    from evalpipe.core.types import Score

    class AlwaysErrors(Metric):
        """A judge that never answers: every verdict is an error (not the model's fault)."""
        name = "test_always_errors"
        option_schema = frozenset()

        def score(self, item):
            if item.sample_id == "keep-me":
                return Score(value=1.0, correct=True)
            return Score.error("judge unreachable: connection refused")

    register_metric("test_always_errors", AlwaysErrors, replace=True)


def test_a_metric_whose_verdicts_all_errored_fails_the_partition_instead_of_reading_0(cli, home, write_config, mock):
    _register_erroring_metric()
    write_config(smoke_benchmark(limit=3, metrics="[exact_match, test_always_errors]") + MODELS.format(url=mock[1]))
    r = cli("run", "--model", "perfect", "--no-progress")
    assert r.exit_code == 1, r.output
    cause = [ln for ln in r.output.splitlines() if ln.strip().startswith("smoke/extra x perfect:")]
    assert cause and "metric test_always_errors: every one of the 3 verdict(s) is an error" in cause[0], r.output
    assert "judge unreachable" in cause[0], r.output
    assert _metrics_models() == set()  # no value of 0.0 over 3 samples for a metric that measured nothing


def test_verdict_tally_one_measured_verdict_is_enough():
    import pandas as pd

    from evalpipe.core.errors import RunFailed
    from evalpipe.pipeline.stages import VerdictTally

    rows = [{"sample_id": "a", "metric": "m", "status": "error", "reason": "boom"},
            {"sample_id": "b", "metric": "m", "status": "parse_error", "reason": "no answer"},
            {"sample_id": "a", "metric": "j", "status": "error", "reason": "judge down"}]
    t = VerdictTally()
    t.add(pd.DataFrame(rows[:1] + rows[2:]))
    t.add(pd.DataFrame(rows[1:2]))  # a parse error is the model's: m measured something (a wrong answer)
    with pytest.raises(RunFailed, match=r"metric j: every one of the 1 verdict\(s\) is an error.*sample a: judge down"):
        t.check()
