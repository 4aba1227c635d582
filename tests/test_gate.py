"""`evalpipe gate` (issue 34): exit 1 only when the candidate drops by more than --fail-if-drop and the paired test
says the drop is real; 0 on a change within noise. Judgements are written to a warehouse as the pipeline writes
them; the command reads them back."""
import json

import numpy as np
import pandas as pd
import pytest

from evalpipe.cli.gate import paired_test
from tests.helpers.cli import cli_in_process

SPLIT = "smoke/test"
N = 200


def _judgements(model: str, correct: np.ndarray, scores: np.ndarray) -> pd.DataFrame:
    n = len(correct)
    ids = [f"s{i:03d}" for i in range(n)]
    right = pd.DataFrame({"sample_id": ids, "metric": "exact_match", "score": correct.astype(float),
                          "correct": correct.astype(bool), "status": "scored"})
    graded = pd.DataFrame({"sample_id": ids, "metric": "rouge", "score": scores, "correct": None, "status": "scored"})
    return pd.concat([right, graded], ignore_index=True).assign(benchmark_split=SPLIT, model=model)


@pytest.fixture
def warehouse(tmp_path, monkeypatch):
    from evalpipe.store.warehouse import Warehouse

    path = tmp_path / "warehouse.duckdb"
    monkeypatch.setenv("EVALS_WAREHOUSE", str(path))
    rng = np.random.default_rng(1)
    base = (rng.random(N) < 0.8).astype(int)
    scores = rng.random(N)
    planted = base.copy()
    planted[np.flatnonzero(base == 1)[:20]] = 0  # 20 of 200 right answers turned wrong: a 10-point drop
    noisy = base.copy()
    noisy[np.flatnonzero(base == 1)[:5]] = 0  # 5 lost, 4 gained: within noise
    noisy[np.flatnonzero(base == 0)[:4]] = 1
    frames = {"base": (base, scores), "planted": (planted, scores - 0.1), "noisy": (noisy, scores + rng.normal(0, 0.05, N))}
    wh = Warehouse(path)
    for model, (c, s) in frames.items():
        wh.write("judgements", _judgements(model, c, s), {"benchmark_split": SPLIT, "model": model})
    return path


def test_a_planted_ten_point_drop_fails_the_gate(warehouse, tmp_path, monkeypatch):
    invoke = cli_in_process(monkeypatch)
    md = tmp_path / "summary.md"
    r = invoke("gate", "--baseline", "base", "--candidate", "planted", "--fail-if-drop", "0.05",
               "--markdown", str(md), "--metric", "exact_match")
    assert r.exit_code == 1, r.output
    text = md.read_text()
    assert "FAILED (exact_match)" in text and "mcnemar" in text and "+0.1000" in text


def test_a_change_within_noise_passes(warehouse, monkeypatch):
    invoke = cli_in_process(monkeypatch)
    r = invoke("gate", "--baseline", "base", "--candidate", "noisy", "--fail-if-drop", "0.05", "--json")
    assert r.exit_code == 0, r.output
    rows = {x["metric"]: x for x in json.loads(r.output)}
    assert rows["exact_match"]["test"] == "mcnemar" and rows["rouge"]["test"] == "paired bootstrap"
    assert rows["exact_match"]["drop"] == pytest.approx(0.005)
    assert not any(x["failed"] for x in rows.values())


def test_a_significant_drop_within_the_tolerance_passes(warehouse, monkeypatch):
    invoke = cli_in_process(monkeypatch)
    r = invoke("gate", "--baseline", "base", "--candidate", "planted", "--fail-if-drop", "0.15", "--json")
    assert r.exit_code == 0, r.output
    rows = {x["metric"]: x for x in json.loads(r.output)}
    assert rows["exact_match"]["p_value"] < 0.001  # real, but smaller than tolerated
    assert rows["rouge"]["drop"] == pytest.approx(0.1)


def test_a_large_drop_on_too_few_samples_is_not_significant():
    base = np.array([1, 1, 1, 0, 1], dtype=float)
    cand = np.array([0, 1, 1, 0, 1], dtype=float)  # 20 points down, on 5 samples
    row = paired_test(base, cand, fail_if_drop=0.05)
    assert row.drop == pytest.approx(0.2) and row.p_value == 1.0 and not row.failed
    assert row.mde > 0.2  # the size could not show a drop this large


def test_the_minimum_detectable_drop_shrinks_with_size():
    def pair(n):  # 10% of the pairs discordant, half each way: no drop, the same spread at every size
        base, cand = np.ones(n), np.ones(n)
        cand[: n // 20] = 0
        base[n // 20: n // 10] = 0
        return base, cand

    mde_small, mde_big = paired_test(*pair(100)).mde, paired_test(*pair(1600)).mde
    assert mde_big == pytest.approx(mde_small / 4)
    assert mde_small == pytest.approx((1.959964 + 0.841621) * 0.1 ** 0.5 / 10, rel=1e-4)


def test_a_lower_is_better_metric_drops_when_it_rises():
    base, cand = np.zeros(300), np.zeros(300)
    cand[:60] = 1  # an error rate up by 20 points
    row = paired_test(base, cand, higher_is_better=False, fail_if_drop=0.05)
    assert row.drop == pytest.approx(0.2) and row.failed


def test_gate_and_compare_pick_the_split_the_same_way(warehouse, monkeypatch):
    """Both commands find the one split where both models have results, and refuse a split where they don't in the
    same words (one helper behind both)."""
    invoke = cli_in_process(monkeypatch)
    gate = invoke("gate", "--baseline", "base", "--candidate", "noisy", "--split", "other/x", "--fail-if-drop", "0.05")
    compare = invoke("compare", "base", "noisy", "--split", "other/x")
    want = "base and noisy do not both have results on other/x; splits with both: smoke/test"
    assert gate.exit_code == compare.exit_code == 2
    assert want in gate.output and want in compare.output
    gate = invoke("gate", "--baseline", "base", "--candidate", "nobody", "--fail-if-drop", "0.05")
    compare = invoke("compare", "base", "nobody")
    want = "pick a split with --split; splits where both base and nobody have results: none"
    assert want in gate.output and want in compare.output
