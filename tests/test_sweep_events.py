"""[sweeps] A batch's planned events in fewer SQLite transactions (evalpipe/store/instance_storage.py `grouped`): the same
records as one transaction per event, fewer commits, and a failure inside a group writes none of it."""
import pytest
import sqlalchemy
from dagster import AssetCheckEvaluation, AssetKey, AssetMaterialization, AssetRecordsFilter


@pytest.fixture
def instance(home):
    """The instance on evalpipe's SQLite storages (dagster_home/dagster.yaml selects them)."""
    from dagster import DagsterInstance

    from evalpipe.store.instance_storage import storage_yaml

    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n" + storage_yaml())
    with DagsterInstance.get() as inst:
        yield inst


@pytest.fixture
def commits():
    seen = []

    def count(conn):
        seen.append(conn.engine.url.database)

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "commit", count)
    yield seen
    sqlalchemy.event.remove(sqlalchemy.engine.Engine, "commit", count)


def _events(instance, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        instance.report_runless_asset_event(AssetMaterialization("rollouts", partition=f"p{i}", metadata={"i": i}))
        instance.report_runless_asset_event(AssetCheckEvaluation(asset_key=AssetKey("rollouts"),
                                                                 check_name="error_rate", passed=True,
                                                                 partition=f"p{i}"))


def _records(instance) -> list:
    recs = instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("rollouts")), limit=100).records
    return sorted((r.asset_materialization.partition, r.asset_materialization.metadata["i"].value) for r in recs)


def test_events_in_a_group_are_the_same_records_in_fewer_commits(instance, commits):
    storage = instance.event_log_storage
    _events(instance, 3)
    alone = len(commits)
    commits.clear()
    with storage.grouped():
        _events(instance, 3, first=3)
    grouped = len(commits)
    assert grouped <= 2 < alone  # (one per database: the events' run shard and the asset index)
    assert _records(instance) == [(f"p{i}", i) for i in range(6)]
    checks = instance.event_log_storage.get_asset_check_execution_history(
        __import__("dagster").AssetCheckKey(AssetKey("rollouts"), "error_rate"), limit=100)
    assert len(checks) == 6
    ids = [r.storage_id for r in instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey("rollouts")),
                                                                 limit=100).records]
    assert len(set(ids)) == 6


def test_a_failure_inside_a_group_writes_none_of_it(instance):
    with pytest.raises(RuntimeError):
        with instance.event_log_storage.grouped():
            _events(instance, 2)
            raise RuntimeError("boom")
    assert _records(instance) == []
    _events(instance, 1)  # the storage works on afterwards
    assert _records(instance) == [("p0", 0)]


def test_an_event_stored_alone_commits_once_per_database(instance, commits):
    """[sweeps] a materialization or a check evaluation outside any group: its statements in one transaction per
    database (its run's log, the asset index), not one per statement group as Dagster's own store_event"""
    _events(instance, 3)
    assert len(commits) <= 2 * 6  # 3 materializations and 3 check evaluations
    assert _records(instance) == [(f"p{i}", i) for i in range(3)]
    checks = instance.event_log_storage.get_asset_check_execution_history(
        __import__("dagster").AssetCheckKey(AssetKey("rollouts"), "error_rate"), limit=100)
    assert len(checks) == 3 and {c.partition for c in checks} == {"p0", "p1", "p2"}


def test_an_event_whose_index_write_fails_is_stored_nowhere(instance, monkeypatch):
    """an event's statements share their transactions: one that fails midway is recorded nowhere, and the storage
    goes on afterwards"""
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    def fail(*a, **k):
        raise RuntimeError("index write failed")

    with monkeypatch.context() as m:
        m.setattr(SqlEventLogStorage, "_store_asset_event", fail)
        with pytest.raises(RuntimeError):
            instance.report_runless_asset_event(AssetMaterialization("rollouts", partition="p9", metadata={"i": 9}))
    assert _records(instance) == []
    _events(instance, 1)
    assert _records(instance) == [("p0", 0)]
