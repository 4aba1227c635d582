"""Reviews in the viewer, through the app (Starlette's TestClient): the reviewer asked once or read from a
configured header, cross-site writes refused, history kept (append-only), the blind pairwise queue, items held for
N reviewers, and the reviews in the run folder, the `reviews` asset and the config."""
import re

import pytest

from evalpipe.viewer.reviews import ReviewSettings

SPLIT = "gaia/validation"
ORIGIN = {"origin": "http://127.0.0.1"}


@pytest.fixture
def wh(tmp_path):
    from evalpipe.viewer.demo import build

    return build(tmp_path / "warehouse.duckdb", 12, with_judge=True)


def client(wh, **settings):
    from starlette.testclient import TestClient

    from evalpipe.viewer.app import create_app

    return TestClient(create_app(wh, reviews=ReviewSettings(**settings)), base_url="http://127.0.0.1")


def csrf(page) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)


def login(c, name="ann") -> str:
    r = c.get("/whoami")
    token = csrf(r)
    r = c.post("/whoami", data={"csrf": token, "name": name, "next": "/reviews"}, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/reviews"
    return token


def review(c, token, model="gpt-4o-mini", sid="task-000001", **form):
    return c.post("/review", data={"csrf": token, "split": SPLIT, "model": model, "id": sid, **form}, headers=ORIGIN,
                  follow_redirects=False)


def test_the_reviewer_is_asked_once_and_a_review_is_stored_with_its_history(wh):
    c = client(wh, rubric={"clarity": [1, 2, 3]})
    r = c.get("/review/next", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/whoami?next=")
    token = login(c)
    r = c.get("/review/next", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/review?")
    assert review(c, token, verdict="wrong", rubric_clarity="2", comment="first").status_code == 303
    assert review(c, token, verdict="right", comment="second thoughts").status_code == 303
    page = c.get(f"/review?split={SPLIT}&model=gpt-4o-mini&id=task-000001")
    assert "first" in page.text and "second thoughts" in page.text and "ann" in page.text
    rows = c.get("/reviews.json").json()["reviews"]
    assert [(x["verdict"], x["rubric"], x["reviewer"], x["source"]) for x in rows] == [
        ("wrong", {"clarity": 2}, "ann", "person"), ("right", None, "ann", "person")]
    assert len(wh.partitions("reviews")) == 2  # one file per review: nothing overwritten
    # the latest verdict counts in the calibration: the judge said correct (lenient), ann says right now
    cal = c.get("/calibration.json").json()
    assert [(x["metric"], x["judge"], x["n"], x["confusion"]) for x in cal["rows"]] == [
        ("llm_judge", "judge-mini", 1, [[1, 0], [0, 0]])]
    for bad in ({"verdict": "maybe"}, {"rubric_clarity": "9"}, {}):
        r = review(c, token, **bad)
        assert r.status_code == 400


def test_writes_from_another_site_or_without_the_token_are_refused(wh):
    c = client(wh)
    token = login(c)
    for headers, tok in (({"origin": "http://evil.example"}, token), (ORIGIN, "forged"),
                         ({"sec-fetch-site": "cross-site"}, token), ({}, token)):
        r = c.post("/review", data={"csrf": tok, "split": SPLIT, "model": "gpt-4o-mini", "id": "task-000001",
                                    "verdict": "right"}, headers=headers)
        assert r.status_code == 403 and "cross-site" in r.text
    r = c.post("/review", content=b'{"verdict": "right"}', headers={**ORIGIN, "content-type": "application/json"})
    assert r.status_code == 400
    assert wh.partitions("reviews") == []


def test_identity_from_a_configured_header(wh):
    c = client(wh, identity_header="X-Forwarded-User")
    r = c.get(f"/review?split={SPLIT}&model=gpt-4o-mini&id=task-000001")
    assert r.status_code == 403 and "X-Forwarded-User" in r.text
    r = c.get(f"/review?split={SPLIT}&model=gpt-4o-mini&id=task-000001", headers={"X-Forwarded-User": "bob"})
    assert r.status_code == 200 and ">bob<" in r.text
    r = c.post("/review", data={"csrf": csrf(r), "split": SPLIT, "model": "gpt-4o-mini", "id": "task-000001",
                                "verdict": "right"}, headers={**ORIGIN, "X-Forwarded-User": "bob"})
    assert c.get("/reviews.json").json()["reviews"][0]["reviewer"] == "bob"


def test_pairwise_is_blind_and_an_item_goes_to_n_reviewers(wh):
    c1, c2, c3 = client(wh, reviewers_per_item=2), None, None
    app = c1.app
    from starlette.testclient import TestClient

    c2, c3 = (TestClient(app, base_url="http://127.0.0.1") for _ in range(2))
    t1, t2, t3 = login(c1, "ann"), login(c2, "bob"), login(c3, "cy")
    p1 = c1.get("/pairwise")
    assert "gpt-4o-mini" not in p1.text.split("<main>")[1] and "smollm2" not in p1.text.split("<main>")[1]
    sid = re.search(r'id="sample-id">([^<]+)<', p1.text).group(1)
    # bob gets the same sample (two places), cy the next one: ann's and bob's reservations hold both places
    p2, p3 = c2.get("/pairwise"), c3.get("/pairwise")
    assert re.search(r'id="sample-id">([^<]+)<', p2.text).group(1) == sid
    assert re.search(r'id="sample-id">([^<]+)<', p3.text).group(1) != sid
    item = re.search(r'name="item" value="([^"]+)"', p1.text).group(1)
    assert c2.post("/pairwise", data={"csrf": t2, "item": item, "choice": "left"}, headers=ORIGIN).status_code == 400
    r = c1.post("/pairwise", data={"csrf": t1, "item": item, "choice": "tie"}, headers=ORIGIN, follow_redirects=False)
    assert r.status_code == 303
    row = c1.get("/reviews.json").json()["reviews"][0]
    assert (row["kind"], row["preference"], row["sample_id"], row["model"], row["model_b"]) == (
        "pairwise", "tie", sid, "gpt-4o-mini", "smollm2-135m")
    assert row["shown_left"] in ("gpt-4o-mini", "smollm2-135m")
    # an answered item is not handed to the same reviewer again
    assert re.search(r'id="sample-id">([^<]+)<', c1.get("/pairwise").text).group(1) != sid


def test_ranking_counts_people_and_judges_and_refuses_without_a_finite_fit(wh):
    from evalpipe.metrics.reviews import new_review_id, write_reviews

    c = client(wh, bootstrap=50)
    assert c.get("/ranking.json").json()["note"].startswith("no pairwise preferences")
    rows = [{"review_id": new_review_id(), "benchmark_split": SPLIT, "reviewer": "judge-x", "source": "judge",
             "created_at": "2026-01-01T00:00:00", "kind": "pairwise", "sample_id": f"task-{i:06d}",
             "model": "gpt-4o-mini", "model_b": "smollm2-135m", "preference": p} for i, p in enumerate("aab")]
    write_reviews(wh, rows[:2])
    assert "no finite Bradley-Terry fit" in c.get("/ranking.json").json()["note"]
    write_reviews(wh, rows[2:])
    j = c.get("/ranking.json").json()
    assert j["n"] == 3 and [r["model"] for r in j["rows"]] == ["gpt-4o-mini", "smollm2-135m"]
    assert j["rows"][0]["strength"] == pytest.approx(np.log(2) / 2, abs=1e-7)
    assert c.get("/ranking.json?source=person").json()["n"] == 0
    assert c.get("/chart/ranking.svg").status_code == 200
    assert c.get("/ranking.json?source=bogus").status_code == 400


def test_matrix_with_a_baseline_diff(wh):
    c = client(wh)
    j = c.get(f"/matrix.json?split={SPLIT}&metric=gaia&baseline=smollm2-135m&show=better").json()
    assert j["models"] == ["gpt-4o-mini", "smollm2-135m"] and j["rows"]
    assert all(r["diff"][0] == "better" for r in j["rows"]) and j["summary"][0]["better"] == j["total"]
    all_ = c.get(f"/matrix.json?split={SPLIT}&metric=gaia").json()
    assert all_["total"] == 12 and all_["rows"][0]["cells"][0] in ("correct", "incorrect", "unscored", "error")
    assert c.get(f"/matrix.json?split={SPLIT}&show=better").status_code == 400
    assert c.get(f"/matrix.json?split={SPLIT}&baseline=nobody").status_code == 400
    assert "matrix" in c.get(f"/matrix?split={SPLIT}&baseline=smollm2-135m").text


def test_reviews_go_into_the_run_folder_and_the_asset(wh, tmp_path):
    from dagster import materialize

    from eval_assets.reviews import reviews as reviews_asset
    from evalpipe.metrics.reviews import new_review_id, write_reviews
    from evalpipe.store.artifacts import write_artifacts
    from resources import WarehouseResource

    write_reviews(wh, [{"review_id": new_review_id(), "benchmark_split": SPLIT, "reviewer": "ann", "source": "person",
                        "created_at": "2026-01-01T00:00:00", "kind": "verdict", "sample_id": "task-000001",
                        "model": "gpt-4o-mini", "verdict": "right", "comment": "key sk-abcdefghijklmnopqrstuvwxyz123456"}])
    folder = write_artifacts(SPLIT, "gpt-4o-mini", wh, None, out_dir=tmp_path / "out")
    lines = (folder / "reviews.jsonl").read_text().splitlines()
    assert len(lines) == 1 and '"verdict": "right"' in lines[0] and "sk-abcdefghijklmnop" not in lines[0]
    other = write_artifacts(SPLIT, "smollm2-135m", wh, None, out_dir=tmp_path / "out2")
    assert not (other / "reviews.jsonl").exists()  # only where there are some
    res = materialize([reviews_asset], resources={"warehouse": WarehouseResource(path=str(wh.duckdb_path))})
    meta = res.asset_materializations_for_node("reviews")[0].metadata
    assert meta["reviews"].value == 1 and "llm_judge_human_agreement" in meta["calibration"].value


def test_reviews_config_section_is_checked(tmp_path):
    from evalpipe.core.errors import ConfigError
    from evalpipe.project.loader import config_from_dict

    ok = config_from_dict({"reviews": {"rubric": {"clarity": 5}, "identity_header": "X-Forwarded-User",
                                       "reviewers_per_item": 2}}, tmp_path)
    s = ReviewSettings.from_config(ok.raw["reviews"])
    assert s.rubric == {"clarity": [1, 2, 3, 4, 5]} and s.reviewers_per_item == 2
    with pytest.raises(ConfigError, match="reviewers_per_item"):
        config_from_dict({"reviews": {"reviewers_per_item": 0}}, tmp_path)
    with pytest.raises(ConfigError, match="reviwers|did you mean"):
        config_from_dict({"reviews": {"reviwers_per_item": 2}}, tmp_path)


import numpy as np  # noqa: E402  (used by the ranking test)
