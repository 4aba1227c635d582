"""`evalpipe gate`: a CI regression check of a candidate model against a baseline on the same samples.

Per metric of the split, the samples both models were judged on are paired, and:
- right/wrong metrics (every score 0 or 1): McNemar's exact test on the discordant pairs (statsmodels' `mcnemar`
  when installed, else the same binomial test through scipy), the drop with a paired (Wald) 95% interval;
- other scores: a paired bootstrap of the per-sample differences (10,000 resamples), its percentile interval and
  two-sided p-value;
- the minimum drop detectable at this size: (z(1 - alpha/2) + z(power)) x sd(differences) / sqrt(n), alpha 0.05
  and power 0.8 by default (with no discordant pair, the binomial floor 3/n stands in for the sd term).
A drop counts in the metric's direction (a lower-is-better metric drops when it rises). The gate fails (exit 1)
only when a metric's drop is larger than `--fail-if-drop` and significant (p < alpha); a markdown summary goes to
`--markdown FILE` (or $GITHUB_STEP_SUMMARY when set). Written here: the statistics are a few lines of numpy.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass

import click
import numpy as np

BOOTSTRAP = 10_000
COUNTED = ("scored", "error", "parse_error")  # as aggregation counts them: errors score 0


@dataclass
class GateRow:
    metric: str
    test: str
    n: int
    baseline: float
    candidate: float
    drop: float
    ci_low: float
    ci_high: float
    p_value: float
    mde: float
    failed: bool


def _z(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts."""
    if b + c == 0:
        return 1.0
    try:
        from statsmodels.stats.contingency_tables import mcnemar

        return float(mcnemar([[0, b], [c, 0]], exact=True).pvalue)
    except ImportError:
        from scipy.stats import binomtest

        return float(binomtest(min(b, c), b + c, 0.5).pvalue)


def paired_test(base: np.ndarray, cand: np.ndarray, higher_is_better: bool = True, fail_if_drop: float = 0.0,
                alpha: float = 0.05, power: float = 0.8, seed: int = 0, metric: str = "") -> GateRow:
    """The gate's verdict for one metric from the paired per-sample scores (same samples, same order)."""
    base, cand = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    n = len(base)
    sign = 1.0 if higher_is_better else -1.0
    d = sign * (base - cand)  # per-sample drop
    drop = float(d.mean()) if n else float("nan")
    z = _z(1 - alpha / 2)
    binary = n > 0 and bool(np.isin(base, (0.0, 1.0)).all() and np.isin(cand, (0.0, 1.0)).all())
    if n == 0:
        return GateRow(metric, "-", 0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, False)
    if binary:
        b = int(((base == 1) & (cand == 0)).sum())  # right before, wrong now
        c = int(((base == 0) & (cand == 1)).sum())
        p = mcnemar_p(b, c)
        sd = math.sqrt(max((b + c) / n - ((b - c) / n) ** 2, 0.0))
        half = z * sd / math.sqrt(n)
        lo, hi, test = drop - half, drop + half, "mcnemar"
        sd_mde = sd if b + c else math.sqrt(3.0 / n)  # no discordant pair seen: the rule-of-three floor
    else:
        rng = np.random.default_rng(seed)
        means = np.empty(BOOTSTRAP)
        for start in range(0, BOOTSTRAP, 1000):
            idx = rng.integers(0, n, size=(min(1000, BOOTSTRAP - start), n))
            means[start:start + len(idx)] = d[idx].mean(axis=1)
        lo, hi = (float(x) for x in np.percentile(means, [100 * alpha / 2, 100 * (1 - alpha / 2)]))
        p = float(min(1.0, 2 * min((means <= 0).mean(), (means >= 0).mean()))) if d.any() else 1.0
        test, sd_mde = "paired bootstrap", float(d.std(ddof=1)) if n > 1 else math.nan
    mde = (z + _z(power)) * sd_mde / math.sqrt(n)
    return GateRow(metric, test, n, float(base.mean()), float(cand.mean()), drop, lo, hi, p, mde,
                   bool(drop > fail_if_drop and p < alpha))


def gate_rows(judgements_a, judgements_b, fail_if_drop: float, alpha: float = 0.05, power: float = 0.8,
              metrics: list[str] | None = None, seed: int = 0) -> list[GateRow]:
    """Per metric, the paired verdict of candidate (b) against baseline (a); frames with sample_id, metric,
    status, score (the judgements table's columns)."""
    import pandas as pd

    from evalpipe.metrics.base import direction_of

    def scores(df):
        df = df[df["status"].isin(COUNTED)].copy()
        df["score"] = pd.to_numeric(df["score"], errors="coerce").fillna(0.0)
        return df[["sample_id", "metric", "score"]]

    both = scores(judgements_a).merge(scores(judgements_b), on=["sample_id", "metric"], suffixes=("_a", "_b"))
    out = []
    for metric, g in both.groupby("metric", sort=True):
        if metrics and metric not in metrics:
            continue
        g = g.sort_values("sample_id")
        out.append(paired_test(g["score_a"].to_numpy(), g["score_b"].to_numpy(),
                               direction_of(str(metric)).higher_is_better, fail_if_drop, alpha, power, seed,
                               str(metric)))
    return out


def markdown(rows: list[GateRow], baseline: str, candidate: str, split: str, fail_if_drop: float,
             alpha: float) -> str:
    failed = [r for r in rows if r.failed]
    head = (f"### evalpipe gate: {candidate} vs {baseline} on {split}: "
            + (f"FAILED ({', '.join(r.metric for r in failed)})" if failed else "passed"))
    lines = [head, "", f"Fails when a metric drops by more than {fail_if_drop:g} and the drop is significant "
             f"(p < {alpha:g}).", "",
             "| metric | test | n | baseline | candidate | drop | 95% CI | p | min. detectable drop | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.metric} | {r.test} | {r.n} | {r.baseline:.4f} | {r.candidate:.4f} | {r.drop:+.4f} | "
                     f"{r.ci_low:+.4f} to {r.ci_high:+.4f} | {r.p_value:.3g} | {r.mde:.4f} | "
                     f"{'FAIL' if r.failed else 'ok'} |")
    return "\n".join(lines) + "\n"


@click.command(name="gate")
@click.option("--baseline", required=True, metavar="MODEL", help="The model key results are compared against.")
@click.option("--candidate", required=True, metavar="MODEL", help="The model key under test.")
@click.option("--split", default=None, metavar="SPLIT", help="The benchmark split (needed when both have several).")
@click.option("--metric", "metrics", multiple=True, metavar="NAME", help="Only this metric (repeatable).")
@click.option("--fail-if-drop", type=click.FloatRange(min=0), required=True, metavar="D",
              help="Largest tolerated drop, in the metric's units (0.05: five points of accuracy).")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True,
              help="Significance level of the paired test.")
@click.option("--markdown", "md_path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the summary as markdown (default: $GITHUB_STEP_SUMMARY when set).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON instead of a table.")
def gate_cmd(baseline: str, candidate: str, split: str | None, metrics: tuple[str, ...], fail_if_drop: float,
             alpha: float, md_path: str | None, as_json: bool) -> None:
    """Exit 1 only when the candidate is significantly worse than the baseline by more than --fail-if-drop on
    some metric (paired per sample: McNemar for right/wrong, bootstrap for scores); docs/spend.md#evalpipe-gate."""
    import json
    import sys

    from evalpipe.cli.helpers import EXIT_FAILED, out, warehouse
    from evalpipe.cli.view import split_with_both
    from evalpipe.core.errors import DataError

    con = warehouse().connect()
    try:
        split = split_with_both(con, baseline, candidate, split)
        sql = ("SELECT sample_id, metric, status, score FROM judgements WHERE benchmark_split = ? AND model = ?")
        a = con.execute(sql, [split, baseline]).fetchdf()
        b = con.execute(sql, [split, candidate]).fetchdf()
    finally:
        con.close()
    rows = gate_rows(a, b, fail_if_drop, alpha, metrics=list(metrics) or None)
    if not rows:
        raise DataError(f"no paired samples of {baseline} and {candidate} on {split}"
                        + (f" for metric(s) {', '.join(metrics)}" if metrics else ""))
    text = markdown(rows, baseline, candidate, split, fail_if_drop, alpha)
    if as_json:
        out(json.dumps([asdict(r) for r in rows], indent=2))
    else:
        out(text)
    target = md_path or os.environ.get("GITHUB_STEP_SUMMARY")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(text)
    if any(r.failed for r in rows):
        sys.exit(EXIT_FAILED)
