"""tau2-bench telecom (issue 33): dual control. The agent's tools and the user's phone tools answer as the official
ones and the environment syncs the two sides at the official moments (answers and final hashes produced by the
official environment, scripts/tau2_official_verdicts.py tool-calls); the recorded conversations (3 trials of 4
tasks, the user calling its own tools) get the official evaluator's verdicts, database matches and pass^k
(scripts/tau2_official_verdicts.py telecom)."""
import copy
import json

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.tau2 import toolkit_for, user_side
from evalpipe.benchmarks.tau2.data import load_domain
from evalpipe.benchmarks.tau2.env import DomainEnv
from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, get_metric
from evalpipe.metrics.tau2_pass_hat_k import pass_hat_k_rows

from tests.helpers.tau2 import REC, REPO, replay, split

EXPECTED = json.loads((REC / "telecom_expected.json").read_text())
DOM = load_domain(REPO / "data/tau2", "telecom")
TASKS = {t["id"]: t for t in DOM["tasks"]}
BILL = "[service_issue]overdue_bill_suspension[PERSONA:Easy]"
REFUEL = "[mobile_data_issue]data_usage_exceeded[PERSONA:Easy]"


def env_for(task_id):
    return DomainEnv(toolkit_for("telecom", "t"), DOM["db"], TASKS[task_id], **user_side("telecom", DOM, "t"))


@pytest.fixture(scope="module")
def replayed():
    return replay("telecom")


def score(sample, gen):
    return get_metric("tau2_reward")().score(JudgeInput(
        sample_id="", input="", target=None, prediction=gen.text, metadata=sample.metadata,
        trajectory=gen.trajectory, stop_reason=gen.stop_reason))


def test_tools_of_both_sides_answer_and_sync_as_the_official_environment():
    """87 calls from the overdue-bill task's initial state (the user's reads and toggles, the agent's lookups and
    writes, refusals, an unknown tool, a tool of the other side, a missing argument; a payment request paid on the
    phone and the bill marked paid by the sync; the line resumed and the phone's service back after a reboot): the
    official answer to each, character for character, and the same final agent and user databases."""
    ref = json.loads((REC / "telecom_tool_calls.json").read_text())
    env = env_for(ref["task"])
    for (requestor, name, args), (want, _error) in zip(ref["calls"], ref["official"]):
        assert env.call(requestor, name, args) == want, (requestor, name, args)
    assert (env.db_hash(), env.user_db_hash()) == (ref["db_hash"], ref["user_db_hash"])


def test_recorded_conversations_get_the_official_verdicts(replayed):
    verdicts = EXPECTED["verdicts"]
    assert len(verdicts) == 12 and set(verdicts) == set(replayed)
    for row, want in verdicts.items():
        got = score(*replayed[row])
        assert got.status == "scored", (row, got.reason)
        assert (got.value, got.details["reward_breakdown"], got.details["db_match"]) == \
            (want["reward"], want["breakdown"], want["db_match"]), row
    # the user acted on its own phone, and its tool turns are marked as the user's
    _, gen = replayed[BILL]
    assert [m["name"] for m in gen.trajectory if m.get("requestor") == "user"] == \
        ["check_payment_request", "make_payment", "reboot_device", "check_status_bar"]
    assert replayed[f"[service_issue]lock_sim_card_pin[PERSONA:Hard]"][1].stop_reason == "user_stop"  # ###TRANSFER###


def test_pass_hat_k_is_the_official_one():
    by_task = {}
    for row, want in EXPECTED["verdicts"].items():
        by_task.setdefault(row.split("#")[0], []).append(want["reward"] == 1.0)
    rows = pass_hat_k_rows("tau2_reward", [(len(v), sum(v)) for v in by_task.values()], seed=0)
    assert {r["metric"][-1]: r["value"] for r in rows} == pytest.approx(EXPECTED["pass_hat_k"])


def test_the_sync_runs_at_the_official_moments():
    """Live and in the replay of the conversation, a successful write is followed by a sync; the expected actions
    are run with none (so the official gold database of a paid bill still awaits payment, and after a refuel the
    phone still counts the data as used up: `db_match` is False on conversations that did exactly the actions)."""
    env = env_for(BILL)
    assert env.user_tools.surroundings["line_active"] is False  # synced from the suspended line at set-up
    env.call("assistant", "send_payment_request", {"customer_id": "C1001", "bill_id": "B1234321"})
    assert env.user_tools.surroundings["payment_request"]["bill_id"] == "B1234321"
    env.call("user", "make_payment", {})
    assert env.tools._get_bill_by_id("B1234321")["status"] == "Paid"
    gold = env_for(BILL)
    for a in TASKS[BILL]["evaluation_criteria"]["actions"]:
        gold.expected_call(a["requestor"], a["name"], a["arguments"])
    assert gold.tools._get_bill_by_id("B1234321")["status"] == "Awaiting Payment"
    assert gold.user_tools.surroundings["payment_request"] is None
    refuel = env_for(REFUEL)
    refuel.expected_call("assistant", "refuel_data", {"customer_id": "C1001", "line_id": "L1002", "gb_amount": 2.0})
    assert refuel.user_tools.surroundings["mobile_data_usage_exceeded"] is True
    refuel.sync()
    assert refuel.user_tools.surroundings["mobile_data_usage_exceeded"] is False


def test_the_user_simulator_gets_its_tools_and_the_agent_only_its_own():
    ad = adapter_for(split("telecom"))
    env = ad.tool_env()
    sample = ad.load()[0]
    agent_tools = {t["function"]["name"] for t in sample.tools}
    user_tools = {t["function"]["name"] for t in env.partner.env.user_schemas}
    assert len(agent_tools) == 13 and len(user_tools) == 30 and not agent_tools & user_tools
    assert "<tech_support_policy>" in sample.system and "<main_policy>" in sample.system
    assert "tool" in env.partner.guidelines.lower()  # the official guidelines for a user with tools
    s = env.session(BILL, [])
    assert s.ctx.tau2.call("user", "refuel_data", {}) == "Error: Tool 'refuel_data' not found."


def test_a_telecom_folder_without_the_user_db_or_with_initial_data_is_refused(tmp_path):
    folder = tmp_path / "telecom"
    folder.mkdir()
    for f in ("tasks.json", "db.json", "main_policy.md", "tech_support_manual.md"):
        (folder / f).write_text((REPO / "data/tau2/telecom" / f).read_text())
    (tmp_path / "user_simulator").symlink_to(REPO / "data/tau2/user_simulator")
    with pytest.raises(ConfigError, match="needs user_db.json"):
        adapter_for(split("telecom", path=str(tmp_path))).tool_env()
    task = copy.deepcopy(TASKS[BILL])
    task["initial_state"]["initialization_data"] = {"agent_data": {"plans": []}}
    with pytest.raises(ValueError, match="share one database"):
        DomainEnv(toolkit_for("telecom", "t"), DOM["db"], task, **user_side("telecom", DOM, "t"))


@pytest.mark.slow
def test_evalpipe_run_replays_the_telecom_recordings_with_epochs(home, write_config, monkeypatch):
    from tests.helpers.tau2 import run_recordings

    got = run_recordings(home, write_config, monkeypatch, "telecom", "{domain: telecom, task_split: small}")
    for k, v in EXPECTED["pass_hat_k"].items():
        assert got[f"tau2_reward_pass^{k}"] == pytest.approx(v)
