"""Issue 35 done-when, in headless Chromium (Debian `chromium` + Playwright) against `evalpipe view --web`: a review
and a pairwise preference are recorded from the pages' own forms, reloaded, counted in the calibration and in the
Bradley-Terry table, and exported with the run folder (`evalpipe export`)."""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.browser import browser_page, need_browser
from tests.helpers.viewer_server import REPO, viewer_server

SPLIT = "gaia/validation"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    need_browser()
    from evalpipe.metrics.reviews import new_review_id, write_reviews
    from evalpipe.viewer.demo import build

    root = tmp_path_factory.mktemp("reviews")
    wh = build(root / "warehouse.duckdb", 12, with_judge=True)
    # a judge's two preferences (one each way), so the people's one lands in a ranking that has a finite fit
    write_reviews(wh, [{"review_id": new_review_id(), "benchmark_split": SPLIT, "reviewer": "judge-x",
                        "source": "judge", "created_at": "2026-01-01T00:00:00", "kind": "pairwise",
                        "sample_id": f"task-00000{i}", "model": "gpt-4o-mini", "model_b": "smollm2-135m",
                        "preference": p} for i, p in ((1, "a"), (2, "b"))])
    config = root / "evals.yaml"
    config.write_text("reviews:\n  rubric: {clarity: 3}\n  bootstrap: 50\n")
    env = {"EVALS_WAREHOUSE": str(wh.duckdb_path), "EVALS_CONFIG": str(config), "DAGSTER_HOME": str(root / "home")}
    with viewer_server(env) as url:
        yield url, env, root


@pytest.fixture(scope="module")
def page(served):
    with browser_page() as pg:
        yield pg


def test_review_and_preference_recorded_reloaded_counted_and_exported(page, served):
    url, env, root = served
    # asked once who is reviewing, then back where we were going
    page.goto(url + f"/sample?split={SPLIT}&model=gpt-4o-mini&id=task-000001")
    page.click("#review-link")
    page.wait_for_load_state()
    assert "/whoami" in page.url
    page.fill("#name", "ann")
    page.click("#save-name")
    page.wait_for_load_state()
    assert "/review?" in page.url, page.locator("main").inner_text()
    assert page.locator("#reviewer").inner_text() == "ann"
    page.check("#verdict-wrong")
    page.select_option("#rubric-1", "2")
    page.fill("#comment", "the answer is off")
    page.click("#record")
    page.wait_for_load_state()
    assert "Recorded" in page.locator("#saved").inner_text()
    page.reload()
    history = page.locator("#history tbody tr")
    assert history.count() == 1
    assert "the answer is off" in history.first.inner_text() and "clarity=2" in history.first.inner_text()
    assert history.first.locator(".verdict").inner_text() == "wrong"

    # counted in the calibration: the judge said correct, ann says wrong
    page.goto(url + "/calibration")
    row = page.locator("#calibration tbody tr")
    assert row.count() == 1 and "judge-mini" in row.first.inner_text()
    assert row.first.locator(".n").inner_text() == "1" and row.first.locator(".agreement").inner_text() == "0.000"

    # a blind pairwise preference
    page.goto(url + f"/pairwise?split={SPLIT}")
    main = page.locator("main").inner_text()
    assert "gpt-4o-mini" not in main and "smollm2-135m" not in main
    left = page.locator("#left-answer").inner_text()
    page.click("#prefer-left")
    page.wait_for_load_state()
    assert "Recorded" in page.locator("#saved").inner_text()

    # reloaded from the warehouse and counted in the Bradley-Terry table (the judge's 2 + ann's 1)
    page.goto(url + "/reviews")
    kinds = page.locator("#reviews tbody tr").all_inner_texts()
    assert len(kinds) == 4 and sum("ann" in k for k in kinds) == 2
    page.goto(url + f"/ranking?split={SPLIT}")
    ranks = page.locator("#ranking tbody tr")
    assert ranks.count() == 2 and [ranks.nth(i).locator(".comparisons").inner_text() for i in range(2)] == ["3", "3"]
    winner = ranks.first.locator(".model").inner_text()
    stored = [r for r in json.loads(page.context.request.get(url + "/reviews.json").text())["reviews"]
              if r["reviewer"] == "ann" and r["kind"] == "pairwise"][0]
    chosen = stored["shown_left"]
    assert winner == chosen  # 2 wins of 3 for the model ann preferred (shown on the left)
    assert page.locator("#ranking-chart").evaluate("i => i.complete && i.naturalWidth > 0")
    assert left  # the answer was shown

    # through Dagster into the warehouse's review_ranking, shown on the runs page beside the accuracy leaderboard
    from dagster import materialize

    from eval_assets.reviews import reviews as reviews_asset
    from resources import WarehouseResource

    assert materialize([reviews_asset], resources={"warehouse": WarehouseResource(
        path=env["EVALS_WAREHOUSE"])}).success
    page.goto(url + "/")
    board = page.locator("#pairwise-ranking tbody tr")
    assert board.count() == 2 and board.first.locator(".model").inner_text() == winner
    assert page.locator("img[alt^='pairwise ranking']").evaluate("i => i.complete && i.naturalWidth > 0")
    assert page.errors == []

    # exported with the run folder
    out = root / "export"
    x = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "export", "--split", SPLIT, "--model", "gpt-4o-mini",
                        "--out", str(out)], cwd=REPO, env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=120)
    assert x.returncode == 0, x.stdout + x.stderr
    exported = [json.loads(line) for line in (out / "reviews.jsonl").read_text().splitlines()]
    assert [(e["reviewer"], e["kind"]) for e in exported if e["reviewer"] == "ann"] == [("ann", "verdict"),
                                                                                       ("ann", "pairwise")]
    assert len(exported) == 4
