"""Bradley-Terry ranking of models from pairwise preferences (people's or judges'), with bootstrap intervals.

The model: P(i preferred to j) = 1 / (1 + exp(s_j - s_i)); the strengths `s` are the maximum-likelihood fit
(scipy's trust-region Newton on the exact log-likelihood, its gradient and Hessian), shifted to mean zero, so they
are the same numbers as choix's `opt_pairwise(..., alpha=0)` / `ilsr_pairwise(..., alpha=0)` (checked to 1e-6 in
tests/test_reviews_ranking.py). A tie counts as half a win each way, as arenas count it.

Refused rather than guessed: the maximum-likelihood strengths exist only when every model has beaten, and been
beaten by, the others through some chain of preferences (the preference graph is strongly connected; ties count
both ways). Without that, a strength is infinite: `fit` raises ValueError naming the models, never a made-up
finite number. A bootstrap resample without it is skipped and counted; the interval is given only when at least
95% of the resamples could be fitted.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

MIN_FITTED_SHARE = 0.95  # bootstrap: intervals only when this share of the resamples have a finite fit


@dataclass
class Ranking:
    models: list[str]
    strength: list[float]  # log-strength, mean zero
    ci_low: list[float | None]
    ci_high: list[float | None]
    wins: list[float]  # ties as half
    comparisons: list[int]
    n: int  # preferences used
    resamples: int = 0
    resamples_fitted: int = 0
    note: str | None = None  # why there are no intervals
    rows: list[dict] = field(default_factory=list)  # one per model, best first


def _counts(prefs: Sequence[tuple[str, str, float]], models: list[str]) -> np.ndarray:
    """W[i, j]: how many times i was preferred to j (ties as half each way)."""
    index = {m: k for k, m in enumerate(models)}
    w = np.zeros((len(models), len(models)))
    for a, b, outcome in prefs:
        i, j = index[a], index[b]
        w[i, j] += outcome
        w[j, i] += 1.0 - outcome
    return w


def _check_connected(w: np.ndarray, models: list[str]) -> None:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n, labels = connected_components(csr_matrix(w > 0), directed=True, connection="strong")
    if n > 1:
        groups: dict[int, list[str]] = {}
        for m, lab in zip(models, labels):
            groups.setdefault(int(lab), []).append(m)
        shown = "; ".join(", ".join(g) for g in groups.values())
        raise ValueError(f"no finite Bradley-Terry fit: some models never lost (or never won) against the rest "
                         f"(groups: {shown}); collect preferences between these groups")


def fit_counts(w: np.ndarray, models: list[str] | None = None) -> np.ndarray:
    """Maximum-likelihood log-strengths (mean zero) from a win matrix W[i, j] (i preferred to j)."""
    from scipy.optimize import minimize

    k = w.shape[0]
    names = models or [str(i) for i in range(k)]
    if k < 2:
        raise ValueError("a ranking needs preferences between at least two models")
    _check_connected(w, names)
    n_ij = w + w.T  # comparisons per pair
    wins = w.sum(axis=1)

    def full(x: np.ndarray) -> np.ndarray:
        return np.append(x, 0.0)  # the last strength fixed at 0 (the likelihood only sees differences)

    def negloglik(x: np.ndarray) -> float:
        s = full(x)
        d = s[:, None] - s[None, :]
        return float(-(w * -np.logaddexp(0.0, -d)).sum())

    def grad(x: np.ndarray) -> np.ndarray:
        s = full(x)
        p = 1.0 / (1.0 + np.exp(s[None, :] - s[:, None]))  # P(i beats j)
        g = wins - (n_ij * p).sum(axis=1)
        return -g[:-1]

    def hess(x: np.ndarray) -> np.ndarray:
        s = full(x)
        p = 1.0 / (1.0 + np.exp(s[None, :] - s[:, None]))
        c = n_ij * p * (1.0 - p)
        h = -c
        np.fill_diagonal(h, c.sum(axis=1) - np.diag(c))
        return h[:-1, :-1]

    res = minimize(negloglik, np.zeros(k - 1), jac=grad, hess=hess, method="trust-exact",
                   options={"gtol": 1e-10, "maxiter": 1000})
    # (the optimizer may stop at float precision, short of gtol: the score equations decide)
    if not np.all(np.isfinite(res.x)) or np.max(np.abs(grad(res.x))) > 1e-8 * max(1.0, float(w.sum())):
        raise ValueError(f"the Bradley-Terry fit did not converge ({res.message})")
    s = full(res.x)
    return s - s.mean()


def rank(preferences: Iterable[tuple[str, str, float]], resamples: int = 1000, seed: int = 0,
         confidence: float = 0.95) -> Ranking:
    """Strengths and percentile-bootstrap intervals (resampling whole preferences) from (a, b, outcome) triples:
    outcome 1 = a preferred, 0 = b preferred, 0.5 = tie. Raises ValueError when no finite fit exists."""
    prefs = [(str(a), str(b), float(o)) for a, b, o in preferences if a != b]
    for _, _, o in prefs:
        if o not in (0.0, 0.5, 1.0):
            raise ValueError(f"a preference outcome is 1 (a), 0 (b) or 0.5 (tie), got {o}")
    models = sorted({m for a, b, _ in prefs for m in (a, b)})
    w = _counts(prefs, models)
    s = fit_counts(w, models)
    lo: list[float | None] = [None] * len(models)
    hi: list[float | None] = [None] * len(models)
    fitted, note = 0, None
    if resamples:
        rng = np.random.default_rng(seed)
        draws = []
        for _ in range(resamples):
            pick = rng.integers(0, len(prefs), len(prefs))
            try:
                draws.append(fit_counts(_counts([prefs[i] for i in pick], models), models))
            except ValueError:
                continue
        fitted = len(draws)
        if fitted >= MIN_FITTED_SHARE * resamples:
            arr = np.array(draws)
            alpha = (1.0 - confidence) / 2
            lo = [float(v) for v in np.quantile(arr, alpha, axis=0)]
            hi = [float(v) for v in np.quantile(arr, 1 - alpha, axis=0)]
        else:
            note = (f"no intervals: only {fitted} of {resamples} bootstrap resamples had a finite fit "
                    "(too few preferences between some models)")
    comparisons = (w + w.T).sum(axis=1)
    out = Ranking(models=models, strength=[float(v) for v in s], ci_low=lo, ci_high=hi,
                  wins=[float(v) for v in w.sum(axis=1)], comparisons=[int(round(v)) for v in comparisons],
                  n=len(prefs), resamples=resamples, resamples_fitted=fitted, note=note)
    order = sorted(range(len(models)), key=lambda i: -s[i])
    out.rows = [{"rank": r + 1, "model": models[i], "strength": out.strength[i], "ci_low": lo[i], "ci_high": hi[i],
                 "wins": out.wins[i], "comparisons": out.comparisons[i]} for r, i in enumerate(order)]
    return out


def table_rows(con, resamples: int = 200, seed: int = 0) -> list[dict]:
    """The warehouse's `review_ranking` rows from the `reviews` table: per split with preferences, the ranking of
    everyone's preferences (source `all`) and of each source's own (`person`, `judge`). A split (and source) with no
    finite fit gets one row per model with no strength and the reason in `note`: refused, never guessed."""
    from evalpipe.metrics.reviews import preferences

    splits = [r[0] for r in con.execute("SELECT DISTINCT benchmark_split FROM reviews WHERE kind = 'pairwise' "
                                        "AND preference IS NOT NULL ORDER BY 1").fetchall()]
    out: list[dict] = []
    for split in splits:
        sources = [r[0] for r in con.execute("SELECT DISTINCT source FROM reviews WHERE kind = 'pairwise' AND "
                                             "benchmark_split = ? AND preference IS NOT NULL ORDER BY 1",
                                             [split]).fetchall()]
        for source in ["all", *sources]:
            prefs = preferences(con, split, None if source == "all" else source)
            if not prefs:
                continue
            base = {"benchmark_split": split, "source": source, "n": len(prefs), "resamples": resamples}
            try:
                r = rank(prefs, resamples=resamples, seed=seed)
            except ValueError as exc:
                models = sorted({m for a, b, _ in prefs for m in (a, b)})
                out += [{**base, "model": m, "rank": None, "strength": None, "note": str(exc)} for m in models]
                continue
            out += [{**base, **row, "resamples_fitted": r.resamples_fitted, "note": r.note} for row in r.rows]
    return out
