"""Rule-based metrics on hand-written cases, and the aggregate: unscored accounting, seeded CIs, derived rows."""
import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest

from evalpipe.core.errors import ConfigError, DataError
from evalpipe.metrics import JudgeInput, aggregate, build_metric
from evalpipe.metrics.aggregate import USAGE_SLICE, bootstrap_ci
from evalpipe.metrics.pass_at_k import pass_at_k
from evalpipe.metrics.list_match import parse_answers
from evalpipe.metrics.numbers import parse_number
from evalpipe.metrics.verdicts import parse_verdict


def em(pred, gold, **settings):
    return build_metric({"name": "exact_match", **settings}).score(JudgeInput("s", "q", gold, pred))


@pytest.mark.parametrize("pred,gold,settings,ok", [
    ("Paris.", "paris", {}, True),
    ("PARIS", "paris", {"case_sensitive": True}, False),
    ("1.0", "1", {}, True),  # numbers compare as numbers by default
    ("1.0", "1", {"numeric": False}, False),
    ("$1,000", "1000", {}, True),
    ("3.14", "3.14159", {}, False),
    ("3.14", "3.14159", {"rel_tol": 0.001}, True),
    ("3.14", "3.14159", {"rel_tol": 0.0001}, False),
    ("10.4", "10", {"abs_tol": 0.5}, True),
    ("10.6", "10", {"abs_tol": 0.5}, False),
    ("1,2", "12", {}, False),  # "1,2" is a list, not twelve
    ("-3", "3", {}, False),  # a sign is meaning, never punctuation (issue 20)
    ("-2.5", "2.5", {}, False),
    ("-3", "3", {"numeric": False}, False),
    ("45%", "45", {}, False),  # a percentage is not the plain number
    ("b, a, c", "a; b; c", {"list": True}, True),
    ("a, b", "a, b, c", {"list": True}, False),
    ("a, b, b", "b, a", {"list": True}, True),  # sets: duplicates don't count
    ("b, a", "a, b", {"list": True, "ordered": True}, False),
    ("2.0, 1", "1, 2", {"list": True}, True),
    ("1.05, 2", "1, 2", {"list": True, "rel_tol": 0.1}, True),
])
def test_exact_match_options(pred, gold, settings, ok):
    assert em(pred, gold, **settings).correct is ok


def test_exact_match_rejects_unknown_settings_and_leaves_missing_targets_unscored():
    with pytest.raises(ConfigError, match="unknown setting"):
        build_metric({"name": "exact_match", "tolerance": 0.1})
    assert em("x", None).status == "unscored"


@pytest.mark.parametrize("text,value", [("45%", None), ("$1,234.5", 1234.5), ("-3e2", -300.0), (".5", 0.5),
                                        ("-3", -3.0), ("\u22122.5", -2.5), ("$-3", -3.0), ("5.", 5.0), ("1 2", None),
                                        ("1,2", None), ("abc", None), ("", None), ("inf", None)])
def test_parse_number(text, value):
    assert parse_number(text) == value


def lm(raw, gold):
    return build_metric("list_match").score(JudgeInput("s", "q", gold, raw.strip(), raw_output=raw))


def test_list_match_daeval_format():
    assert parse_answers("@a[1] x @b_2[hello world] @a[2]") == {"a": "2", "b_2": "hello world"}  # last value wins
    assert parse_answers("@a[x]y]") == {"a": "x"}  # the value ends at the first ']'
    s = lm("The mean is @mean[3.0000001] and @name[Bob]", "@mean[3] @name[Bob]")
    assert s.correct is True and s.details["components"]["proportional"] == 1.0
    s = lm("@mean[3.1] @name[Bob]", "@mean[3] @name[Bob]")
    assert s.correct is False and s.details["components"]["proportional"] == 0.5
    assert s.details["ratios"]["by_subquestion"] == [1, 2]
    assert lm("@mean[3]", json.dumps([["mean", "3"], ["sd", "1.5"]])).details["ratios"]["by_subquestion"] == [1, 2]
    with pytest.raises(DataError, match="sample 's'.*cannot read its reference"):  # never a silent "unscored"
        lm("@a[1]", "no reference")


def test_list_match_aggregate_reports_three_accuracies():
    rows = []
    for sid, raw, gold in [("q1", "@a[1] @b[2]", "@a[1] @b[2]"), ("q2", "@a[1] @b[9]", "@a[1] @b[2]"),
                           ("q3", "@a[5]", "@a[1] @b[2] @c[3] @d[4]")]:
        s = lm(raw, gold)
        rows.append(jrow(sid, "list_match", s.value, s.status, s.details, target=gold))
    rows.append(jrow("q4", "list_match", 0.0, "error", None, target="@a[1] @b[2]"))  # a failed rollout
    m = aggregate(pd.DataFrame(rows)).set_index("metric")
    assert m.loc["list_match", "value"] == pytest.approx(1 / 4) and m.loc["list_match", "n_errors"] == 1
    assert m.loc["list_match_proportional", "value"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)
    # by sub-question: 2 + 1 + 0 right of 2 + 2 + 4 + 2 (the failed one counts its 2 sub-answers as wrong)
    assert m.loc["list_match_by_subquestion", "value"] == pytest.approx(3 / 10)
    assert m.loc["list_match_by_subquestion", "n"] == 10


@pytest.mark.parametrize("reply,value", [
    ('{"verdict": "correct", "rationale": "same city"}', 1.0),
    ('Sure.\n```json\n{"rationale": "no", "verdict": "incorrect"}\n```', 0.0),
    ("Reasoning...\nVERDICT: CORRECT", 1.0),
    ("The format is VERDICT: <x>\n**Verdict:** incorrect", 0.0),
    ('{"correct": true}', 1.0),
    ("incorrect", 0.0),
    ("I think it might be right but I'm not sure", None),
    ("", None),
    ('{"verdict": "maybe"}', None),
])
def test_parse_verdict(reply, value):
    assert parse_verdict(reply)[0] == value


def test_parse_verdict_keeps_the_rationale():
    assert parse_verdict('{"verdict": "correct", "rationale": "same city"}') == (1.0, "same city")


def jrow(sid, metric, score, status, details=None, slices=None, target="t"):
    return {"sample_id": sid, "metric": metric, "score": score, "status": status, "target": target,
            "details": json.dumps(details) if details else None, "slices": json.dumps(slices or {})}


def test_unscored_samples_are_not_wrong_and_errors_are():
    df = pd.DataFrame([jrow("a", "m", 1.0, "scored"), jrow("b", "m", 0.0, "scored"), jrow("c", "m", None, "unscored"),
                       jrow("d", "m", None, "unscored"), jrow("e", "m", None, "error"), jrow("f", "m", None, "parse_error")])
    r = aggregate(df).iloc[0]
    assert (r["n"], r["n_unscored"], r["n_errors"]) == (4, 2, 2)
    assert r["value"] == pytest.approx(1 / 4)  # unscored left out; error and parse_error count as wrong


def test_stderr_and_bootstrap_ci_are_right_and_seeded():
    # continuous scores (right/wrong ones get a Wilson interval instead: tests/test_intervals.py)
    vals = np.array([0.75] * 30 + [0.25] * 70)
    mu = float(vals.mean())
    df = pd.DataFrame([jrow(str(i), "m", v, "scored", slices={"lvl": i % 2}) for i, v in enumerate(vals)])
    a, b, c = aggregate(df, seed=1), aggregate(df, seed=1), aggregate(df, seed=2)
    pd.testing.assert_frame_equal(a, b)
    assert not a["ci_low"].equals(c["ci_low"])
    r = a[a["slice"] == "all"].iloc[0]
    assert r["stderr"] == pytest.approx(np.std(vals, ddof=1) / 10)
    # the percentile bootstrap of a mean is close to the normal interval for n = 100
    assert r["ci_low"] == pytest.approx(mu - 1.96 * r["stderr"], abs=0.03)
    assert r["ci_high"] == pytest.approx(mu + 1.96 * r["stderr"], abs=0.03)
    assert r["ci_low"] < mu < r["ci_high"]
    assert set(a["slice"]) == {"all", "lvl=0", "lvl=1"}
    assert all(math.isnan(x) for x in bootstrap_ci(np.array([]), 0))  # nothing to estimate


def test_judge_agreement_and_per_judge_rows():
    rows = [jrow("a", "llm_judge", 1.0, "scored", {"agreement": True, "components": {"[j1]": 1.0, "[j2]": 1.0}}),
            jrow("b", "llm_judge", 0.0, "scored", {"agreement": False, "components": {"[j1]": 1.0, "[j2]": 0.0}}),
            jrow("c", "llm_judge", 0.0, "scored", {"agreement": True, "components": {"[j1]": 0.0, "[j2]": 0.0}}),
            jrow("d", "llm_judge", None, "unscored")]
    m = aggregate(pd.DataFrame(rows)).set_index("metric")
    assert m.loc["llm_judge_agreement", "value"] == pytest.approx(2 / 3)
    assert m.loc["llm_judge[j1]", "value"] == pytest.approx(2 / 3) and m.loc["llm_judge[j2]", "value"] == pytest.approx(1 / 3)


def brute_pass_at_k(n, c, k):
    """Probability that a random k-subset of n samples (c correct) holds a correct one, by enumeration."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(5, 0, 1), (5, 1, 1), (5, 2, 3), (6, 3, 2), (4, 4, 4), (7, 1, 5)])
def test_pass_at_k_estimator_matches_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k))


def test_pass_at_k_rows_over_tasks():
    rows = []
    for task, passes in {"T/0": [1, 0, 0], "T/1": [0, 0, 0], "T/2": [1, 1, 1]}.items():
        for i, p in enumerate(passes):
            rows.append(jrow(f"{task}#{i}", "code_execution", float(p), "scored", {"pass_at_k": [1, 2, 10]}))
    rows[4] = jrow("T/1#1", "code_execution", 0.0, "error")  # a failed rollout: still a sample of its task
    m = aggregate(pd.DataFrame(rows)).set_index("metric")
    assert m.loc["code_execution_pass@1", "value"] == pytest.approx((1 / 3 + 0 + 1) / 3)
    assert m.loc["code_execution_pass@2", "value"] == pytest.approx((brute_pass_at_k(3, 1, 2) + 0 + 1) / 3)
    assert m.loc["code_execution_pass@1", "n"] == 3  # tasks
    assert "code_execution_pass@10" not in m.index  # more than the 3 samples per task


def test_usage_rows_from_rollouts():
    rollouts = pd.DataFrame({"status": ["ok", "ok", "error", "ok"], "latency_s": [1.0, 2.0, 3.0, 4.0],
                             "input_tokens": [10, 20, None, 30], "output_tokens": [1, 2, None, 3],
                             "cost": [0.1, 0.2, 0.0, 0.3]})
    df = aggregate(pd.DataFrame([jrow("a", "m", 1.0, "scored")]), rollouts=rollouts)
    u = df[df["slice"] == USAGE_SLICE].set_index("metric")["value"]
    assert u["latency_s_p50"] == 2.5 and u["latency_s_p95"] == pytest.approx(3.85)
    assert u["input_tokens_total"] == 60 and u["output_tokens_total"] == 6
    assert u["cost_usd_total"] == pytest.approx(0.6) and u["rollout_error_rate"] == 0.25
    assert list(df[df["slice"] == "all"]["metric"]) == ["m"]  # usage rows stay out of slice `all`
    assert math.isnan(df.set_index("metric").loc["cost_usd_total", "stderr"])
