"""Intervals of the metrics table: Wilson for right/wrong scores (numbers from statsmodels' reference values,
recomputed independently here), the bootstrap for continuous scores."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from evalpipe.metrics.aggregate import aggregate, interval, is_binary, wilson_ci


def _wilson(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    # the textbook formula, written out to check the library call against
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(0, 29), (29, 29), (5, 29), (30, 100), (1, 1)])
def test_wilson_matches_the_formula(k, n):
    lo, hi = wilson_ci(k, n)
    elo, ehi = _wilson(k, n)
    assert lo == pytest.approx(max(0.0, elo), abs=1e-9) and hi == pytest.approx(min(1.0, ehi), abs=1e-9)


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (0, 29), (3, 29), (29, 29), (499, 1000), (1, 1_000_000)])
@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_wilson_equals_scipy(k, n, level):
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    assert wilson_ci(k, n, level) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-15)


def test_zero_of_29_is_not_a_degenerate_interval():
    lo, hi = wilson_ci(0, 29)
    assert lo == 0.0 and hi == pytest.approx(0.1170, abs=1e-4)  # statsmodels proportion_confint(0, 29, method="wilson")


def test_aggregate_uses_wilson_for_binary_and_bootstrap_for_continuous():
    rows = [{"sample_id": str(i), "metric": "acc", "score": 0.0, "status": "scored", "target": "t",
             "details": None, "slices": json.dumps({})} for i in range(29)]
    rows += [{"sample_id": str(i), "metric": "sim", "score": s, "status": "scored", "target": "t",
              "details": None, "slices": json.dumps({})} for i, s in enumerate(np.linspace(0.1, 0.9, 29))]
    df = aggregate(pd.DataFrame(rows))
    acc = df[(df.metric == "acc") & (df.slice == "all")].iloc[0]
    assert acc["value"] == 0.0 and acc["ci_low"] == 0.0 and acc["ci_high"] == pytest.approx(0.117, abs=1e-3)
    sim = df[(df.metric == "sim") & (df.slice == "all")].iloc[0]
    assert sim["ci_low"] < 0.5 < sim["ci_high"] and sim["ci_high"] - sim["ci_low"] < 0.3


def test_errors_count_as_wrong_in_the_interval():
    rows = [{"sample_id": "a", "metric": "m", "score": 1.0, "status": "scored", "target": "t", "details": None,
             "slices": "{}"}, {"sample_id": "b", "metric": "m", "score": None, "status": "error", "target": "t",
                               "details": None, "slices": "{}"}]
    r = aggregate(pd.DataFrame(rows)).iloc[0]
    assert (r["ci_low"], r["ci_high"]) == pytest.approx(wilson_ci(1, 2))


def test_is_binary_and_empty():
    assert is_binary(np.array([0.0, 1.0])) and not is_binary(np.array([0.5, 1.0])) and not is_binary(np.array([]))
    assert all(math.isnan(x) for x in interval(np.array([]), 0))
