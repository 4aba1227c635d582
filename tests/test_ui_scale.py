"""The Dagster webserver answers the Partitions tab's partition-status query at 10,000 partitions (100 splits x 100
models registered, issue 31) with the right partitions materialized, failed and missing: the events of a finished
sweep over the first 400 partitions written through the instance as the batch code writes them
(benchmarks/bench_ui_scale.py `build_home`), then the webserver and daemon as `make dev` starts them. Not timed:
benchmarks/bench_ui_scale.py times the queries."""
from __future__ import annotations

import pytest

from benchmarks.bench_ui import DagsterDev, gql
from benchmarks.bench_ui_scale import build_home, fate, model_keys, split_keys
from tests.helpers.services import free_port

pytestmark = pytest.mark.slow

SPLITS = MODELS = 100
SWEPT = 400  # partitions the sweep covered: 4 splits x 100 models

# the fields the UI's partition-status query reads, asked of the `metrics` asset
STATUS = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  partitionKeysByDimension { name partitionKeys }
  partitionStats { numMaterialized numFailed numMaterializing numPartitions }
  assetPartitionStatuses { ... on MultiPartitionStatuses { primaryDimensionName ranges {
    primaryDimStartKey primaryDimEndKey
    secondaryDim { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions
                                                     materializingPartitions } } } } } } } }"""


def statuses(node: dict) -> dict[str, set[str]]:
    """{materialized|failed|materializing: {split|model}} from the answer's ranges of the primary dimension."""
    dims = {d["name"]: d["partitionKeys"] for d in node["partitionKeysByDimension"]}
    got = node["assetPartitionStatuses"]
    primary = dims[got["primaryDimensionName"]]
    out: dict[str, set[str]] = {"materialized": set(), "failed": set(), "materializing": set()}
    for r in got["ranges"]:
        first, last = primary.index(r["primaryDimStartKey"]), primary.index(r["primaryDimEndKey"])
        for p in primary[first:last + 1]:
            for status in out:
                for s in r["secondaryDim"][f"{status}Partitions"]:
                    # a multi key reads split|model whichever dimension is primary
                    split, model = (p, s) if got["primaryDimensionName"] == "benchmark_split" else (s, p)
                    out[status].add(f"{split}|{model}")
    return out


def test_partition_status_at_10000_partitions_counts_materialized_failed_and_missing(tmp_path):
    env, counts = build_home(tmp_path, SPLITS, MODELS, assets=("metrics",), writers=1, swept=SWEPT)
    keys = [f"{s}|{m}" for s in split_keys(SPLITS) for m in model_keys(MODELS)]
    want = {f: {k for i, k in enumerate(keys) if fate(i, SWEPT) == f} for f in ("materialized", "failed")}
    assert counts == {"materialized": 372, "failed": 8, "missing": 9620}  # the sweep as designed
    with DagsterDev(env, free_port(), log=tmp_path / "dev.log") as dev:
        node = gql(dev.url, STATUS, {"key": {"path": ["metrics"]}}, timeout=120)["assetNodeOrError"]
    assert node["partitionStats"] == {"numMaterialized": 372, "numFailed": 8, "numMaterializing": 0,
                                      "numPartitions": 10_000}
    got = statuses(node)
    assert got["materialized"] == want["materialized"]
    assert got["failed"] == want["failed"]
    assert not got["materializing"]
    missing = set(keys) - got["materialized"] - got["failed"]
    assert len(missing) == 9620


# --- the asset checks' partition statuses (what AssetGraphLiveQuery and AssetChecksQuery ask of every partitioned
# check on each poll of the asset graph and the asset page): Dagster computes them from every partition's latest
# execution on each call; the product's instance storage keeps the answer while nothing it depends on changed


@pytest.fixture
def swept(tmp_path, monkeypatch):
    """The product's SQLite instance with a 3 x 4 sweep of `metrics` recorded (checks included), and a counter of
    Dagster's from-scratch computations of check states."""
    from dagster._core.storage import asset_check_state

    from benchmarks.bench_ui_scale import record_sweep
    from evalpipe.store.instance_storage import open_instance
    from evalpipe.store.partition_keys import add_in_chunks

    import shutil

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy("dagster_home/dagster.yaml", home / "dagster.yaml")  # the product's storages (`make dev`'s)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    instance = open_instance(str(home), capture_compute_logs=False)
    add_in_chunks(instance, "benchmark_split", split_keys(3))
    add_in_chunks(instance, "model", model_keys(4))
    record_sweep(instance, split_keys(3), model_keys(4), assets=("metrics",))
    calls = []
    real = asset_check_state.bulk_update_asset_check_state
    monkeypatch.setattr(asset_check_state, "bulk_update_asset_check_state",
                        lambda *a, **kw: calls.append(1) or real(*a, **kw))
    return instance, calls


def _states(instance, names=("samples_accounted", "judge_parse_failures")):
    from dagster import AssetCheckKey, AssetKey, partition_loading_context

    from partitions import eval_partitions

    keys = [(AssetCheckKey(AssetKey("metrics"), n), eval_partitions) for n in names]
    with partition_loading_context(dynamic_partitions_store=instance):
        return {k.name: v for k, v in instance.event_log_storage.get_asset_check_state(keys).items()}


def _fresh(instance, names=("samples_accounted", "judge_parse_failures")):
    """Dagster's own computation from scratch (the stock storage's)."""
    from dagster import AssetCheckKey, AssetKey, partition_loading_context
    from dagster._core.storage.event_log.base import EventLogStorage

    from partitions import eval_partitions

    keys = [(AssetCheckKey(AssetKey("metrics"), n), eval_partitions) for n in names]
    with partition_loading_context(dynamic_partitions_store=instance):
        return {k.name: v for k, v in EventLogStorage.get_asset_check_state(instance.event_log_storage, keys).items()}


def _keys_of(state, status: str) -> set[str]:
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionResolvedStatus

    subset = state.subsets.get(AssetCheckExecutionResolvedStatus[status])
    return set(subset.subset_value.get_partition_keys()) if subset is not None else set()


def test_check_states_are_computed_once_while_nothing_changes(swept):
    instance, calls = swept
    first = _states(instance)
    assert len(_keys_of(first["samples_accounted"], "SUCCEEDED")) == 11  # 12 partitions, one failed at rollouts
    assert calls == [1]
    again = _states(instance)
    assert again == first == _fresh(instance)
    assert calls == [1, 1], "recomputed although no check event, materialization or partition key changed"


def test_check_states_follow_a_new_evaluation_a_new_materialization_and_a_deleted_key(swept):
    from dagster import AssetCheckEvaluation, AssetKey, AssetRecordsFilter, DagsterEvent, MultiPartitionKey
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData)
    from dagster._core.events import DagsterEventType

    instance, calls = swept
    _states(instance)
    key = MultiPartitionKey({"benchmark_split": split_keys(1)[0], "model": model_keys(1)[0]})
    # a failed re-evaluation of one partition's check (a run of its own, as the UI's "Execute" of a check)
    mat = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("metrics"),
                                                             asset_partitions=[str(key)]), limit=1).records[0]
    run = instance.get_run_by_id(mat.run_id)
    instance.report_dagster_event(DagsterEvent(
        event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value, job_name=run.job_name,
        event_specific_data=AssetCheckEvaluation(
            asset_key=AssetKey("metrics"), check_name="samples_accounted", passed=False, partition=str(key),
            target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                storage_id=mat.storage_id, run_id=mat.run_id, timestamp=mat.timestamp))), run_id=run.run_id)
    after = _states(instance)
    assert str(key) in _keys_of(after["samples_accounted"], "FAILED")
    assert after == _fresh(instance)
    # a model forgotten (its partition key deleted): its partitions' statuses go
    instance.delete_dynamic_partition("model", model_keys(4)[3])
    gone = _states(instance)
    assert not any(k.endswith("|model-003") for k in _keys_of(gone["samples_accounted"], "SUCCEEDED"))
    assert gone == _fresh(instance)


def test_check_states_follow_a_deleted_run_and_a_wiped_asset(swept):
    """Deletions leave no newer storage id behind: the kept statuses must still go (a run deleted in the UI, the
    asset's materializations wiped from the CLI)."""
    from dagster import AssetKey, AssetRecordsFilter, MultiPartitionKey

    instance, calls = swept
    before = _states(instance)
    key = MultiPartitionKey({"benchmark_split": split_keys(1)[0], "model": model_keys(1)[0]})
    run_id = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("metrics"),
                                                                asset_partitions=[str(key)]), limit=1).records[0].run_id
    instance.delete_run(run_id)  # (its materializations go; Dagster keeps the check's statuses as they were)
    assert _states(instance) == _fresh(instance)
    instance.wipe_assets([AssetKey("metrics")])  # the checks' executions go too
    wiped = _states(instance)
    assert _keys_of(before["samples_accounted"], "SUCCEEDED") and not _keys_of(wiped["samples_accounted"], "SUCCEEDED")
    assert wiped == _fresh(instance)
