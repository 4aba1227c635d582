"""Staleness at the grain of the change (issue 30, item 7): a metric edited for one benchmark marks only its splits'
`judgements` and `metrics` stale, in Dagster (what the UI shows) and in `stale_status()`; `stale_status()` lists
every asset after the change (an edited agent: rollouts, judgements, metrics and the leaderboard)."""
import pytest
from dagster import AssetKey, partition_loading_context
from dagster._utils.test.data_versions import get_stale_status_resolver

import evalpipe
from eval_assets.assets import record_metric_settings
from eval_assets.launch import CHAIN, evaluate, project_graph
from partitions import eval_key
from tests.helpers.configs import SMOKE_JSONL

SPLITS, MODELS = ["one/a", "two/a"], ["m1"]
COLUMNS = {"prompt": "question", "target": "answer", "id": "id"}


def _config(one_metrics=("exact_match",), two_metrics=("exact_match",)) -> dict:
    def bench(metrics):
        return {"adapter": "file", "metrics": list(metrics), "splits": {"a": {"path": str(SMOKE_JSONL), "limit": 3}},
                "options": {"columns": COLUMNS}}

    return {"benchmarks": {"one": bench(one_metrics), "two": bench(two_metrics)},
            "models": {"m1": {"runner": "echo", "reply": "target"}}}


def _dagster_status(project, instance) -> dict[tuple[str, str], str]:
    """What Dagster's stale status resolver (the UI's) says for every partition, after the project's metric
    settings were observed (as `evalpipe run`, `stale_status()` or the UI's Observe button record them)."""
    record_metric_settings(project, instance)
    with partition_loading_context(dynamic_partitions_store=instance):
        resolver = get_stale_status_resolver(instance, project_graph(project))
        return {(asset, f"{s}|{m}"): resolver.get_status(AssetKey(asset), eval_key(s, m)).value
                for s in SPLITS for m in MODELS for asset in CHAIN}


def _stale(status: dict) -> set:
    return {k for k, v in status.items() if v != "FRESH"}


@pytest.mark.slow
def test_a_metric_edited_for_one_benchmark_marks_only_its_splits_stale(project_from, instance):
    project = project_from(_config())
    assert all(p.success for p in evaluate(project, SPLITS, MODELS, instance=instance).partitions)
    assert not _stale(_dagster_status(project, instance))

    # benchmark `one` gets another metric (a reloaded code location): only one/a's judgements and metrics
    project = project_from(_config(one_metrics=("exact_match", "includes")))
    assert _stale(_dagster_status(project, instance)) == {("judgements", "one/a|m1"), ("metrics", "one/a|m1")}
    # a setting of that metric, not its name
    assert all(p.success for p in evaluate(project, SPLITS, MODELS, instance=instance).partitions)
    assert not _stale(_dagster_status(project, instance))
    project = project_from(_config(one_metrics=("exact_match", {"name": "includes", "ignore_case": False})))
    assert _stale(_dagster_status(project, instance)) == {("judgements", "one/a|m1"), ("metrics", "one/a|m1")}

    # running it again judges only what changed and leaves everything fresh; a re-run that changes nothing
    # records no new observation
    assert all(p.success for p in evaluate(project, SPLITS, MODELS, instance=instance).partitions)
    assert not _stale(_dagster_status(project, instance))
    from dagster import AssetRecordsFilter

    seen = len(instance.fetch_observations(AssetRecordsFilter(asset_key=AssetKey("metric_settings")), limit=100).records)
    assert all(p.success for p in evaluate(project, SPLITS, MODELS, instance=instance).partitions)
    assert not _stale(_dagster_status(project, instance))
    assert len(instance.fetch_observations(AssetRecordsFilter(asset_key=AssetKey("metric_settings")),
                                           limit=100).records) == seen


ROWS = [{"id": f"q{i}", "question": f"{i} + {i}", "answer": str(2 * i)} for i in range(3)]


def _adder(plus: int):
    @evalpipe.agent(name="adder")
    def add_up(question: str) -> str:
        a, _, b = question.split()
        return str(int(a) + int(b) + plus)

    return add_up


@pytest.mark.slow
def test_stale_status_lists_every_asset_after_the_change(home):
    add_up = _adder(0)
    evalpipe.evaluate(agent=add_up, dataset=ROWS, metrics=["exact_match"], name="sums")
    [(key, fresh)] = evalpipe.stale_status(agent=add_up, dataset=ROWS, metrics=["exact_match"], name="sums").items()
    assert set(fresh.values()) == {"FRESH"} and {"dataset", *CHAIN, "leaderboard"} <= set(fresh), fresh

    # an edited agent: its rollouts and everything after them
    [(_, edited)] = evalpipe.stale_status(agent=_adder(1), dataset=ROWS, metrics=["exact_match"], name="sums").items()
    assert edited == {"dataset": "FRESH", "prompts": "FRESH", "rollouts": "STALE", "judgements": "STALE",
                      "metrics": "STALE", "leaderboard": "STALE"}, edited

    # another metric: judgements and everything after them, not the rollouts
    [(_, judged)] = evalpipe.stale_status(agent=add_up, dataset=ROWS, metrics=["exact_match", "includes"],
                                          name="sums").items()
    assert judged == {"dataset": "FRESH", "prompts": "FRESH", "rollouts": "FRESH", "judgements": "STALE",
                      "metrics": "STALE", "leaderboard": "STALE"}, judged


def test_the_uis_observe_records_the_versions_a_run_records(project_from, instance):
    """The UI's Observe on `metric_settings` (its observation function) and `record_metric_settings` (runs,
    `stale_status()`) give each split the same version, and a benchmark's edit changes only its splits'."""
    from dagster import AssetRecordsFilter
    from dagster._core.definitions.observe import observe

    from eval_assets.assets import _metric_settings_source, metric_settings_versions
    from resources import project_resources

    project = project_from(_config())
    instance.add_dynamic_partitions("benchmark_split", SPLITS)
    assert observe([_metric_settings_source], instance=instance, resources=project_resources(project)).success
    recs = instance.fetch_observations(AssetRecordsFilter(asset_key=AssetKey("metric_settings")), limit=10).records
    observed = {r.asset_observation.partition: r.asset_observation.tags["dagster/data_version"] for r in recs}
    assert observed == record_metric_settings(project, instance) == metric_settings_versions(project.config)
    edited = metric_settings_versions(project_from(_config(two_metrics=("includes",))).config)
    assert edited["one/a"] == observed["one/a"] and edited["two/a"] != observed["two/a"]
