"""Dagster concurrency pools for run-level limits (docs/deployment.md#pools): the `rollouts` step is in the pool
`model_calls`; a limit on it caps how many rollouts steps run at once across runs, processes and workers.

Real components: the shipped dagster_home/dagster.yaml (its storages and concurrency section) with a limit of 1 on a
temp instance, two `evalpipe run` processes started together, a mock model server whose replies take 5 s (so that,
started together, their rollouts steps would overlap without the limit, even on a loaded machine)."""
import os
from pathlib import Path

import yaml

from tests.helpers.cli import run_processes
from tests.helpers.configs import smoke_benchmark
from tests.helpers.mock_servers import litellm_models, mock_server_process

ROOT = Path(__file__).resolve().parents[1]


def test_rollouts_is_the_step_in_the_model_calls_pool():
    from eval_assets.assets import eval_assets
    from evalpipe.project import Project

    built = eval_assets(Project.from_dict({"benchmarks": {}, "models": {}}))  # the factory, over any project
    pools = {a.key.to_user_string(): a.op.pool for a in built if a.key.to_user_string() != "leaderboard"}
    assert pools == {"dataset": None, "prompts": None, "rollouts": "model_calls", "judgements": None, "metrics": None,
                     "metric_settings": None}


def test_the_shipped_instance_enforces_pools_per_step_without_a_default_limit():
    """No default limit (a kill -9'd run would keep its slot for good), and `op` granularity (else in-process
    `evalpipe run`s would never wait)."""
    pools = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())["concurrency"]["pools"]
    assert pools == {"granularity": "op"}


def _step_times(instance, run_id: str, step: str) -> tuple[float, float, list[str]] | None:
    start = end = None
    messages = []
    for rec in instance.all_logs(run_id):
        ev = rec.dagster_event
        if ev is None or ev.step_key != step:
            continue
        if ev.event_type_value == "STEP_START":
            start = rec.timestamp
        elif ev.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            end = rec.timestamp
        elif ev.event_type_value == "ENGINE_EVENT":
            messages.append(rec.user_message)
    return (start, end, messages) if start is not None and end is not None else None


def test_limit_1_makes_concurrent_runs_take_turns_in_rollouts(home, tmp_path):
    shipped = yaml.safe_load((ROOT / "dagster_home" / "dagster.yaml").read_text())
    shipped["concurrency"]["pools"]["default_limit"] = 1
    (home / "dagster.yaml").write_text(yaml.safe_dump(shipped))
    with mock_server_process(latency=5) as port:
        cfg = tmp_path / "evals.yaml"
        cfg.write_text(smoke_benchmark("test") + "models:\n" + litellm_models(port, 2))
        env = {**os.environ, "EVALS_CONFIG": str(cfg), "DAGSTER_HOME": str(home)}
        run_processes(env, [["run", "--model", f"m{i}", "--no-progress", "--benchmark-option", "limit=1"]
                            for i in range(2)])

    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        steps = [t for t in (_step_times(instance, r.run_id, "rollouts") for r in instance.get_runs()) if t]
        assert len(steps) == 2
        (s1, e1, m1), (s2, e2, m2) = sorted(steps)
        assert e1 - s1 >= 5 and e2 - s2 >= 5  # each really spent the mock's 5 s in the step
        assert s2 >= e1, f"rollouts overlapped: [{s1}, {e1}] and [{s2}, {e2}]"
        # the second waited for the first's slot (not merely started later by chance)
        assert any("blocked by limit for pool model_calls" in m for m in m2), m2
        info = instance.event_log_storage.get_concurrency_info("model_calls")
        assert info.slot_count == 1 and info.active_slot_count == 0 and info.pending_step_count == 0  # all freed


def test_slot_claims_on_the_sqlite_instance_take_turns(tmp_path, monkeypatch):
    """Dagster's claim asks whether a slot is free, queues the step as assigned if so, then takes a free slot by id;
    SQLite ignores its FOR UPDATE SKIP LOCKED, so two claims at the same moment both got a pool's one slot
    (test_limit_1_... above saw both rollouts overlap, now and then). Our event log storage lets one claim through
    at a time: here each claim lingers after reading that a slot is free, as a loaded machine makes it, and still
    only one of two gets the slot."""
    import threading
    import time

    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from evalpipe.store.instance_storage import FastSqliteEventLogStorage

    real_free = SqliteEventLogStorage.has_unassigned_slots

    def lingering_free(self, *args, **kwargs):
        free = real_free(self, *args, **kwargs)
        time.sleep(0.3)
        return free

    monkeypatch.setattr(SqliteEventLogStorage, "has_unassigned_slots", lingering_free)
    # two storages over one folder: two processes' views of the same instance
    storages = [FastSqliteEventLogStorage(str(tmp_path / "runs")) for _ in range(2)]
    storages[0].set_concurrency_slots("model_calls", 1)
    results = [None, None]

    def claim(i):
        results[i] = storages[i].claim_concurrency_slot("model_calls", f"run{i}", "rollouts")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(bool(r.is_claimed) for r in results) == [False, True]  # one slot, one holder
    assert storages[0].get_concurrency_info("model_calls").active_slot_count == 1
