"""The viewer's web app through Starlette's TestClient: pages and JSON twins, filters, the Host check,
escaping of what a model wrote."""
import re

import pytest
from starlette.testclient import TestClient

from evalpipe.viewer.app import create_app
from evalpipe.viewer.demo import build

SPLIT = "gaia/validation"
EVIL = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    wh = build(tmp_path_factory.mktemp("wh") / "warehouse.duckdb", 60)
    part = {"benchmark_split": SPLIT, "model": "smollm2-135m"}
    roll = wh.read("rollouts", part)
    roll.loc[roll["sample_id"] == "task-000001", "raw_output"] = EVIL
    wh.write("rollouts", roll, part)
    j = wh.read("judgements", part)
    j.loc[j["sample_id"] == "task-000001", "prediction"] = EVIL
    wh.write("judgements", j, part)
    return TestClient(create_app(wh), base_url="http://127.0.0.1:8585")


def test_every_page_and_its_json_twin(client):
    for path in ("/", "/samples", "/compare", "/charts"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html"), path
        twin = "/index.json" if path == "/" else path + ".json"
        assert client.get(twin).headers["content-type"] == "application/json"
    assert client.get("/index.json").json()["partitions"][0]["benchmark_split"] == SPLIT


def test_sample_list_filters(client):
    data = client.get("/samples.json", params={"split": SPLIT, "model": "smollm2-135m", "outcome": "incorrect",
                                               "slice": "level=1"}).json()
    assert data["page"]["total"] > 0
    assert all(r["outcome"] == "incorrect" and r["slices"] == {"level": "1"} and r["model"] == "smollm2-135m"
               for r in data["page"]["rows"])
    html = client.get("/samples", params={"split": SPLIT, "outcome": "unscored"}).text
    assert 'class="badge unscored"' in html and 'class="badge correct"' not in html
    assert client.get("/samples.json", params={"q": "chemical symbol"}).json()["page"]["total"] > 0


def test_bad_filter_is_a_400_with_a_message(client):
    r = client.get("/samples", params={"outcome": "perhaps"})
    assert r.status_code == 400 and "outcome must be one of" in r.text
    assert client.get("/samples.json", params={"page": "x"}).json() == {"error": "page must be a whole number, got 'x'"}
    assert client.get("/sample", params={"split": SPLIT, "model": "m", "id": "nope"}).status_code == 404


def test_sample_page_shows_everything(client):
    html = client.get("/sample", params={"split": SPLIT, "model": "smollm2-135m", "id": "task-000005"}).text
    for text in ("Verdicts", "gaia", "includes", "length: the output was cut at max_tokens", "tokens in / out",
                 "cost (USD)", "latency (s)", "Prompt", "system", "Output"):
        assert text in html, text
    html = client.get("/sample", params={"split": SPLIT, "model": "smollm2-135m", "id": "task-000004"}).text
    assert "Transcript (4 message(s), 1 tool call(s))" in html and 'id="call-1"' in html


def _call_blocks(html: str) -> list[str]:
    return [part.split('<div class="msg')[0] for part in re.split(r'<div class="call(?: failed)?" id=', html)[1:]]


def test_a_tool_call_reads_as_a_call_not_as_json(client):
    """Issue 25: tool calls showed as raw escaped JSON; each is now a call: the tool, its arguments as a key/value
    table, the result (or error), fixture hit or miss, and its time."""
    html = client.get("/sample", params={"split": SPLIT, "model": "smollm2-135m", "id": "task-000008"}).text
    assert "Transcript (6 message(s), 2 tool call(s))" in html
    search, math_eval = _call_blocks(html)
    assert 'class="tool-name">web.search<' in search and "fixture miss" in search and "error: fixture_miss" in search
    assert "<th>query</th><td><code>What is the chemical symbol of gold?</code>" in search
    assert "<th>max_results</th><td><code>3</code>" in search and "0.4 ms" in search
    assert 'class="tool-name">math.eval<' in math_eval and "fixture hit" in math_eval and "2.0 ms" in math_eval
    assert "<th>expression</th><td><code>6*7</code>" in math_eval and "<th>value</th><td><code>42</code>" in math_eval
    assert "error:" not in math_eval
    # no escaped JSON of the calls anywhere on the page, and the tool messages are not repeated as messages
    assert "&#34;expression&#34;" not in html and "tool_call_id" not in html and 'class="msg tool"' not in html
    data = client.get("/sample.json", params={"split": SPLIT, "model": "smollm2-135m", "id": "task-000008"}).json()
    calls = [e for e in data["transcript"] if e["kind"] == "call"]
    assert [(c["name"], c["fixture"], c["error"]) for c in calls] == [("web.search", "miss", "fixture_miss"),
                                                                      ("math.eval", "hit", None)]


def test_search_covers_the_question(client):
    """Issue 25: "factorial" found nothing on factorial questions; the prompt text is searched too."""
    data = client.get("/samples.json", params={"split": SPLIT, "q": "primary colours", "page_size": 200}).json()
    assert data["page"]["total"] == 30  # every 4th of 60 samples x 2 models asks for the primary colours
    assert {int(r["sample_id"][-6:]) % 4 for r in data["page"]["rows"]} == {2}


def test_sample_list_has_turns_and_tool_call_columns(client):
    data = client.get("/samples.json", params={"split": SPLIT, "model": "smollm2-135m", "q": "task-000008"}).json()
    (row,) = data["page"]["rows"]
    assert (row["turns"], row["tool_calls"], row["fixture_misses"], row["stop_reason"]) == (3, 2, 1, "final")
    html = client.get("/samples", params={"split": SPLIT, "model": "smollm2-135m", "q": "task-000008"}).text
    assert '<th class="num">turns</th><th class="num">tool calls</th>' in html
    assert '<td class="num turns">3</td>' in html and "1 miss" in html
    top = client.get("/samples.json", params={"split": SPLIT, "sort": "tool_calls", "page_size": 1}).json()
    assert top["page"]["rows"][0]["tool_calls"] == 2


@pytest.mark.parametrize("params, expected", [
    ({"tool": "web.search"}, {8, 20, 32, 44, 56}), ({"fixture_miss": "1"}, {8, 20, 32, 44, 56}),
    ({"stop": "max_turns"}, {20, 44}), ({"tool": "math.eval"}, set(range(0, 60, 4))),
    ({"tool": "math.eval", "stop": "final"}, set(range(0, 60, 4)) - {20, 44})])
def test_filter_by_tool_fixture_miss_and_stop_reason(client, params, expected):
    data = client.get("/samples.json", params={"split": SPLIT, "page_size": 200, **params}).json()
    rows = data["page"]["rows"]
    assert {int(r["sample_id"][-6:]) for r in rows} == expected and len(rows) == 2 * len(expected)
    html = client.get("/samples", params={"split": SPLIT, **params}).text
    assert f"{len(rows)} sample(s)" in html


def test_a_link_to_the_samples_that_failed_a_gate(client):
    """Issue 25: a failed gate's metadata links to the sample list narrowed to the samples that failed it."""
    from urllib.parse import urlsplit

    from evalpipe.viewer.links import viewer_url

    url = viewer_url(SPLIT, "smollm2-135m", sample_ids=["task-000008", "task-000020"], fixture_miss="1")
    data = client.get("/samples.json?" + urlsplit(url).query).json()
    assert [r["sample_id"] for r in data["page"]["rows"]] == ["task-000008", "task-000020"]
    assert data["filters"]["ids"] == "task-000008,task-000020"  # kept by the pager's links
    assert "Only the sample(s) the link named (2)" in client.get("/samples?" + urlsplit(url).query).text
    r = client.get("/samples.json", params={"split": SPLIT, "ids": ",".join(f"s{i}" for i in range(1001))})
    assert r.status_code == 400 and "at most 1000" in r.json()["error"]


def test_tool_and_stop_filters_refuse_unknown_values(client):
    r = client.get("/samples.json", params={"split": SPLIT, "tool": "nope"})
    assert r.status_code == 400 and r.json()["error"] == f"unknown tool 'nope' on {SPLIT}; called: math.eval, web.search"
    r = client.get("/samples", params={"split": SPLIT, "stop": "bored"})
    assert r.status_code == 400 and "unknown stop reason" in r.text


def test_model_text_is_escaped(client):
    for url, params in (("/sample", {"split": SPLIT, "model": "smollm2-135m", "id": "task-000001"}),
                        ("/samples", {"split": SPLIT, "model": "smollm2-135m"})):
        html = client.get(url, params=params).text
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(" in html
    r = client.get("/")
    assert "script-src 'none'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"


def test_wrong_host_is_refused(client):
    evil = TestClient(client.app, base_url="http://attacker.example:8585")
    r = evil.get("/samples.json")
    assert r.status_code == 400 and "samples" not in r.text
    assert TestClient(client.app, base_url="http://localhost:8585").get("/").status_code == 200


def test_compare_page(client):
    r = client.get("/compare", params={"split": SPLIT, "a": "smollm2-135m", "b": "gpt-4o-mini"})
    assert "McNemar (exact) p" in r.text and 'id="only-b-list"' in r.text
    j = client.get("/compare.json", params={"split": SPLIT, "a": "smollm2-135m", "b": "gpt-4o-mini"}).json()
    assert j["result"]["only_b"] > j["result"]["only_a"] and 0 <= j["result"]["mcnemar_p"] <= 1
    assert client.get("/compare", params={"split": SPLIT, "a": "x", "b": "y"}).status_code == 400


def test_charts_are_svg_images(client):
    for path in ("/chart/heatmap.svg", f"/chart/slices.svg?split={SPLIT}", f"/chart/cost.svg?split={SPLIT}&metric=includes"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml" and b"<svg" in r.content
    assert client.get("/chart/slices.svg").status_code == 400  # split is required


def test_an_empty_warehouse_says_what_to_do(tmp_path):
    from evalpipe.store.warehouse import Warehouse

    c = TestClient(create_app(Warehouse(tmp_path / "warehouse.duckdb")), base_url="http://127.0.0.1")
    for path in ("/", "/samples", "/compare", "/charts"):
        r = c.get(path)
        assert r.status_code == 200, path
    assert "evalpipe run" in c.get("/").text and "evalpipe run" in c.get("/samples").text
    assert c.get("/chart/heatmap.svg").status_code == 200


@pytest.mark.parametrize("params", [{"page": str(10 ** 25)}, {"page": "-1"}, {"page": "0"}, {"page": "1.5"},
                                    {"page": "99"}, {"page_size": str(10 ** 25)}, {"page_size": "0"},
                                    {"page_size": "-5"}, {"page_size": "201"}, {"page_size": "1e3"},
                                    {"page": "1" * 400}])
def test_out_of_range_pages_and_sizes_are_a_400_with_one_line(client, params):
    """Issue 20 item 10: page 10^25 was a 500 (DuckDB's OFFSET overflowed); a size above the cap was silently
    clamped and page 99 of 3 an empty page that read like no samples."""
    r = client.get("/samples.json", params={"split": SPLIT, **params})
    assert r.status_code == 400, (params, r.status_code)
    msg = r.json()["error"]
    assert "\n" not in msg and len(msg) < 200 and ("page" in msg), msg
    html = client.get("/samples", params={"split": SPLIT, **params})
    assert html.status_code == 400 and "page" in html.text


def test_in_range_pages_still_work(client):
    data = client.get("/samples.json", params={"split": SPLIT, "page": "2", "page_size": "100"}).json()
    assert data["page"]["page"] == 2 and data["page"]["page_size"] == 100 and data["page"]["rows"]
    assert client.get("/samples.json", params={"split": SPLIT, "page": " 1 "}).status_code == 200


# ---- try runs (issue 25, "A clean model dimension") --------------------------------------------------------------
TRY_KEYS = ("adhoc:echo", "echo@limit5", "echo@exp1")


@pytest.fixture(scope="module")
def tries_client(tmp_path_factory):
    wh = build(tmp_path_factory.mktemp("wh") / "warehouse.duckdb", 12, models=("echo", "smollm2-135m", *TRY_KEYS))
    return TestClient(create_app(wh), base_url="http://127.0.0.1:8585")


def test_bare_compare_opens_on_two_real_models(tries_client):
    """A bare /compare opened on `adhoc:echo` vs `echo`."""
    data = tries_client.get("/compare.json").json()
    assert (data["a"], data["b"]) == ("echo", "smollm2-135m") and data["result"]["n_paired"] > 0
    assert data["models"] == ["echo", "smollm2-135m"] and data["hidden_try_models"] == 3
    asked = tries_client.get("/compare.json", params={"tries": "1"}).json()
    assert set(asked["models"]) == {"echo", "smollm2-135m", *TRY_KEYS}
    chosen = tries_client.get("/compare.json", params={"split": SPLIT, "a": "adhoc:echo", "b": "echo"}).json()
    assert chosen["result"]["model_a"] == "adhoc:echo" and "adhoc:echo" in chosen["models"]
    assert 'tick "try runs" to pick them' in tries_client.get("/compare").text


def test_pickers_and_runs_leave_try_runs_out_unless_asked(tries_client):
    index = tries_client.get("/index.json").json()
    assert {r["model"] for r in index["partitions"]} == {"echo", "smollm2-135m"} and index["hidden_try_models"] == 3
    for flag in ("tries", "limited"):  # `limited=1`, the old name, still works
        assert {r["model"] for r in tries_client.get("/index.json", params={flag: "1"}).json()["partitions"]} \
            == {"echo", "smollm2-135m", *TRY_KEYS}
    assert 'id="show-tries"' in tries_client.get("/").text
    samples = tries_client.get("/samples.json", params={"page_size": 200}).json()
    assert samples["models"] == ["echo", "smollm2-135m"] and samples["page"]["total"] == 2 * 12
    assert {r["model"] for r in samples["page"]["rows"]} == {"echo", "smollm2-135m"}
    assert tries_client.get("/samples.json", params={"tries": "1", "page_size": 200}).json()["page"]["total"] == 5 * 12
    one = tries_client.get("/samples.json", params={"model": "echo@limit5"}).json()  # asked by name: shown
    assert one["page"]["total"] == 12 and "echo@limit5" in one["models"]
    assert 'name="tries" value="1" checked' in tries_client.get("/samples", params={"tries": "1"}).text
    assert 'tick "try runs" to show them' in tries_client.get("/samples").text


def test_charts_leave_try_runs_out_unless_asked(tries_client):
    charts = tries_client.get("/charts.json").json()
    assert charts["heatmap"]["models"] == ["echo", "smollm2-135m"]
    assert {r["model"] for r in charts["slices"]} == {r["model"] for r in charts["cost"]} == {"echo", "smollm2-135m"}
    assert set(tries_client.get("/charts.json", params={"tries": "1"}).json()["heatmap"]["models"]) \
        == {"echo", "smollm2-135m", *TRY_KEYS}
    for path in ("/chart/heatmap.svg", f"/chart/slices.svg?split={SPLIT}", f"/chart/cost.svg?split={SPLIT}"):
        assert b"adhoc:echo" not in tries_client.get(path).content, path
        sep = "&" if "?" in path else "?"
        assert b"adhoc:echo" in tries_client.get(path + sep + "tries=1").content, path


def test_try_runs_are_shown_when_they_are_all_there_is(tmp_path):
    """A first `evalpipe run --limit 5` must not read as an empty warehouse."""
    c = TestClient(create_app(build(tmp_path / "warehouse.duckdb", 8, models=("echo@limit5", "adhoc:x"))),
                   base_url="http://127.0.0.1")
    assert {r["model"] for r in c.get("/index.json").json()["partitions"]} == {"echo@limit5", "adhoc:x"}
    assert c.get("/compare.json").json()["a"] == "adhoc:x"
