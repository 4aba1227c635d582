"""The viewer in a real browser: headless Chromium (Debian package `chromium`, installed by .ci/run) driven by
Playwright against `evalpipe view --web` started on a free port. Set EVALPIPE_SCREENSHOTS=docs/img to refresh
the screenshots in docs/viewer.md."""
import os
from pathlib import Path

import pytest

from tests.helpers.browser import browser_page, need_browser
from tests.helpers.viewer_server import viewer_server

SPLIT = "gaia/validation"

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    need_browser()
    from evalpipe.viewer.demo import build

    db = tmp_path_factory.mktemp("wh") / "warehouse.duckdb"
    build(db, 60)
    with viewer_server({"EVALS_WAREHOUSE": str(db)}) as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    with browser_page() as pg:
        yield pg


def _shot(page, name: str) -> None:
    folder = os.environ.get("EVALPIPE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / name), full_page=False)


def test_runs_page_lists_partitions_and_the_heatmap(page, server):
    page.goto(server + "/")
    rows = page.locator("#partitions tbody tr")
    assert rows.count() == 4
    assert "smollm2-135m" in page.locator("#partitions").inner_text()
    img = page.locator("img.chart")
    assert img.evaluate("i => i.complete && i.naturalWidth > 0")


def test_filter_the_sample_list(page, server):
    page.goto(server + "/samples")
    assert "120 sample(s)" in page.locator("#count").inner_text()
    page.select_option("select[name=model]", "smollm2-135m")
    page.select_option("select[name=outcome]", "incorrect")
    page.select_option("select[name=slice]", "level=1")
    page.click("#apply")
    page.wait_for_load_state()
    assert "outcome=incorrect" in page.url
    badges = page.locator("#samples tbody .badge.incorrect")
    n = badges.count()
    assert n > 0 and n == page.locator("#samples tbody tr").count()
    assert f"{n} sample(s)" in page.locator("#count").inner_text()
    page.fill("input[name=q]", "chemical symbol")
    page.select_option("select[name=outcome]", "")
    page.select_option("select[name=slice]", "")
    page.click("#apply")
    page.wait_for_load_state()
    assert all("gold is Au" in t or "Ag" in t or "Au" in t
               for t in page.locator("#samples tbody td.text:nth-child(6)").all_inner_texts())
    page.goto(server + "/samples?" + "model=smollm2-135m&split=" + SPLIT)
    _shot(page, "viewer-samples.png")


def test_open_a_sample(page, server):
    page.goto(server + f"/samples?split={SPLIT}&model=smollm2-135m&q=task-000005")
    page.click("a.sample-link")
    page.wait_for_load_state()
    assert page.locator("#sample-id").inner_text() == "task-000005"
    assert "cut at max_tokens" in page.locator("#finish").inner_text()
    assert page.locator("#verdicts tbody tr").count() == 2
    assert page.locator(".msg.system").count() >= 1 and page.locator("#output").inner_text()
    page.goto(server + f"/sample?split={SPLIT}&model=smollm2-135m&id=task-000004")
    assert page.locator("#transcript .call").count() == 1
    assert "math.eval" in page.locator("#call-1 .tool-name").inner_text()
    _shot(page, "viewer-sample.png")


def test_find_tool_calls_that_missed_their_fixture(page, server):
    """Issue 25: filter the list by tool and fixture miss, then read the calls of one sample as calls."""
    page.goto(server + f"/samples?split={SPLIT}&model=smollm2-135m")
    page.select_option("select[name=tool]", "web.search")
    page.check("input[name=fixture_miss]")
    page.click("#apply")
    page.wait_for_load_state()
    assert "tool=web.search" in page.url and "fixture_miss=1" in page.url
    rows = page.locator("#samples tbody tr")
    assert rows.count() == 5 and "5 sample(s)" in page.locator("#count").inner_text()
    assert all(t == "2 1 miss" for t in page.locator("#samples tbody td.calls").all_inner_texts())
    page.locator("a.sample-link").first.click()
    page.wait_for_load_state()
    first, second = page.locator("#call-1"), page.locator("#call-2")
    assert first.locator(".tool-name").inner_text() == "web.search" and "fixture miss" in first.inner_text()
    assert first.locator("table.args th").all_inner_texts() == ["query", "max_results"]
    assert "fixture hit" in second.inner_text() and second.locator("table.result td").first.inner_text() == "true"
    page.locator("h2", has_text="Transcript").scroll_into_view_if_needed()
    page.evaluate("() => window.scrollBy(0, document.querySelector('#transcript').getBoundingClientRect().top - 60)")
    _shot(page, "viewer-transcript.png")


def test_compare_two_models(page, server):
    page.goto(server + "/compare")
    page.select_option("select[name=a]", "smollm2-135m")
    page.select_option("select[name=b]", "gpt-4o-mini")
    page.click("#compare-apply")
    page.wait_for_load_state()
    only_b = int(page.locator("#only-b").inner_text())
    assert only_b > 0 and page.locator("#only-b-list tbody tr").count() == only_b
    assert "McNemar" in page.locator("#summary").inner_text()
    _shot(page, "viewer-compare.png")


def test_charts_load(page, server):
    page.goto(server + "/charts")
    for sel in ("#heatmap", "#slices", "#cost"):
        assert page.locator(sel).evaluate("i => i.complete && i.naturalWidth > 0"), sel
    _shot(page, "viewer-charts.png")
    assert not page.errors, page.errors  # no console errors (e.g. CSP violations) on any page
