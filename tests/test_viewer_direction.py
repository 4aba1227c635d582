"""The viewer ranks and colours by each metric's direction (issue 20 item 4): a lower-is-better rate puts the clean
model first, a count reads as a count (no decimals, no CI), ties read as ties, compare marks the better model."""
import pytest
from starlette.testclient import TestClient

from test_direction import SPLIT, _judgements, _metrics

from evalpipe.viewer import charts, queries
from evalpipe.viewer.app import create_app

RATE = "tool_integration_control_contamination_rate"
COUNT = "tool_integration_controls_with_integration"


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(tmp_path_factory.mktemp("wh") / "warehouse.duckdb")
    m = _metrics()
    for model in ("clean", "dirty"):
        part = {"benchmark_split": SPLIT, "model": model}
        wh.write("judgements", _judgements(model, model == "dirty").assign(benchmark_split=SPLIT, model=model), part)
        wh.write("metrics", m[m["model"] == model], part)
    return wh


@pytest.fixture(scope="module")
def client(wh):
    return TestClient(create_app(wh), base_url="http://127.0.0.1:8585")


def _row(rows, metric, model):
    return next(r for r in rows if r["metric"] == metric and r["model"] == model)


def test_index_ranks_by_direction_and_marks_ties(client):
    rows = client.get("/index.json").json()["partitions"]
    clean, dirty = _row(rows, RATE, "clean"), _row(rows, RATE, "dirty")
    assert (clean["rank"], dirty["rank"], clean["higher_is_better"]) == (1, 2, False)
    assert _row(rows, "tool_integration", "clean")["rank"] == 1                  # higher is better there
    tie = _row(rows, "tool_integration_span_cap_exceeded", "clean")
    assert (tie["rank"], tie["tied"], tie["rank_label"]) == (1, True, "=1")
    html = client.get("/").text
    assert 'title="lower is better"' in html and ">=1<" in html


def test_index_shows_a_count_as_a_count(client):
    row = _row(client.get("/index.json").json()["partitions"], COUNT, "dirty")
    assert (row["kind"], row["value_text"]) == ("count", "1")
    html = client.get("/").text
    line = next(ln for ln in html.split("<tr") if COUNT in ln and "dirty" in ln)
    assert ">1<" in line and "1.000" not in line


def test_best_value_is_coloured_by_direction(client):
    html = client.get("/").text
    best = [ln for ln in html.split("<tr") if RATE in ln and 'class="num best"' in ln]
    assert len(best) == 1 and "clean" in best[0]


def test_compare_page_marks_the_better_model_by_direction(client):
    j = client.get("/compare.json", params={"split": SPLIT, "a": "dirty", "b": "clean", "metric": RATE}).json()
    assert (j["result"]["better"], j["result"]["higher_is_better"]) == ("clean", False)
    html = client.get("/compare", params={"split": SPLIT, "a": "dirty", "b": "clean", "metric": COUNT}).text
    assert "better: clean (lower is better)" in html


def test_charts_know_the_direction(wh, client):
    con = wh.connect()
    try:
        data = queries.heatmap(con)
        bars = queries.slice_bars(con, SPLIT, COUNT)
    finally:
        con.close()
    assert data["higher_is_better"] == [True] and data["kinds"] == ["score"]
    svg = charts.slice_bars_svg(bars, COUNT, higher_is_better=False, kind="count").decode()
    assert "lower is better" in svg and "95% CI" not in svg
    r = client.get("/chart/slices.svg", params={"split": SPLIT, "metric": RATE})
    assert r.status_code == 200 and b"lower is better" in r.content


def test_dagster_chart_markdown_reads_counts_as_counts():
    import pandas as pd

    from evalpipe.viewer.links import metrics_chart_md

    md = metrics_chart_md(pd.DataFrame([
        {"metric": COUNT, "slice": "all", "value": 1.0, "ci_low": float("nan"), "ci_high": float("nan")},
        {"metric": RATE, "slice": "all", "value": 0.25, "ci_low": 0.1, "ci_high": 0.5}]))
    assert f"| {COUNT} ↓ | all | 1 | |" in md      # no "1.000", no CI, no bar
    assert f"| {RATE} ↓ | all | 0.250 (0.10-0.50) | `" in md
