"""Reviews beyond the viewer's pages: calibration and the Bradley-Terry ranking as warehouse rows (the `reviews`
asset) that the runs page shows, the pairwise judge from the CLI (`evalpipe pairwise`) and the pipeline (the
`pairwise` asset), reservations that survive a restart of the viewer, `evalpipe forget` and reviews, and the rubric
summary."""
import re

import pytest

from evalpipe.metrics.reviews import new_review_id, write_reviews
from evalpipe.viewer.reviews import ReviewSettings
from tests.helpers.cli import cli_in_process
from tests.helpers.pair_judge import pair_judge_server

SPLIT = "gaia/validation"
A, B = "gpt-4o-mini", "smollm2-135m"
ORIGIN = {"origin": "http://127.0.0.1"}


@pytest.fixture
def wh(tmp_path):
    from evalpipe.viewer.demo import build

    return build(tmp_path / "warehouse.duckdb", 12, with_judge=True)


def _client(wh, **settings):
    from starlette.testclient import TestClient

    from evalpipe.viewer.app import create_app

    return TestClient(create_app(wh, reviews=ReviewSettings(**settings)), base_url="http://127.0.0.1")


def _login(c, name):
    token = re.search(r'name="csrf" value="([^"]+)"', c.get("/whoami").text).group(1)
    c.post("/whoami", data={"csrf": token, "name": name, "next": "/"}, headers=ORIGIN, follow_redirects=False)
    return token


def _pref(p, i, model=A, model_b=B, source="judge", reviewer="judge-x", split=SPLIT):
    return {"review_id": new_review_id(), "benchmark_split": split, "reviewer": reviewer, "source": source,
            "created_at": f"2026-01-01T00:00:{i:02d}", "kind": "pairwise", "sample_id": f"task-{i:06d}",
            "model": model, "model_b": model_b, "preference": p}


def _verdict(verdict, sid="task-000001", model=A, reviewer="ann", rubric=None):
    import json

    return {"review_id": new_review_id(), "benchmark_split": SPLIT, "reviewer": reviewer, "source": "person",
            "created_at": "2026-01-01T00:00:00", "kind": "verdict", "sample_id": sid, "model": model,
            "verdict": verdict, "rubric": json.dumps(rubric) if rubric else None}


def _materialize(wh, *assets, **resources):
    from dagster import materialize

    from resources import WarehouseResource

    return materialize(list(assets), resources={"warehouse": WarehouseResource(path=str(wh.duckdb_path)), **resources})


def test_the_reviews_asset_writes_calibration_and_ranking_rows_that_the_runs_page_shows(wh):
    from eval_assets.reviews import reviews as reviews_asset

    write_reviews(wh, [_verdict("right", f"task-{i:06d}") for i in range(1, 6)]
                  + [_pref(p, i) for i, p in enumerate("aab")])
    _materialize(wh, reviews_asset)
    cal = wh.read_table("review_metrics")
    assert set(cal["metric"]) == {"llm_judge_human_agreement", "llm_judge_human_kappa"}
    row = cal[(cal.metric == "llm_judge_human_agreement") & (cal.judge == "judge-mini")].iloc[0]
    assert (row.benchmark_split, row.model, row.n) == (SPLIT, A, 5) and 0 <= row.value <= 1
    assert row.ci_low <= row.value <= row.ci_high and row.slice.startswith("judge=judge-mini,fingerprint=")
    # the same numbers as the calibration page, which computes them from the reviews directly
    page = _client(wh).get(f"/calibration.json?split={SPLIT}").json()["rows"]
    assert row.value == pytest.approx(next(r["accuracy"] for r in page if r["judge"] == "judge-mini"))
    rank = wh.read_table("review_ranking")
    both = rank[rank.source == "all"].sort_values("rank")
    assert list(both.model) == [A, B] and both.strength.iloc[0] == pytest.approx(0.34657359, abs=1e-7)
    assert set(rank.source) == {"all", "judge"} and (rank.n == 3).all()
    c = _client(wh)
    j = c.get("/index.json").json()
    assert [(r["benchmark_split"], r["model"], r["rank"]) for r in j["pairwise"]] == [(SPLIT, A, 1), (SPLIT, B, 2)]
    html = c.get("/").text
    assert "Bradley-Terry" in html and 'id="pairwise-ranking"' in html and "/chart/ranking.svg?" in html
    assert c.get(f"/chart/ranking.svg?split={SPLIT}&stored=1").status_code == 200


def test_a_refused_ranking_is_stored_as_refused_never_as_a_number(wh):
    from eval_assets.reviews import reviews as reviews_asset

    write_reviews(wh, [_pref("a", i) for i in range(2)])  # B never won: no finite fit
    _materialize(wh, reviews_asset)
    rank = wh.read_table("review_ranking")
    assert rank.strength.isna().all() and rank.note.str.contains("no finite Bradley-Terry fit").all()
    assert "no finite Bradley-Terry fit" in _client(wh).get("/").text


def test_reservations_survive_a_restart_of_the_viewer(wh):
    c1 = _client(wh)
    _login(c1, "ann")
    first = c1.get("/review/next", follow_redirects=False).headers["location"]
    c2 = _client(wh)  # a new app over the same warehouse: a restarted viewer
    _login(c2, "bob")
    assert c2.get("/review/next", follow_redirects=False).headers["location"] != first  # ann's item is still held
    # a blind pair opened before the restart can still be answered after it
    c3 = _client(wh)
    token = _login(c3, "cid")
    item = re.search(r'name="item" value="([^"]+)"', c3.get(f"/pairwise?split={SPLIT}").text).group(1)
    c4 = _client(wh)
    c4.cookies.update(c3.cookies)
    r = c4.post("/pairwise", data={"csrf": token, "item": item, "choice": "tie"}, headers=ORIGIN,
                follow_redirects=False)
    assert r.status_code == 303, r.text
    assert [x["preference"] for x in c4.get("/reviews.json").json()["reviews"]] == ["tie"]


def test_rubric_scores_are_summarised_per_rubric_item(wh):
    write_reviews(wh, [_verdict("right", rubric={"clarity": 3, "tone": "ok"}),
                       _verdict("wrong", rubric={"clarity": 1}, reviewer="bob"),
                       _verdict("right", sid="task-000002", rubric={"clarity": 2}),
                       _verdict("right", rubric={"clarity": 2}),  # ann again: her latest counts
                       _verdict("right", model=B, rubric={"clarity": 1})])
    c = _client(wh, rubric={"clarity": [1, 2, 3], "tone": ["ok", "rude"]})
    rows = c.get(f"/rubric.json?split={SPLIT}").json()["rows"]
    got = {(r["model"], r["criterion"]): r for r in rows}
    clarity = got[(A, "clarity")]
    assert clarity["n"] == 3 and clarity["mean"] == pytest.approx(5 / 3) and clarity["counts"] == {"1": 1, "2": 2,
                                                                                                     "3": 0}
    assert got[(A, "tone")]["mean"] is None and got[(A, "tone")]["counts"] == {"ok": 0, "rude": 0}  # ann's latest
    assert got[(B, "clarity")]["n"] == 1
    assert "clarity" in c.get(f"/rubric?split={SPLIT}").text


def test_forget_removes_the_models_reviews_and_its_stale_ranking(wh, tmp_path):
    from eval_assets.reviews import reviews as reviews_asset
    from evalpipe.store.forget import forget, plan_forget

    write_reviews(wh, [_verdict("right"), _verdict("wrong", model=B)] + [_pref(p, i) for i, p in enumerate("aab")]
                  + [_pref("a", 9, model=B, model_b="third"), _pref("b", 10, model=B, model_b="third")])
    _materialize(wh, reviews_asset)
    plans = plan_forget(["third"], home=tmp_path / "h", warehouse=wh, artifacts_root=tmp_path / "a", instance=None)
    assert plans[0].rows["reviews"] == 2 and plans[0].rows["review_ranking"] == 6  # the split's fit, both sources
    assert any("reviews" in line for line in plans[0].describe())
    forget(plans, warehouse=wh, instance=None)
    left = wh.read_table("reviews")
    assert len(left) == 5 and "third" not in set(left.model) | set(left.model_b.dropna())
    assert wh.read_table("review_ranking").empty  # refit at the next materialization, never left stale
    plans = plan_forget([A], home=tmp_path / "h", warehouse=wh, artifacts_root=tmp_path / "a", instance=None)
    assert plans[0].rows["reviews"] == 4 and plans[0].rows["review_metrics"] >= 2


@pytest.fixture
def project(home, monkeypatch, tmp_path):
    from evalpipe.runners import list_runners
    from evalpipe.viewer.demo import build

    if "litellm" not in list_runners():
        pytest.skip("the litellm runner is not registered")
    build(home / "warehouse.duckdb", 6, with_judge=True)
    with pair_judge_server() as (judge, mock):
        import yaml

        cfg = tmp_path / "evals.yaml"
        cfg.write_text(yaml.safe_dump({"judges": {"pj": judge},
                                       "pairwise": {"split": SPLIT, "models": [A, B], "judge": "pj"}}))
        monkeypatch.setenv("EVALS_CONFIG", str(cfg))
        yield home, mock


def test_evalpipe_pairwise_judges_both_orders_and_appends_the_preferences(project, monkeypatch):
    from evalpipe.store.warehouse import Warehouse

    home, mock = project
    invoke = cli_in_process(monkeypatch)
    r = invoke("pairwise", "--split", SPLIT, "--models", A, B, "--limit", "4")
    assert r.exit_code == 0, r.output
    # both orders of each pair (identical prompts, where both models gave the same answer, are sent once)
    assert 4 < len(mock.bodies) <= 8 and "4 pair(s)" in r.output and f"{len(mock.bodies)} judge call(s)" in r.output
    rows = Warehouse(home / "warehouse.duckdb").read_table("reviews")
    assert len(rows) == 4 and set(rows.source) == {"judge"} and set(rows.reviewer) == {"pj"}
    r = invoke("pairwise")  # the config's pairwise: section; the pairs judged already are skipped
    assert r.exit_code == 0, r.output
    assert len(Warehouse(home / "warehouse.duckdb").read_table("reviews")) == 6 and "skipped 4" in r.output
    before = len(mock.bodies)
    r = invoke("pairwise", "--models", A, "nobody")
    assert r.exit_code == 2 and "nobody" in r.output and len(mock.bodies) == before  # refused before any call
    r = invoke("pairwise", "--split", SPLIT, "--models", A, B, "--judge", "unknown-judge")
    assert r.exit_code == 2 and "unknown judge" in r.output and len(mock.bodies) == before


def test_the_pairwise_asset_runs_the_configured_judge(project):
    from eval_assets.reviews import pairwise as pairwise_asset
    from evalpipe.project import Project
    from evalpipe.store.warehouse import Warehouse
    from resources import EvalConfigResource

    home, mock = project
    wh = Warehouse(home / "warehouse.duckdb")
    res = _materialize(wh, pairwise_asset, eval_config=EvalConfigResource(project=Project.from_file()))
    meta = res.asset_materializations_for_node("pairwise")[0].metadata
    assert meta["judged"].value == 6 and meta["judge_calls"].value == len(mock.bodies) > 6
    assert len(wh.read_table("reviews")) == 6


def test_the_pairwise_section_is_checked_before_any_call(tmp_path):
    from evalpipe.core.errors import ConfigError
    from evalpipe.metrics.pairwise import PairwiseRequest
    from evalpipe.project.loader import config_from_dict

    cfg = config_from_dict({"pairwise": {"split": SPLIT, "models": [A, B, "third"], "judge": "pj", "limit": 5}},
                           tmp_path)
    req = PairwiseRequest.from_config(cfg.raw["pairwise"])
    assert req.pairs() == [(A, B), (A, "third"), (B, "third")] and req.limit == 5
    assert PairwiseRequest.from_config(cfg.raw["pairwise"], models=[B, A], limit=2).pairs() == [(B, A)]
    with pytest.raises(ConfigError, match="limit"):
        config_from_dict({"pairwise": {"limit": 0}}, tmp_path)
    with pytest.raises(ConfigError, match="two different models"):
        PairwiseRequest.from_config({"split": SPLIT, "models": [A, A], "judge": "pj"})
    with pytest.raises(ConfigError, match="answer_1"):
        PairwiseRequest.from_config({"split": SPLIT, "models": [A, B], "judge": "pj", "prompt": "{answer_1} only"})
