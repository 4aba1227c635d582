"""Issue 25's done-when, in the real Dagster UI: headless Chromium (Debian package `chromium`, installed by .ci/run)
driven by Playwright against the webserver and daemon as `make dev` starts them (benchmarks/bench_ui.py
`DagsterDev`). It clicks Materialize on one partition (`dataset`, smoke/extra), then "Materialize all" over the
whole graph for that split, a backfill over two models, and waits for them; the model whose answers a metric
cannot account for fails the blocking gate `samples_accounted`, and the leaderboard asset's page lists that
partition as not ranked while the other model ranks."""
import json
import subprocess
import sys
import time

import pytest

from benchmarks.bench_ui import DagsterDev, gql, make_home
from tests.helpers.browser import browser_page, need_browser
from tests.helpers.configs import smoke_benchmark
from tests.helpers.services import free_port

SPLIT = "smoke/extra"

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# a metric that loses the verdict of a wrong answer (an unknown status): that sample is unaccounted, the gate fails
PLUGIN = '''
from evalpipe.core.types import Score
from evalpipe.metrics import register_metric
from evalpipe.metrics.base import Metric


class LosesWrongAnswers(Metric):
    name = "loses_wrong"

    def score(self, item):
        return Score(value=1.0, status="scored") if item.prediction == item.target else Score(value=None, status="lost")


register_metric("loses_wrong", LosesWrongAnswers, replace=True)
'''

RUNS = """query { runsOrError(limit: 50) { ... on Runs { results { id status tags { key value } } } } }"""
BACKFILLS = """query { partitionBackfillsOrError(limit: 5) { ... on PartitionBackfills { results { id status } } } }"""


def wait_for(what, fn, timeout=120, every=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(every)
    pytest.fail(f"timed out waiting for {what}")


def runs(url):
    return gql(url, RUNS)["runsOrError"]["results"]


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    need_browser()
    root = tmp_path_factory.mktemp("ui")
    config = (smoke_benchmark(limit=2, metrics="[loses_wrong]") + "plugins: [ui_gate_plugin]\nmodels:\n"
              "  right: {runner: echo, reply: target}\n  wrong: {runner: echo, reply: input}\n")
    env = make_home(root, config)
    (root / "ui_gate_plugin.py").write_text(PLUGIN)  # next to the config: found in every process, no PYTHONPATH
    # the partition keys the config-sync sensor would add on its first tick, added now so the test needn't wait
    subprocess.run([sys.executable, "-c", "from dagster import DagsterInstance; i = DagsterInstance.get(); "
                    f"i.add_dynamic_partitions('benchmark_split', [{SPLIT!r}]); "
                    "i.add_dynamic_partitions('model', ['right', 'wrong'])"], env=env, check=True)
    with DagsterDev(env, free_port(), log=root / "dev.log") as d:
        yield d


@pytest.fixture(scope="module")
def page(dev):
    with browser_page() as pg:
        pg.set_default_timeout(30_000)
        yield pg


def click_when_enabled(locator):
    wait_for("an enabled button", locator.is_enabled, timeout=30, every=0.3)
    locator.click()


def test_materialize_and_backfill_from_the_ui_keep_a_failed_gate_off_the_leaderboard(dev, page):
    # 1. one partition: the asset page with the partition chosen (?partition=), Materialize..., Launch 1 run
    page.goto(f"{dev.url}/assets/dataset?partition={SPLIT}")
    click_when_enabled(page.get_by_role("button", name="Materialize…").first)
    page.get_by_role("button", name="Launch 1 run").click()
    page.get_by_text("Launched run").wait_for()
    first = wait_for("the dataset run", lambda: [r for r in runs(dev.url) if r["status"] in ("SUCCESS", "FAILURE")])
    assert first[0]["status"] == "SUCCESS"
    assert {"key": "dagster/partition", "value": SPLIT} in first[0]["tags"]

    # 2. the two-model backfill: "Materialize all" on the graph, every partition of the split and downstream
    # the group's own page (the code location has other groups now: sources, reviews)
    page.goto(f"{dev.url}/locations/eval_assets.definitions/asset-groups/evaluation")
    click_when_enabled(page.get_by_role("button", name="Materialize all…").first)
    page.get_by_role("button", name="All", exact=True).click()
    click_when_enabled(page.get_by_role("button", name="Launch backfill"))

    def backfill_done():
        got = gql(dev.url, BACKFILLS)["partitionBackfillsOrError"]["results"]
        return got if got and got[0]["status"] not in ("REQUESTED", "CANCELING", "FAILING") else None

    wait_for("the backfill", backfill_done, timeout=180)
    # one batch run carries both models' partitions (docs/scale.md#sweeps), each recorded on its own: `right`
    # materialized through metrics; `wrong`'s failed blocking gate is its own check result (step 3 reads it)
    batch = [r for r in runs(dev.url) if any(t["key"] == "dagster/asset_partition_range_start" for t in r["tags"])]
    assert len(batch) == 1 and batch[0]["status"] in ("SUCCESS", "FAILURE"), batch
    probe = ("import json; from dagster import AssetKey, DagsterInstance, MultiPartitionKey; i = DagsterInstance.get(); "
             "print(json.dumps({m: i.get_latest_materialization_event(AssetKey('metrics')) is not None and bool("
             "i.fetch_materializations(__import__('dagster').AssetRecordsFilter(asset_key=AssetKey('metrics'), "
             f"asset_partitions=[str(MultiPartitionKey({{'benchmark_split': {SPLIT!r}, 'model': m}}))]), limit=1).records)"
             " for m in ('right', 'wrong')}))")
    done = json.loads(subprocess.run([sys.executable, "-c", probe], env=dev.env, check=True, capture_output=True,
                                     text=True).stdout.strip().splitlines()[-1])
    assert done == {"right": True, "wrong": True} or done == {"right": True, "wrong": False}, done
    assert done["right"]

    # 3. the leaderboard (materialized from the UI if the backfill held it back) lists `wrong` as not ranked
    page.goto(f"{dev.url}/assets/leaderboard")
    if page.get_by_text("Never materialized").count():
        click_when_enabled(page.get_by_role("button", name="Materialize", exact=True).first)
        wait_for("the leaderboard run", lambda: [r for r in runs(dev.url) if r["status"] == "SUCCESS"
                                                 and not any(t["key"] == "dagster/partition" for t in r["tags"])])
        page.reload()
    meta = page.get_by_text(f"{SPLIT} x wrong: samples_accounted failed")
    meta.first.wait_for(timeout=30_000)
    assert page.get_by_text(f"{SPLIT} x right").count() == 0
