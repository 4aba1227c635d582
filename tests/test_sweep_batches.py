"""[sweeps] Many partitions in one Dagster run (eval_assets/batch.py): each partition is still materialized, checked
and failed on its own, a killed batch resumes without repeating a model call, and the leaderboard is the one
per-partition runs give (docs/scale.md "Sweeps")."""
import json

import pytest
from dagster import AssetKey, AssetRecordsFilter, DagsterEventType

from benchmarks.mock_server import MockLLM, serve_in_thread
from eval_assets.batch import BATCH_JOB
from eval_assets.launch import CHAIN, check_results, evaluate, run_assets
from evalpipe.store.warehouse import Warehouse
from partitions import eval_key
from tests.helpers.configs import SMOKE_JSONL
from tests.helpers.kill9 import journaled, kill9_when, start_child

SPLIT = "smoke/test"


def _config(models: dict, path=SMOKE_JSONL, **top) -> dict:
    return {"benchmarks": {"smoke": {"adapter": "file", "metrics": ["exact_match"], "splits": {"test": {"path": str(path)}},
                                     "options": {"columns": {"prompt": "question", "target": "answer", "id": "id"}}}},
            "models": models, **top}


GOOD = {"perfect": {"runner": "echo", "reply": "target"}, "parrot": {"runner": "echo"}}
# every sample of `broken` fails (its script has no turns for them): a partition of errors fails (issue 20)
BROKEN = {"broken": {"runner": "echo", "reply": "script", "script": [{"sample_id": "nope", "turns": ["x"]}]}}


def _materialized(instance, asset: str) -> set[str]:
    recs = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset)), limit=1000).records
    return {r.asset_materialization.partition for r in recs}


def _batch_runs(instance) -> list:
    return [r for r in instance.get_runs() if r.job_name == BATCH_JOB]


@pytest.mark.slow
def test_a_failing_partition_inside_a_batch_keeps_its_batch_mates(project_from, instance):
    project = project_from(_config({**GOOD, **BROKEN}))
    r = evaluate(project, [SPLIT], ["perfect", "broken", "parrot"], instance=instance)
    ok = {p.model: p.success for p in r.partitions}
    assert ok == {"perfect": True, "broken": False, "parrot": True}
    assert r.partitions[1].error.startswith("rollouts: every one of the 8 sample(s) failed")
    runs = _batch_runs(instance)
    assert len(runs) == 1 and {p.run_id for p in r.partitions} == {runs[0].run_id}  # one Dagster run for the three
    # per partition, as the UI reads it: the good ones materialized through metrics, the broken one failed
    good = {f"{SPLIT}|perfect", f"{SPLIT}|parrot"}
    for asset in CHAIN:
        assert _materialized(instance, asset) == (good | {f"{SPLIT}|broken"} if asset == "prompts" else good), asset
    # the UI's per-partition status: the broken partition failed (planned in a failed run, never materialized)
    failed = instance.event_log_storage.get_latest_asset_partition_materialization_attempts_without_materializations(
        AssetKey("rollouts"))
    assert set(failed) == {f"{SPLIT}|broken"}
    # the leaderboard ranks the two good partitions
    board = Warehouse(project.warehouse).read_table("leaderboard")
    assert set(board["model"]) == {"perfect", "parrot"}


@pytest.mark.slow
def test_checks_are_evaluated_per_partition_in_a_batch(project_from, instance):
    project = project_from(_config(GOOD))
    r = evaluate(project, [SPLIT], ["perfect", "parrot"], instance=instance)
    assert r.success
    checks = check_results(instance, [r.partitions[0].run_id])
    by = {(c.asset, c.check, c.partition): c.passed for c in checks}
    for m in ("perfect", "parrot"):
        key = f"{SPLIT}|{m}"
        assert by[("rollouts", "error_rate", key)] is True
        assert by[("metrics", "samples_accounted", key)] is True
        assert ("metrics", "judge_parse_failures", key) in by
    # the CLI passes each partition's run id: a batch run named once per partition is read once, each check once
    again = check_results(instance, [p.run_id for p in r.partitions])
    assert sorted(map(repr, again)) == sorted(map(repr, checks))


@pytest.mark.slow
def test_a_batch_points_each_partition_at_its_own_upstream_events(project_from, instance):
    """Each materialization's input pointers name the storage ids of the upstream materializations it read, and
    each check names the materialization it checked, as in a run of their own (the batch knows the ids from the
    storage, eval_assets/batch.py)."""
    from dagster._core.definitions.data_version import get_input_event_pointer_tag

    project = project_from(_config(GOOD))
    r = evaluate(project, [SPLIT], ["perfect", "parrot"], instance=instance)
    assert r.success
    for m in ("perfect", "parrot"):
        key = f"{SPLIT}|{m}"
        rec = {a: instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(a), asset_partitions=[key]),
                                                  limit=1).records[0] for a in CHAIN}
        for asset, dep in [("rollouts", "prompts"), ("judgements", "rollouts"), ("metrics", "judgements")]:
            tags = rec[asset].asset_materialization.tags
            assert tags[get_input_event_pointer_tag(AssetKey(dep))] == str(rec[dep].storage_id), (key, asset)
        for ev in instance.all_logs(r.partitions[0].run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION):
            data = ev.dagster_event.event_specific_data
            if data.partition == key:
                target = rec[data.asset_key.path[-1]]
                assert data.target_materialization_data.storage_id == target.storage_id
                assert data.target_materialization_data.timestamp == target.timestamp


@pytest.mark.slow
def test_the_leaderboard_of_a_batched_sweep_equals_per_partition_runs(project_from, home, tmp_path, monkeypatch):
    from dagster import DagsterInstance

    models = ["perfect", "parrot"]
    with DagsterInstance.get() as inst:
        project = project_from(_config(GOOD))
        assert evaluate(project, [SPLIT], models, instance=inst).success
        batched = Warehouse(project.warehouse).read_table("leaderboard")
    other = tmp_path / "per_partition"
    other.mkdir()
    (other / "dagster.yaml").write_text((home / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(other))
    from evalpipe.project import Project

    with DagsterInstance.get() as inst:
        project = Project.from_dict(_config(GOOD), home=other)
        assert run_assets(["dataset"], SPLIT, inst, project=project).success
        for m in models:
            assert run_assets(CHAIN, eval_key(SPLIT, m), inst, project=project).success
        assert run_assets(["leaderboard"], None, inst, project=project).success
        assert not [r for r in inst.get_runs() if r.job_name == BATCH_JOB]
        single = Warehouse(project.warehouse).read_table("leaderboard")
    cols = ["benchmark_split", "metric", "model", "value", "n", "rank"]
    scored = lambda df: df[df["metric"] == "exact_match"][cols].sort_values(cols[:3]).reset_index(drop=True)  # noqa: E731
    assert len(scored(batched)) == 2
    assert scored(batched).equals(scored(single))


CHILD = """
from evalpipe.project import Project
from eval_assets.launch import evaluate
project = Project.from_dict({cfg}, home={home!r})
evaluate(project, ["bench/test"], ["m0", "m1", "m2"])
"""


@pytest.mark.slow
def test_a_batch_killed_with_sigkill_resumes_without_repeating_or_losing(tmp_path, home, project_from, instance):
    from evalpipe.pipeline.stages import journal_path

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i}", "answer": "x"}) + "\n"
                            for i in range(20)))
    with serve_in_thread(MockLLM(latency=0.5)) as (mock, url):
        models = {f"m{i}": {"runner": "litellm", "model": f"hosted_vllm/mock-{i}", "api_base": url,
                            "params": {"max_tokens": 8}, "concurrency": 2} for i in range(3)}
        cfg = {"benchmarks": {"bench": {"adapter": "file", "metrics": ["exact_match"], "splits": {"test": {"path": str(data)}},
                                        "options": {"columns": {"prompt": "question", "target": "answer", "id": "id"}}}},
               "models": models}
        child = start_child(CHILD.format(cfg=repr(cfg), home=str(home)), home)
        journals = [journal_path("rollouts", "bench/test", f"m{i}") for i in range(3)]
        kill9_when(child, lambda: sum(len(journaled(j)) for j in journals) >= 15, timeout_s=120)
        done_before = {j: journaled(j) for j in journals}
        sent_before = mock.requests
        assert 15 <= sum(map(len, done_before.values())) < 60, "killed midway"

        project = project_from(cfg)
        r = evaluate(project, ["bench/test"], ["m0", "m1", "m2"], instance=instance)
        sent_after = mock.requests - sent_before
    assert r.success, r.partitions
    # nothing repeated: the re-run sent exactly the samples no journal had finished
    assert sent_after == 60 - sum(map(len, done_before.values()))
    # nothing lost: every partition materialized with all its samples
    assert _materialized(instance, "metrics") == {f"bench/test|m{i}" for i in range(3)}
    wh = Warehouse(project.warehouse)
    for i in range(3):
        df = wh.read("rollouts", {"benchmark_split": "bench/test", "model": f"m{i}"})
        assert len(df) == 20 and df["sample_id"].is_unique and (df["status"] == "ok").all()


def test_throughput_with_fixed_costs_taken_out_is_the_average_in_flight_over_the_allowed():
    """bench_sweep's figure: ideal over the endpoint's busy window (first arrival to last reply), never above 1
    when no more than `allowed` requests overlap (the old figure, cold wall less cached wall, read 1.52)."""
    from benchmarks.bench_sweep import endpoint_ratio

    # 40 requests of 1 s, 10 at a time, back to back: 4 s busy, 10 in flight throughout
    packed = [float(i // 10) for i in range(40)]
    assert endpoint_ratio(packed, 1.0, 10) == pytest.approx((1.0, 10.0))
    # the same requests with a 2 s stall after the first wave: 6 s busy, 40/6 in flight on average
    stalled = [t + (2.0 if t else 0.0) for t in packed]
    ratio, in_flight = endpoint_ratio(stalled, 1.0, 10)
    assert in_flight == pytest.approx(40 / 6) and ratio == pytest.approx(4 / 6)
