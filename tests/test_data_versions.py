"""Stable data versions (issue 25): every asset has a code version and a content-based data version, so a re-run
that changes nothing leaves every partition FRESH in Dagster, and a changed dataset file, prompt wrapper, runner
setting or metric makes exactly the downstream partitions that read the change STALE."""
import shutil

import pytest
from dagster import AssetKey, partition_loading_context
from dagster._utils.test.data_versions import get_stale_status_resolver

from eval_assets.assets import record_metric_settings
from eval_assets.launch import CHAIN, evaluate, project_graph, run_assets
from partitions import eval_key
from tests.helpers.configs import SMOKE_JSONL

SPLITS, MODELS = ["smoke/a", "smoke/b"], ["m1", "m2"]


def _config(data, m1_text="Paris", wrapper=None, metrics=("exact_match",)) -> dict:
    m1 = {"runner": "echo", "reply": "fixed", "text": m1_text, **({"prompt_wrapper": str(wrapper)} if wrapper else {})}
    return {"benchmarks": {"smoke": {"adapter": "file", "metrics": list(metrics),
                                     "splits": {"a": {"path": str(data / "a.jsonl"), "limit": 3},
                                                "b": {"path": str(data / "b.jsonl"), "limit": 3}},
                                     "options": {"columns": {"prompt": "question", "target": "answer", "id": "id"}}}},
            "models": {"m1": m1, "m2": {"runner": "echo", "reply": "target"}}}


def _status(project, instance) -> dict[tuple[str, str], str]:
    """{(asset, partition): FRESH | STALE | MISSING} for the dataset and the chain of every partition."""
    assets = [a for a in project_graph(project) if hasattr(a, "specs_by_key")]
    out = {}
    record_metric_settings(project, instance)  # (as `evalpipe run`, `stale_status()` or the UI's Observe)
    with partition_loading_context(dynamic_partitions_store=instance):
        resolver = get_stale_status_resolver(instance, assets)
        for split in SPLITS:
            out[("dataset", split)] = resolver.get_status(AssetKey("dataset"), split).value
            for model in MODELS:
                for asset in CHAIN:
                    out[(asset, f"{split}|{model}")] = resolver.get_status(AssetKey(asset), eval_key(split, model)).value
    return out


def _stale(status: dict) -> set:
    return {k for k, v in status.items() if v != "FRESH"}


def _data_versions(instance) -> dict:
    from dagster import AssetRecordsFilter

    out = {}
    for asset in ["dataset", *CHAIN]:
        for rec in instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset)), limit=100).records:
            m = rec.asset_materialization
            out.setdefault((asset, m.partition), m.tags.get("dagster/data_version"))
    return out


def _run_all(project, instance, **kw):
    r = evaluate(project, SPLITS, MODELS, instance=instance, **kw)
    assert all(p.success for p in r.partitions), r.partitions


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    for name in ("a", "b"):
        shutil.copy(SMOKE_JSONL, d / f"{name}.jsonl")
    return d


@pytest.mark.slow
def test_a_rerun_that_changes_nothing_leaves_everything_fresh(project_from, instance, data):
    project = project_from(_config(data))
    _run_all(project, instance)
    first = _data_versions(instance)
    assert all(first.values()) and len(first) == 2 + 4 * len(CHAIN)
    assert not _stale(_status(project, instance))
    # the same code and inputs again, the datasets loaded again too, in a new project object (a reloaded location)
    project = project_from(_config(data))
    _run_all(project, instance, reload_datasets=True)
    assert _data_versions(instance) == first
    assert not _stale(_status(project, instance))


@pytest.mark.slow
def test_each_change_makes_exactly_its_downstream_partitions_stale(project_from, instance, data, tmp_path):
    project = project_from(_config(data))
    _run_all(project, instance)

    # a dataset file edited: once split a's dataset is loaded again, its prompts (both models) are stale, nothing else
    lines = (data / "a.jsonl").read_text().splitlines()
    (data / "a.jsonl").write_text("\n".join([lines[0].replace("France", "Italy").replace("Paris", "Rome"),
                                             *lines[1:]]) + "\n")
    assert run_assets(["dataset"], "smoke/a", instance, project=project).success
    assert _stale(_status(project, instance)) == {("prompts", "smoke/a|m1"), ("prompts", "smoke/a|m2")}
    _run_all(project, instance)
    assert not _stale(_status(project, instance))

    # m1's prompt wrapper: prompts built again everywhere, only m1's rollouts and judgements (which read the
    # prompts too) are stale
    wrapper = tmp_path / "w.tmpl"
    wrapper.write_text("$system\n\nQuestion: $user\n")
    project = project_from(_config(data, wrapper=wrapper))
    for split in SPLITS:
        for model in MODELS:
            assert run_assets(["prompts"], eval_key(split, model), instance, project=project).success
    assert _stale(_status(project, instance)) == {(a, f"{s}|m1") for s in SPLITS for a in ("rollouts", "judgements")}
    _run_all(project, instance)
    assert not _stale(_status(project, instance))

    # a runner setting of m1 (its fixed reply): rollouts run again everywhere, only m1's judgements and metrics
    # (which read the rollouts' usage) are stale
    project = project_from(_config(data, m1_text="Rome", wrapper=wrapper))
    for split in SPLITS:
        for model in MODELS:
            assert run_assets(["rollouts"], eval_key(split, model), instance, project=project).success
    assert _stale(_status(project, instance)) == {(a, f"{s}|m1") for s in SPLITS for a in ("judgements", "metrics")}
    _run_all(project, instance)
    assert not _stale(_status(project, instance))

    # another metric for the benchmark (both its splits): every judgements and metrics partition is stale (the
    # splits' metric settings are an input of both, tests/test_staleness_grain.py); judged again, each partition's
    # metrics stay stale until they are computed again
    project = project_from(_config(data, m1_text="Rome", wrapper=wrapper, metrics=("exact_match", "includes")))
    assert _stale(_status(project, instance)) == {(a, f"{s}|{m}") for s in SPLITS for m in MODELS
                                                  for a in ("judgements", "metrics")}
    for split in SPLITS:
        for model in MODELS:
            assert run_assets(["judgements"], eval_key(split, model), instance, project=project).success
    assert _stale(_status(project, instance)) == {("metrics", f"{s}|{m}") for s in SPLITS for m in MODELS}
    _run_all(project, instance)
    assert not _stale(_status(project, instance))
