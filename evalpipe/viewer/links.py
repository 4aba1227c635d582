"""What the Dagster UI shows of the viewer: a link to a partition's samples and a small chart in markdown
(the UI renders markdown metadata; bars are text, so they need no image host)."""
from __future__ import annotations

import math
import os
from urllib.parse import urlencode

VIEWER_URL_ENV = "EVALS_VIEWER_URL"
DEFAULT_VIEWER_URL = "http://127.0.0.1:8585"
# The Dagster UI shows markdown metadata in a side panel about 600 px wide at a 1280 px window; a 20-cell bar and
# six columns ran past it (the table was cut). Four columns and an 8-cell bar fit (~410 px for a short metric name).
BAR_WIDTH = 8


def viewer_url(split: str, model: str, metric: str | None = None, sample_ids: list[str] | None = None,
               **filters: str) -> str:
    """The sample list of one partition in `evalpipe view --web` (base address: $EVALS_VIEWER_URL), narrowed to
    `sample_ids` (e.g. the samples that failed a gate) and the list's other `filters` (outcome, tool,
    fixture_miss, stop, ...: docs/viewer.md "Pages")."""
    base = (os.environ.get(VIEWER_URL_ENV) or DEFAULT_VIEWER_URL).rstrip("/")
    q = {"split": split, "model": model, **({"metric": metric} if metric else {}),
         **({"ids": ",".join(sample_ids)} if sample_ids is not None else {}),
         **{k: v for k, v in filters.items() if v not in (None, "")}}
    return f"{base}/samples?{urlencode(q)}"


def _bar(v: float) -> str:
    n = max(0, min(BAR_WIDTH, int(round(v * BAR_WIDTH))))
    return "█" * n + "░" * (BAR_WIDTH - n)


def metrics_chart_md(df, usage_slice: str = "usage") -> str:
    """Per metric and slice: the metric with which side is better (↑/↓), the value with its 95% CI, and a bar
    (scores in [0, 1]); usage rows left out. A count reads as a whole number, with no CI and no bar. Narrow on
    purpose: it must fit the Dagster UI's metadata panel."""
    if df is None or not len(df):
        return "_no metrics_"
    import pandas as pd

    from evalpipe.metrics.aggregate import format_value, with_directions

    df = with_directions(df)
    lines = ["| metric | slice | value (95% CI) | |", "|---|---|---|---|"]
    for r in df[df["slice"] != usage_slice].itertuples(index=False):
        v, kind, hib = r.value, r.kind, r.higher_is_better
        arrow = "" if hib is None or hib is pd.NA else " ↑" if hib else " ↓"
        ok = isinstance(v, (int, float)) and not math.isnan(v)
        low, high = getattr(r, "ci_low", None), getattr(r, "ci_high", None)  # an empty partition has no CI columns
        ci = ("" if kind != "score" or low is None or high is None or (isinstance(low, float) and math.isnan(low))
              else f" ({low:.2f}-{high:.2f})")
        bar = f" `{_bar(v)}` " if ok and kind == "score" and 0.0 <= v <= 1.0 else " "
        lines.append(f"| {r.metric}{arrow} | {r.slice} | {format_value(v, kind, '.3f')}{ci} |{bar}|")
    return "\n".join(lines)
