"""tau2-bench airline (issue 33): the tools answer as the official ones (answers and final database produced by the
official environment, scripts/tau2_official_verdicts.py tool-calls), and the recorded conversations (3 trials of 3
tasks) get the official evaluator's verdicts and pass^k (scripts/tau2_official_verdicts.py airline)."""
import json

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.tau2.airline import AirlineTools
from evalpipe.metrics.base import JudgeInput, get_metric
from evalpipe.metrics.tau2_pass_hat_k import pass_hat_k_rows

from tests.helpers.tau2 import REC, REPO, replay, split

EXPECTED = json.loads((REC / "airline_expected.json").read_text())
DB = json.loads((REPO / "data/tau2/airline/db.json").read_text())


@pytest.fixture(scope="module")
def replayed():
    return replay("airline")


def score(sample, gen):
    return get_metric("tau2_reward")().score(JudgeInput(
        sample_id="", input="", target=None, prediction=gen.text, metadata=sample.metadata,
        trajectory=gen.trajectory, stop_reason=gen.stop_reason))


def test_recorded_conversations_get_the_official_verdicts(replayed):
    verdicts = EXPECTED["verdicts"]
    assert len(verdicts) == 9 and set(verdicts) == set(replayed)
    for row, want in verdicts.items():
        got = score(*replayed[row])
        assert got.status == "scored", (row, got.reason)
        assert (got.value, got.details["reward_breakdown"]) == (want["reward"], want["breakdown"]), row
    # what the verdicts turn on: a change left out, a wrong figure told, a transfer
    assert score(*replayed["7#epoch2"]).details["db_diff"]
    assert [c["met"] for c in score(*replayed["7#epoch3"]).details["communicate_checks"]] == [False]
    assert replayed["14#epoch3"][1].stop_reason == "user_stop"


def test_pass_hat_k_is_the_official_one():
    by_task = {}
    for row, want in EXPECTED["verdicts"].items():
        by_task.setdefault(row.split("#")[0], []).append(want["reward"] == 1.0)
    rows = pass_hat_k_rows("tau2_reward", [(len(v), sum(v)) for v in by_task.values()], seed=0)
    assert {r["metric"][-1]: r["value"] for r in rows} == pytest.approx(
        {k: v for k, v in EXPECTED["pass_hat_k"].items()})


def test_tools_answer_and_change_the_database_as_the_official_ones():
    """Every call of the list (reads, each write, refusals, extra keys in passengers and payments, 500.0 for a
    whole-dollar amount, an unknown tool, a missing argument): the official environment's answer, character for
    character, and the same final database."""
    ref = json.loads((REC / "airline_tool_calls.json").read_text())
    kit = AirlineTools(DB)
    for (name, args), want in zip(ref["calls"], ref["official"]):
        content, error = kit.call(name, args)
        assert [content, error] == want, name
    assert kit.db_hash() == ref["db_hash"]


def test_the_official_quirks_are_kept():
    kit = AirlineTools(DB)
    before = json.loads(json.dumps(kit.db["flights"]["HAT023"]["dates"]["2024-05-26"]["available_seats"]))
    kit.call("cancel_reservation", {"reservation_id": "K1NW8N"})
    res = kit.db["reservations"]["K1NW8N"]
    assert res["status"] == "cancelled" and [p["amount"] for p in res["payment_history"]][-1] < 0
    assert kit.db["flights"]["HAT023"]["dates"]["2024-05-26"]["available_seats"] == before  # no seat freed
    assert kit.call("send_certificate", {"user_id": "omar_rossi_1241", "amount": 100})[0] == \
        "Certificate certificate_3221322 added to user omar_rossi_1241 with amount 100."
    assert kit.db["users"]["omar_rossi_1241"]["payment_methods"]["certificate_3221322"]["amount"] == 100.0
    assert all(r["status"] is None for r in DB["reservations"].values())  # the official dump's `status: null`


def test_each_conversation_has_its_own_database():
    env = adapter_for(split("airline")).tool_env()
    a, b = env.session("7", []), env.session("7#epoch2", [])
    a.ctx.tau2.call("assistant", "cancel_reservation", {"reservation_id": "59XX6W"})
    assert json.loads(b.ctx.tau2.call("assistant", "get_reservation_details",
                                      {"reservation_id": "59XX6W"}))["status"] is None
    assert env.domain["db"]["reservations"]["59XX6W"]["status"] is None


@pytest.mark.slow
def test_evalpipe_run_replays_the_airline_recordings_with_epochs(home, write_config, monkeypatch):
    """The whole chain (no judge: the airline tasks are scored on DB and COMMUNICATE) from the CLI to the warehouse."""
    from tests.helpers.tau2 import run_recordings

    got = run_recordings(home, write_config, monkeypatch, "airline", "{domain: airline, task_split: train}")
    for k, v in EXPECTED["pass_hat_k"].items():
        assert got[f"tau2_reward_pass^{k}"] == pytest.approx(v)
