"""From per-sample judgements (and rollouts) to the rows of the `metrics` table.

Per metric and slice (`all`, plus `key=value` for each slice attribute the adapter declared):
- the metric itself: mean score over counted samples, n, n_unscored, n_errors, standard error, and a 95%
  confidence interval: Wilson's score interval when every score is 0 or 1 (right/wrong metrics, so 0/29 is
  0.000-0.117, not 0.000-0.000), a seeded percentile bootstrap for continuous scores. Counted = scored + errored + unparseable-verdict samples;
  errors and parse errors count as score 0 (a failing model or judge can't look better by failing);
  samples without ground truth are `n_unscored` and not counted.
- rows derived from per-sample `details` that metrics write:
  `components: {name: value}` -> `<metric>_<name>` (mean; a sample without the component counts 0;
  names starting with `[` are appended directly, e.g. a judge's own accuracy `llm_judge[gpt4]`);
  `agreement: bool` -> `<metric>_agreement` (share of samples where all judges agree, over the samples
  with at least two readable verdicts);
  `ratios: {name: [num, den]}` -> `<metric>_<name>` = sum(num) / sum(den), n = sum(den) (a failed sample
  gets its counts from the metric's `failure_details(target)` when it has one);
  `pass_at_k: [k, ...]` -> `<metric>_pass@k`, the unbiased estimator over tasks (samples `<task>#<i>`), for
  each k up to the smallest number of samples per task, when tasks have more than one sample.
- epochs (docs/metrics.md "Epochs"): the rows `<id>#epoch<e>` of one sample are first reduced to one row per
  sample and metric (`reduce_epochs`: mean, median, max, at_least_<k>, pass_at_<k>, as Inspect AI's reducers),
  then everything above runs over samples: n counts samples and the interval is over samples, not epochs.
- per partition, from the rollouts, rows with slice `usage` (the USAGE_METRICS): latency percentiles and
  mean, token and cost totals, and the rollout error rate; `n` is the number of rollouts. A slice of their
  own keeps them out of queries over `slice = 'all'` and out of the leaderboard, which ranks scores.
Every row carries its direction (docs/metrics.md "Direction"): `higher_is_better` (null: no better side, never
ranked) and `kind` (score | count | amount), as the producing metric declares them (evalpipe/metrics/base.py).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

BOOTSTRAP_RESAMPLES = 1000
USAGE_SLICE = "usage"
COUNTED = ("scored", "error", "parse_error")
USAGE_METRICS = ("latency_s_p50", "latency_s_p95", "latency_s_mean", "input_tokens_total", "output_tokens_total",
                 "cost_usd_total", "rollout_error_rate")
# [spend] the judges' calls of the partition (from each verdict's details `judges.<name>.usage`; cached calls count
# 0), beside the rollouts' usage rows
JUDGE_USAGE_METRICS = ("judge_calls", "judge_input_tokens_total", "judge_output_tokens_total", "judge_cost_usd_total",
                       "judge_latency_s_mean")
USAGE_METRICS = USAGE_METRICS + JUDGE_USAGE_METRICS


RESAMPLE_CHUNK = 4_000_000  # indices drawn at once (32 MB); one (1000, n) array would be 8 GB at n = 1M


def resample_indices(n: int, seed: int) -> Iterator[np.ndarray]:
    """The seeded bootstrap's (BOOTSTRAP_RESAMPLES, n) resample indices in row chunks of at most RESAMPLE_CHUNK
    values. Drawing the rows in chunks from one generator gives exactly the values of one big draw (numpy fills
    row after row), so the intervals are those of `rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))`."""
    rng = np.random.default_rng(seed)
    rows = max(1, RESAMPLE_CHUNK // max(n, 1))
    for lo in range(0, BOOTSTRAP_RESAMPLES, rows):
        yield rng.integers(0, n, size=(min(rows, BOOTSTRAP_RESAMPLES - lo), n))


def bootstrap_ci(values: np.ndarray, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Seeded percentile-bootstrap CI of the mean."""
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"))
    stats = np.concatenate([values[idx].mean(axis=1) for idx in resample_indices(n, seed)])
    lo, hi = np.quantile(stats, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def is_binary(values: np.ndarray) -> bool:
    """Right/wrong scores only (every value 0 or 1)."""
    return len(values) > 0 and bool(np.isin(values, (0.0, 1.0)).all())


def wilson_ci(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion, equal to scipy's `binomtest(k, n).proportion_ci(method="wilson")`
    (Newcombe 1998, as scipy writes it, including 0 and 1 at k = 0 and k = n): 0/29 gives 0.000-0.117, not the
    bootstrap's degenerate 0.000-0.000. Written out with the stdlib's normal quantile because importing
    scipy.stats costs ~1.4 s of CPU per `evalpipe run` (tests/test_intervals.py checks it against scipy)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    from math import sqrt
    from statistics import NormalDist

    k, n = int(successes), int(n)
    z = NormalDist().inv_cdf(0.5 + 0.5 * level)
    p = k / n
    denom = 2 * (n + z * z)
    center = (2 * n * p + z * z) / denom
    delta = z / denom * sqrt(4 * n * p * (1 - p) + z * z)
    return (0.0 if k == 0 else center - delta), (1.0 if k == n else center + delta)


def interval(values: np.ndarray, seed: int, level: float = 0.95) -> tuple[float, float]:
    """The 95% CI of a mean score: Wilson for right/wrong scores, the seeded percentile bootstrap otherwise."""
    if is_binary(values):
        return wilson_ci(int(values.sum()), len(values), level)
    return bootstrap_ci(values, seed, level)


def _mean_row(metric: str, slice_name: str, vals: np.ndarray, seed: int, n_unscored: int = 0, n_errors: int = 0) -> dict:
    n = len(vals)
    return {
        "metric": metric, "slice": slice_name, "value": float(vals.mean()) if n else float("nan"), "n": n,
        "n_unscored": n_unscored, "n_errors": n_errors,
        "stderr": float(vals.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan"),
        **dict(zip(("ci_low", "ci_high"), interval(vals, seed))),
    }


def _failure_details(metric: str) -> Callable[[Any], dict] | None:
    from evalpipe.metrics.base import get_metric

    try:
        return getattr(get_metric(metric), "failure_details", None)
    except Exception:  # a metric registered in another process, or renamed: no hook
        return None


def _summary_rows(metric: str, g: pd.DataFrame, details: pd.Series, seed: int) -> list[dict]:
    """Rows a metric computes over a whole partition: its static `summary_rows(metric, counted, details, seed)`
    when it has one (e.g. bfcl_ast's unweighted mean over categories), given the counted samples' judgement rows
    (score filled with 0 for errors) and their parsed details."""
    from evalpipe.metrics.base import get_metric

    try:
        hook = getattr(get_metric(metric), "summary_rows", None)
    except Exception:  # a metric registered in another process, or renamed: no hook
        return []
    if hook is None:
        return []
    counted = g[g["status"].isin(COUNTED)]
    return hook(metric, counted.assign(score=counted["score"].fillna(0.0)), [details[i] for i in counted.index], seed)


def _rows_for(metric: str, slice_name: str, g: pd.DataFrame, details: pd.Series, seed: int) -> list[dict]:
    counted = g[g["status"].isin(COUNTED)]
    n_unscored = int((g["status"] == "unscored").sum())
    n_errors = int(g["status"].isin(["error", "parse_error"]).sum())
    vals = counted["score"].fillna(0.0).to_numpy(dtype=float)  # an errored sample counts as wrong, and is counted
    rows = [_mean_row(metric, slice_name, vals, seed, n_unscored, n_errors)]
    if not details.attrs.get("any_details", True):  # no sample wrote details (rule-based metrics): no derived rows
        return rows
    det = [details[i] for i in counted.index]

    names = sorted({c for d in det for c in (d.get("components") or {})})
    for c in names:
        cv = np.array([float((d.get("components") or {}).get(c, 0.0)) for d in det])
        label = f"{metric}{c}" if c.startswith("[") else f"{metric}_{c}"
        rows.append(_mean_row(label, slice_name, cv, seed, n_unscored, n_errors))

    agree = np.array([float(d["agreement"]) for d in det if "agreement" in d])
    if len(agree):
        rows.append(_mean_row(f"{metric}_agreement", slice_name, agree, seed))

    ratio_names = sorted({r for d in det for r in (d.get("ratios") or {})})
    if ratio_names:
        hook = _failure_details(metric)
        filled = [d if d.get("ratios") or hook is None else hook(t) for d, t in zip(det, counted["target"])]
        for r in ratio_names:
            pairs = np.array([(d.get("ratios") or {}).get(r, [0, 0]) for d in filled], dtype=float).reshape(-1, 2)
            num, den = pairs[:, 0], pairs[:, 1]
            total = den.sum()
            value = float(num.sum() / total) if total else float("nan")

            lo = hi = se = float("nan")
            if total:  # bootstrap over samples (a question's sub-answers stay together)
                parts = []
                for idx in resample_indices(len(num), seed):
                    d = den[idx].sum(axis=1)
                    parts.append(np.divide(num[idx].sum(axis=1), d, out=np.full(len(d), np.nan), where=d > 0))
                stats = np.concatenate(parts)
                lo, hi = (float(x) for x in np.nanquantile(stats, [0.025, 0.975]))
                se = float(np.nanstd(stats, ddof=1)) if len(num) > 1 else float("nan")
            rows.append({"metric": f"{metric}_{r}", "slice": slice_name, "value": value, "n": int(total),
                         "n_unscored": n_unscored, "n_errors": n_errors, "stderr": se, "ci_low": lo, "ci_high": hi})

    ks = sorted({int(k) for d in det for k in (d.get("pass_at_k") or [])})
    if ks:
        from evalpipe.metrics.pass_at_k import pass_at_k, task_of

        # each epoch is one more completion of its task (reduced rows carry their epochs' counts)
        per_task = pd.DataFrame({"task": counted["sample_id"].map(task_of),
                                 "n": [(d.get(EPOCH_COUNTS) or [1, 0])[0] for d in det],
                                 "c": [(d.get(EPOCH_COUNTS) or [1, int(v >= 1.0)])[1] for d, v in zip(det, vals)]})
        counts = per_task.groupby("task")[["n", "c"]].sum().rename(columns={"n": "size", "c": "sum"})
        if len(counts) and counts["size"].max() > 1:
            for k in ks:
                if k > counts["size"].min():
                    continue
                est = np.array([pass_at_k(int(n), int(c), k) for n, c in zip(counts["size"], counts["sum"])])
                rows.append(_mean_row(f"{metric}_pass@{k}", slice_name, est, seed, n_unscored, n_errors))
    return rows


def _directed(rows: list[dict], metric: str | None = None) -> list[dict]:
    """`rows` with `higher_is_better` and `kind` as `metric` (the judgement metric that produced them; None: usage
    rows) declares them; a row that already says (a metric's own summary_rows) keeps its own."""
    from evalpipe.metrics.base import direction_of

    for r in rows:
        if r.get("kind") is None:
            d = direction_of(r["metric"], metric)
            r["higher_is_better"], r["kind"] = d.higher_is_better, d.kind
    return rows


def with_directions(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (rows of the `metrics` or `leaderboard` table) with `higher_is_better` and `kind` filled from the
    declarations where they are missing: partitions written before the columns existed read them as null."""
    from evalpipe.metrics.base import direction_of

    df = df.copy()
    for c in ("higher_is_better", "kind"):
        if c not in df.columns:
            df[c] = None
    missing = df["kind"].isna().to_numpy()
    if missing.any():
        found = {m: direction_of(m) for m in pd.unique(df.loc[missing, "metric"])}
        hib = df["higher_is_better"].astype(object)
        hib[missing] = [found[m].higher_is_better for m in df.loc[missing, "metric"]]
        df["higher_is_better"] = hib
        df.loc[missing, "kind"] = [found[m].kind for m in df.loc[missing, "metric"]]
    df["higher_is_better"] = df["higher_is_better"].astype("boolean")
    return df


def rank_by_direction(df: pd.DataFrame, by: list[str]) -> tuple[pd.Series, pd.Series]:
    """Competition ranks ("1224") of `df["value"]` within each `by` group, best first by each row's
    `higher_is_better`, and whether the rank is shared (a tie). No value, or no better side: no rank, not tied."""
    hib = df["higher_is_better"].astype("boolean")
    value = pd.to_numeric(df["value"], errors="coerce").astype(float)
    key = value.where(hib.notna().to_numpy()).where(hib.fillna(True).to_numpy(bool), -value)  # lower: rank -value
    rank = key.groupby([df[c] for c in by]).rank(ascending=False, method="min", na_option="keep").astype("Int64")
    sizes = pd.DataFrame({**{c: df[c] for c in by}, "_rank": rank}).groupby(
        [*by, "_rank"], dropna=False)["_rank"].transform("size")
    tied = (sizes > 1) & rank.notna()
    return rank, tied.astype(bool)


def rank_label(rank: Any, tied: Any) -> str:
    """How a rank reads in a table: `3`, `=1` for a shared rank, `-` for none."""
    if rank is None or rank is pd.NA or (isinstance(rank, float) and rank != rank):
        return "-"
    return f"={int(rank)}" if bool(tied) else str(int(rank))


def format_value(v: Any, kind: str | None, spec: str = ".4f") -> str:
    """A value as its kind reads: a score with `spec` decimals, a count as a whole number, an amount with 4
    significant digits; `-` when missing."""
    if v is None or v is pd.NA:
        return "-"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if f != f:
        return "-"
    if kind == "count":
        return str(int(f)) if f.is_integer() else format(f, "g")
    if kind == "amount":
        return format(f, ".4g")
    return format(f, spec)


def usage_rows(rollouts: pd.DataFrame) -> list[dict]:
    """Latency percentiles, token and cost totals and the error rate of one partition's rollouts."""
    if rollouts is None or rollouts.empty:
        return []
    n = len(rollouts)
    errors = int((rollouts["status"] != "ok").sum())

    def col(name: str) -> pd.Series:
        return pd.to_numeric(rollouts[name], errors="coerce") if name in rollouts else pd.Series([np.nan] * n)

    lat = col("latency_s").dropna().to_numpy(dtype=float)
    values = {
        "latency_s_p50": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "latency_s_p95": float(np.percentile(lat, 95)) if len(lat) else float("nan"),
        "latency_s_mean": float(lat.mean()) if len(lat) else float("nan"),
        "input_tokens_total": float(col("input_tokens").fillna(0).sum()),
        "output_tokens_total": float(col("output_tokens").fillna(0).sum()),
        "cost_usd_total": float(col("cost").fillna(0).sum()),
        "rollout_error_rate": errors / n,
    }
    return _directed([{"metric": m, "slice": USAGE_SLICE, "value": v, "n": n, "n_unscored": 0, "n_errors": errors,
                       "stderr": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
                      for m, v in values.items()])


def judge_calls_of(details: Any) -> list[dict[str, Any]]:
    """The judge calls one verdict records (its `details.judges.<judge>.usage`: one call's usage, as `llm_judge`
    and `llm_score` record per judge, or a list of them, `hms_score`'s several calls per sample), cached ones
    included (`cached: true`, nothing paid)."""
    if isinstance(details, str):
        if '"usage"' not in details:
            return []
        try:
            details = json.loads(details)
        except ValueError:
            return []
    judges = details.get("judges") if isinstance(details, dict) else None
    out: list[dict[str, Any]] = []
    for v in (judges.values() if isinstance(judges, dict) else ()):
        u = v.get("usage") if isinstance(v, dict) else None
        out += [one for one in (u if isinstance(u, list) else [u]) if isinstance(one, dict)]
    return out


def judge_usage_rows(judgements: pd.DataFrame) -> list[dict]:
    """The judges' calls of one partition: calls sent (not cached), tokens, cost and mean latency, summed from
    each verdict's `details.judges.<judge>.usage`: one call's usage (what `llm_judge`/`llm_score` record per
    judge) or a list of them (`hms_score`'s several calls per sample, by role); no rows when no verdict records
    judge usage."""
    if judgements is None or judgements.empty or "details" not in judgements:
        return []
    calls = tin = tout = 0
    cost = latency = 0.0
    seen = False
    for text in judgements["details"]:
        if not isinstance(text, str):
            continue
        for one in judge_calls_of(text):
            seen = True
            if one.get("cached"):
                continue
            calls += 1
            tin += int(one.get("input_tokens") or 0)
            tout += int(one.get("output_tokens") or 0)
            cost += float(one.get("cost") or 0.0)
            latency += float(one.get("latency_s") or 0.0)
    if not seen:
        return []
    values = {"judge_calls": float(calls), "judge_input_tokens_total": float(tin),
              "judge_output_tokens_total": float(tout), "judge_cost_usd_total": cost,
              "judge_latency_s_mean": latency / calls if calls else float("nan")}
    return _directed([{"metric": m, "slice": USAGE_SLICE, "value": v, "n": calls, "n_unscored": 0, "n_errors": 0,
                       "stderr": float("nan"), "ci_low": float("nan"), "ci_high": float("nan")}
                      for m, v in values.items()])


USAGE_COLUMNS = ["status", "latency_s", "input_tokens", "output_tokens", "cost"]  # what usage_rows reads
AGGREGATE_COLUMNS = ["sample_id", "metric", "status", "score", "target", "slices", "details"]
_NO_DETAILS: dict = {}  # shared by every row without details (never mutated)


def compact_judgements(batches: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """The columns aggregation needs, from judgements read batch by batch, held compactly: metric, status and
    slices as categoricals (a million rows repeat a few values), scores as floats; about 150 bytes per row."""
    frames = []
    for b in batches:
        b = b[[c for c in AGGREGATE_COLUMNS if c in b.columns]].copy()
        for c in ("metric", "status", "slices"):
            if c in b.columns:
                b[c] = b[c].astype("category")
        frames.append(b)
    if not frames:
        return pd.DataFrame(columns=AGGREGATE_COLUMNS)
    from pandas.api.types import union_categoricals

    out = {}
    for c in frames[0].columns:
        cols = [f[c] for f in frames]
        if isinstance(cols[0].dtype, pd.CategoricalDtype) and len(cols) > 1:
            out[c] = pd.Series(union_categoricals(cols, ignore_order=True))
        else:
            out[c] = pd.concat(cols, ignore_index=True) if len(cols) > 1 else cols[0].reset_index(drop=True)
    return pd.DataFrame(out)


EPOCH_COUNTS = "epoch_counts"  # a reduced row's details: [counted epochs, epochs scoring >= 1] (for pass@k)
REDUCERS = ("mean", "median", "max", "at_least_<k>", "pass_at_<k>")


def epoch_reducer(name: str, epochs: int | None = None) -> Callable[[np.ndarray], float]:
    """The function reducing one sample's epoch scores (errors counted as 0) to its score, as Inspect AI's
    `mean_score`, `median_score`, `max_score`, `at_least(k)` (1 when at least k epochs score >= 1, else 0) and
    `pass_at(k)` (the unbiased pass@k over the sample's epochs). ValueError for an unknown name, or k > epochs."""
    name = str(name).strip()
    simple = {"mean": np.mean, "median": np.median, "max": np.max}
    if name in simple:
        fn = simple[name]
        return lambda v: float(fn(v))
    kind, _, k = name.rpartition("_")
    if kind in ("at_least", "pass_at") and k.isdigit() and int(k) >= 1:
        k_ = int(k)
        if epochs is not None and k_ > epochs:
            raise ValueError(f"epochs_reducer {name}: needs at least {k_} epochs, got epochs={epochs}; raise epochs "
                             f"or lower k")
        if kind == "at_least":
            return lambda v: float(int((v >= 1.0).sum()) >= k_)
        from evalpipe.metrics.pass_at_k import pass_at_k

        return lambda v: pass_at_k(len(v), int((v >= 1.0).sum()), k_) if len(v) >= k_ else 0.0
    raise ValueError(f"unknown epochs_reducer {name!r}; use one of {', '.join(REDUCERS)} (e.g. at_least_2)")


def _reduce_details(texts: list[Any], counts: list[int]) -> str:
    """One sample's details over its epochs: components and agreement averaged, ratios summed, pass_at_k kept,
    and the epoch counts for pass@k."""
    ds = [json.loads(t) if isinstance(t, str) and t else {} for t in texts]
    out: dict[str, Any] = {EPOCH_COUNTS: counts}
    names = sorted({c for d in ds for c in (d.get("components") or {})})
    if names:
        out["components"] = {c: float(np.mean([float((d.get("components") or {}).get(c, 0.0)) for d in ds]))
                             for c in names}
    agree = [float(d["agreement"]) for d in ds if "agreement" in d]
    if agree:
        out["agreement"] = float(np.mean(agree))
    ratio_names = sorted({r for d in ds for r in (d.get("ratios") or {})})
    if ratio_names:
        out["ratios"] = {r: [float(sum((d.get("ratios") or {}).get(r, [0, 0])[i] for d in ds)) for i in (0, 1)]
                         for r in ratio_names}
    ks = sorted({int(k) for d in ds for k in (d.get("pass_at_k") or [])})
    if ks:
        out["pass_at_k"] = ks
    return json.dumps(out)


def reduce_epochs(judgements: pd.DataFrame, reducer: str = "mean", epochs: int | None = None) -> pd.DataFrame:
    """One judgement row per sample and metric from the rows of its epochs (`<id>#epoch<e>`, core/run_marks.py),
    under the sample's own id; a frame without epoch rows is returned as it is. A sample's counted epochs (scored,
    error, parse_error; errors as 0) are reduced by `reducer` (`epoch_reducer`); its row is `scored` when one epoch
    was, else the first counted epoch's status; with no counted epoch, the first epoch's row as it is."""
    from evalpipe.core.run_marks import base_id

    if judgements.empty:
        return judgements
    ids = judgements["sample_id"].astype(str)
    base = ids.map(base_id)
    if (base == ids).all():
        return judgements
    reduce = epoch_reducer(reducer, epochs)
    j = judgements.assign(sample_id=base.to_numpy(), _order=np.arange(len(judgements)))
    if "details" not in j:
        j["details"] = None
    out = []
    for _, g in j.groupby(["metric", "sample_id"], sort=False, observed=True):
        first = g.iloc[0].to_dict()
        status = g["status"].astype(str)
        counted = g[status.isin(COUNTED).to_numpy()]
        if len(counted):
            vals = counted["score"].astype(float).fillna(0.0).to_numpy()
            statuses = counted["status"].astype(str).tolist()
            first["score"] = reduce(vals)
            first["status"] = "scored" if "scored" in statuses else statuses[0]
            first["details"] = _reduce_details(counted["details"].tolist(), [len(vals), int((vals >= 1.0).sum())])
        out.append(first)
    df = pd.DataFrame(out).sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)
    for c in ("metric", "status", "slices"):  # as compact_judgements holds them
        if c in df and isinstance(judgements[c].dtype, pd.CategoricalDtype):
            df[c] = df[c].astype("category")
    return df


def aggregate(judgements: pd.DataFrame, seed: int = 0, rollouts: pd.DataFrame | None = None,
              reducer: str = "mean", epochs: int | None = None) -> pd.DataFrame:
    """One row per metric and slice: `all`, plus `key=value` for each slice attribute of the samples;
    then the partition's usage rows when `rollouts` is given. Epoch rows are reduced per sample first
    (`reduce_epochs` with `reducer`; `epochs`: the split's count, to check the reducer's k)."""
    rows: list[dict] = []
    judge_rows = judge_usage_rows(judgements)  # every call, before epochs are reduced
    if not judgements.empty:
        judgements = reduce_epochs(judgements.reset_index(drop=True), reducer, epochs)
        slice_col = judgements["slices"].astype("category")
        slice_maps = [json.loads(v) if isinstance(v, str) and v else {} for v in slice_col.cat.categories]
        slice_codes = slice_col.cat.codes.to_numpy()
        raw_details = judgements["details"] if "details" in judgements else pd.Series([None] * len(judgements))
        has = raw_details.notna().to_numpy()
        details = pd.Series([_NO_DETAILS] * len(judgements), dtype=object)
        if has.any():
            details[has] = pd.Series([json.loads(s) if isinstance(s, str) and s else _NO_DETAILS
                                      for s in raw_details[has]], index=details.index[has], dtype=object)
        details.attrs["any_details"] = bool(has.any())
        if "target" not in judgements:
            judgements = judgements.assign(target=None)
        for metric, g in judgements.groupby("metric", sort=True, observed=True):
            start = len(rows)
            rows += _rows_for(metric, "all", g, details, seed)
            rows += _summary_rows(metric, g, details, seed)
            # slice name -> the slices values (category codes) that carry it; rows follow by their code
            names: dict[str, list[int]] = {}
            codes = slice_codes[g.index]
            for code in np.unique(codes):
                if code < 0:
                    continue
                for k, v in slice_maps[code].items():
                    for one in (dict.fromkeys(v) if isinstance(v, list) else [v]):  # a list: one slice per value
                        names.setdefault(f"{k}={one}", []).append(int(code))
            for name in sorted(names):
                rows += _rows_for(metric, name, g[np.isin(codes, names[name])], details, seed)
            _directed(rows[start:], str(metric))
    if rollouts is not None:
        rows += usage_rows(rollouts)
    rows += judge_rows
    # an empty partition (an empty shard, `limit: 0`) still has the metrics table's columns
    return pd.DataFrame(rows, columns=None if rows else
                        ["metric", "slice", "value", "n", "n_unscored", "n_errors", "stderr", "ci_low", "ci_high",
                         "higher_is_better", "kind"])
