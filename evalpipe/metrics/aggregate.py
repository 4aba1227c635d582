"""From per-sample judgements to metric rows per (metric, slice)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

BOOTSTRAP_RESAMPLES = 1000


def _bootstrap_ci(values: np.ndarray, seed: int, level: float = 0.95) -> tuple[float, float]:
    if len(values) == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(BOOTSTRAP_RESAMPLES, len(values)), replace=True).mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def _summarise(metric: str, slice_name: str, g: pd.DataFrame, seed: int) -> dict:
    counted = g[g["status"].isin(["scored", "error", "parse_error"])]
    vals = counted["score"].fillna(0.0).to_numpy(dtype=float)  # an errored sample counts as wrong, and is counted
    n = len(vals)
    return {
        "metric": metric, "slice": slice_name, "value": float(vals.mean()) if n else float("nan"), "n": n,
        "n_unscored": int((g["status"] == "unscored").sum()),
        "n_errors": int(g["status"].isin(["error", "parse_error"]).sum()),
        "stderr": float(vals.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan"),
        **dict(zip(("ci_low", "ci_high"), _bootstrap_ci(vals, seed))),
    }


def aggregate(judgements: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per metric and slice: `all`, plus `key=value` for each slice attribute of the samples."""
    rows = []
    if judgements.empty:
        return pd.DataFrame(rows)
    slices = judgements["slices"].map(lambda s: json.loads(s) if isinstance(s, str) and s else {})
    for metric, g in judgements.groupby("metric", sort=True):
        rows.append(_summarise(metric, "all", g, seed))
        keyed: dict[str, list[int]] = {}
        for idx, sl in slices[g.index].items():
            for k, v in sl.items():
                keyed.setdefault(f"{k}={v}", []).append(idx)
        for name in sorted(keyed):
            rows.append(_summarise(metric, name, g.loc[keyed[name]], seed))
    return pd.DataFrame(rows)
