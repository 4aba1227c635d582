"""Bradley-Terry ranking against a reference fit (choix 0.4.1, pinned), judge calibration against scikit-learn's
definitions worked by hand, and the pairwise judge (both orders) through the litellm runner to a loopback server."""

import numpy as np
import pytest

from evalpipe.metrics import bradley_terry, calibration
from tests.helpers.pair_judge import pair_judge_server

# a fixed set of preferences between four models: (a, b, outcome) with 1 = a preferred, 0 = b, 0.5 = tie
PREFS = ([("m0", "m1", 1.0)] * 7 + [("m0", "m1", 0.0)] * 5 + [("m1", "m2", 1.0)] * 9 + [("m1", "m2", 0.0)] * 4
         + [("m2", "m3", 1.0)] * 3 + [("m2", "m3", 0.0)] * 6 + [("m0", "m3", 1.0)] * 4 + [("m0", "m3", 0.0)] * 4
         + [("m0", "m2", 0.5)] * 3 + [("m1", "m3", 0.5)] * 2 + [("m0", "m2", 1.0)] * 2 + [("m2", "m0", 1.0)])


def _choix_data(prefs):
    """choix takes (winner, loser) pairs: each decisive preference twice and a tie once each way, i.e. a tie is
    half a win each way (doubling every weight leaves the maximum-likelihood estimate unchanged)."""
    idx = {m: int(m[1]) for a, b, _ in prefs for m in (a, b)}
    data = []
    for a, b, o in prefs:
        if o == 1.0:
            data += [(idx[a], idx[b])] * 2
        elif o == 0.0:
            data += [(idx[b], idx[a])] * 2
        else:
            data += [(idx[a], idx[b]), (idx[b], idx[a])]
    return data


def test_bradley_terry_agrees_with_choix_to_1e6():
    choix = pytest.importorskip("choix")
    r = bradley_terry.rank(PREFS, resamples=0)
    assert r.models == ["m0", "m1", "m2", "m3"]
    for ref in (choix.ilsr_pairwise(4, _choix_data(PREFS), alpha=0.0, tol=1e-12),
                choix.opt_pairwise(4, _choix_data(PREFS), alpha=0.0, method="Newton-CG", tol=1e-12)):
        assert np.max(np.abs(np.array(r.strength) - (ref - ref.mean()))) < 1e-6
    assert abs(sum(r.strength)) < 1e-9 and [x["model"] for x in r.rows][0] == r.models[int(np.argmax(r.strength))]
    assert r.wins[0] == 7 + 4 + 1.5 + 2 + 0 and r.comparisons[0] == 12 + 8 + 3 + 2 + 1


def test_bradley_terry_refuses_a_model_that_never_lost():
    with pytest.raises(ValueError, match="no finite Bradley-Terry fit.*groups"):
        bradley_terry.rank([("a", "b", 1.0), ("a", "b", 1.0), ("b", "c", 1.0), ("c", "b", 1.0)])
    with pytest.raises(ValueError, match="two models"):
        bradley_terry.rank([("a", "a", 1.0)])


def test_bootstrap_intervals_hold_the_estimate_and_are_refused_when_most_resamples_have_no_fit():
    r = bradley_terry.rank(PREFS, resamples=300, seed=1)
    assert r.resamples_fitted >= 0.95 * 300 and r.note is None
    for s, lo, hi in zip(r.strength, r.ci_low, r.ci_high):
        assert lo < s < hi
    thin = bradley_terry.rank([("a", "b", 1.0), ("b", "a", 1.0)], resamples=200, seed=0)
    assert thin.ci_low == [None, None] and "bootstrap resamples had a finite fit" in thin.note
    assert thin.strength == [0.0, 0.0]


def test_calibration_accuracy_kappa_and_confusion_by_hand():
    person = [True, True, True, False, False, True, False, True]
    judge = [True, True, False, False, True, True, False, True]
    a = calibration.agreement(person, judge)
    # confusion (people rows right/wrong, judge columns right/wrong): [[4, 1], [1, 2]]
    assert a["confusion"] == [[4, 1], [1, 2]] and a["accuracy"] == 6 / 8
    po, pe = 6 / 8, (5 / 8) * (5 / 8) + (3 / 8) * (3 / 8)
    assert a["kappa"] == pytest.approx((po - pe) / (1 - pe), abs=1e-12)
    same = calibration.agreement([True, True], [True, True])
    assert same["accuracy"] == 1.0 and same["kappa"] is None  # undefined, never made up
    rows = calibration.metric_rows(calibration.calibration(
        [{"metric": "llm_judge", "judge": "j", "fingerprint": "abc", "person": p, "judge_verdict": q,
          "reviewer": "ann", "benchmark_split": "s", "model": "m", "sample_id": str(i)}
         for i, (p, q) in enumerate(zip(person, judge))]))
    assert [(r["metric"], r["slice"], r["n"]) for r in rows] == [
        ("llm_judge_human_agreement", "judge=j,fingerprint=abc", 8), ("llm_judge_human_kappa", "judge=j,fingerprint=abc", 8)]


@pytest.fixture
def pair_judge(home):
    """A loopback OpenAI-compatible judge (tests/helpers/pair_judge.py)."""
    from evalpipe.runners import list_runners

    if "litellm" not in list_runners():
        pytest.skip("the litellm runner is not registered")
    with pair_judge_server() as (judge, mock):
        yield judge, mock


def test_pairwise_judge_asks_both_orders_and_a_position_bias_is_a_tie(pair_judge):
    from evalpipe.metrics.pairwise import PairItem, PairwiseJudge

    judge, mock = pair_judge
    pj = PairwiseJudge(judge)
    out = pj.judge([PairItem("s1", "6*7?", "42", "42", "48"), PairItem("s2", "6*7?", "42", "41", "It is 42"),
                    PairItem("s3", "q", None, "x", "y"), PairItem("s4", "q", None, "garble", "y")])
    assert [(v.preference, v.consistent, v.status) for v in out] == [
        ("a", True, "scored"), ("b", True, "scored"), ("tie", False, "scored"), (None, None, "parse_error")]
    asked = [b["messages"][-1]["content"] for b in mock.bodies]
    assert len(asked) == 8  # every pair in both orders
    assert any("Answer 1:\n42\n" in t for t in asked) and any("Answer 1:\n48\n" in t for t in asked)
