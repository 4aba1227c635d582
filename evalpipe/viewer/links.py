"""What the Dagster UI shows of the viewer: a link to a partition's samples and a small chart in markdown
(the UI renders markdown metadata; bars are text, so they need no image host)."""
from __future__ import annotations

import math
import os
from urllib.parse import urlencode

VIEWER_URL_ENV = "EVALS_VIEWER_URL"
DEFAULT_VIEWER_URL = "http://127.0.0.1:8585"
BAR_WIDTH = 20


def viewer_url(split: str, model: str, metric: str | None = None) -> str:
    """The sample list of one partition in `evalpipe view --web` (base address: $EVALS_VIEWER_URL)."""
    base = (os.environ.get(VIEWER_URL_ENV) or DEFAULT_VIEWER_URL).rstrip("/")
    q = {"split": split, "model": model, **({"metric": metric} if metric else {})}
    return f"{base}/samples?{urlencode(q)}"


def _bar(v: float) -> str:
    n = max(0, min(BAR_WIDTH, int(round(v * BAR_WIDTH))))
    return "█" * n + "░" * (BAR_WIDTH - n)


def metrics_chart_md(df, usage_slice: str = "usage") -> str:
    """Per metric and slice: value, 95% CI and a bar (values in [0, 1]); usage rows left out."""
    if df is None or not len(df):
        return "_no metrics_"
    lines = ["| metric | slice | value | 95% CI | |", "|---|---|---:|---|---|"]
    for r in df[df["slice"] != usage_slice].itertuples(index=False):
        v = r.value
        ok = isinstance(v, (int, float)) and not math.isnan(v)
        low, high = getattr(r, "ci_low", None), getattr(r, "ci_high", None)  # an empty partition has no CI columns
        ci = ("-" if low is None or high is None or (isinstance(low, float) and math.isnan(low))
              else f"{low:.3f}-{high:.3f}")
        bar = f"`{_bar(v)}`" if ok and 0.0 <= v <= 1.0 else ""
        lines.append(f"| {r.metric} | {r.slice} | {v:.3f} | {ci} | {bar} |" if ok else
                     f"| {r.metric} | {r.slice} | - | {ci} | |")
    return "\n".join(lines)
