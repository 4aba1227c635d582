"""Charts rendered on the server by matplotlib to SVG (no JavaScript, works offline). Pages embed them with
`<img src=...svg>`, so text a model wrote can never run as script inside them."""
from __future__ import annotations

import io
import math
from typing import Any

_MISSING = "-"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "figure.dpi": 100})
    return plt


def _svg(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    _plt().close(fig)
    return buf.getvalue()


def _empty(text: str) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 1))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center")
    return _svg(fig)


def _ok(v: Any) -> bool:
    return isinstance(v, (int, float)) and not math.isnan(v)


def _direction_note(higher_is_better: bool | None) -> str:
    return {True: "higher is better", False: "lower is better"}.get(higher_is_better, "no better side")


def _value_text(v: float, kind: str | None) -> str:
    from evalpipe.metrics.aggregate import format_value

    return format_value(v, kind, ".3f")


def heatmap_svg(data: dict[str, Any]) -> bytes:
    """models x benchmark splits, each cell the split's official metric. The colour is how good the value is,
    by the column's direction (a lower-is-better score in [0, 1] is coloured by 1 - value, so the same colour
    always means as good); a count, an amount or a metric with no better side is not coloured, only written."""
    if not data["models"] or not data["columns"]:
        return _empty("no metrics yet: run `evalpipe run`")
    import numpy as np

    plt = _plt()
    ncols = len(data["columns"])
    hib = data.get("higher_is_better") or [True] * ncols
    kinds = data.get("kinds") or ["score"] * ncols
    vals = np.array([[v if _ok(v) else np.nan for v in row] for row in data["values"]], dtype=float)
    good = np.full_like(vals, np.nan)
    for j in range(ncols):
        col = vals[:, j]
        if kinds[j] == "score" and hib[j] is not None and np.all(np.isnan(col) | ((col >= 0) & (col <= 1))):
            good[:, j] = col if hib[j] else 1.0 - col
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * ncols, 0.8 + 0.45 * len(data["models"])))
    im = ax.imshow(np.ma.masked_invalid(good), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    labels = [f"{c} {'↑' if h else '↓' if h is False else ''}".rstrip() for c, h in zip(data["columns"], hib)]
    ax.set_xticks(range(ncols), labels, rotation=20, ha="right")
    ax.set_yticks(range(len(data["models"])), data["models"])
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            v, g = vals[i, j], good[i, j]
            ax.text(j, i, _MISSING if np.isnan(v) else _value_text(v, kinds[j]), ha="center", va="center",
                    color="black" if np.isnan(g) or g >= 0.6 else "white")
    bar = fig.colorbar(im, ax=ax, fraction=0.04, ticks=[0, 1])
    bar.ax.set_yticklabels(["worse", "better"])
    ax.set_title("models x benchmarks (official metric, all samples; ↑ higher / ↓ lower is better)")
    return _svg(fig)


def slice_bars_svg(rows: list[dict[str, Any]], metric: str, higher_is_better: bool | None = True,
                   kind: str = "score") -> bytes:
    """Per-slice bars for each model, with the 95% CI as error bars (a score's; a count has none and its axis is
    not held to [0, 1]); the title says which side is better."""
    rows = [r for r in rows if _ok(r["value"])]
    if not rows:
        return _empty(f"no values of {metric}")
    import numpy as np

    plt = _plt()
    slices = list(dict.fromkeys(r["slice"] for r in rows))
    models = sorted({r["model"] for r in rows})
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(slices) * max(1, len(models)) ** 0.5 + 1.5), 3))
    for k, m in enumerate(models):
        by = {r["slice"]: r for r in rows if r["model"] == m}
        x = np.arange(len(slices)) + (k - (len(models) - 1) / 2) * width
        v = np.array([by[s]["value"] if s in by else np.nan for s in slices], dtype=float)
        lo = np.array([by[s]["ci_low"] if s in by and _ok(by[s]["ci_low"]) else np.nan for s in slices], dtype=float)
        hi = np.array([by[s]["ci_high"] if s in by and _ok(by[s]["ci_high"]) else np.nan for s in slices], dtype=float)
        err = np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)])
        ax.bar(x, v, width, label=m, yerr=np.nan_to_num(err) if kind == "score" else None, capsize=3)
    ax.set_xticks(range(len(slices)), slices)
    if kind == "score" and all(0 <= r["value"] <= 1 for r in rows):
        ax.set_ylim(0, 1.05)
    ax.set_ylabel(metric if kind == "score" else f"{metric} ({kind})")
    ax.set_title(f"{metric} per slice ({'95% CI; ' if kind == 'score' else ''}{_direction_note(higher_is_better)})")
    ax.legend(fontsize=8, loc="upper right")
    return _svg(fig)


def cost_accuracy_svg(rows: list[dict[str, Any]], metric: str, higher_is_better: bool | None = True,
                      kind: str = "score") -> bytes:
    """The metric against cost (total USD of the partition; output tokens when no model has a price); the axis
    label says which side is better."""
    rows = [r for r in rows if _ok(r["value"])]
    if not rows:
        return _empty(f"no values of {metric}")
    plt = _plt()
    priced = any(_ok(r["cost_usd"]) and r["cost_usd"] > 0 for r in rows)
    xkey, xlabel = ("cost_usd", "total cost (USD)") if priced else ("output_tokens", "output tokens (no prices known)")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for r in rows:
        x = r[xkey] if _ok(r[xkey]) else 0.0
        yerr = [[max(0.0, r["value"] - r["ci_low"])], [max(0.0, r["ci_high"] - r["value"])]] \
            if kind == "score" and _ok(r["ci_low"]) and _ok(r["ci_high"]) else None
        ax.errorbar([x], [r["value"]], yerr=yerr, fmt="o", capsize=3)
        ax.annotate(r["model"], (x, r["value"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{metric} ({_direction_note(higher_is_better)})")
    if kind == "score" and all(0 <= r["value"] <= 1 for r in rows):
        ax.set_ylim(-0.02, 1.05)
    ax.set_title(f"{metric} against cost")
    return _svg(fig)


def ranking_svg(rows: list[dict[str, Any]]) -> bytes:
    """Bradley-Terry strengths, best on top, with their bootstrap intervals (where there are any)."""
    if not rows:
        return _empty("no ranking yet: no pairwise preferences (or no finite fit)")
    import numpy as np

    plt = _plt()
    rows = list(reversed(rows))  # best at the top
    y = np.arange(len(rows))
    v = np.array([r["strength"] for r in rows], dtype=float)
    lo = np.array([r["ci_low"] if _ok(r["ci_low"]) else np.nan for r in rows], dtype=float)
    hi = np.array([r["ci_high"] if _ok(r["ci_high"]) else np.nan for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(5.5, 0.45 * len(rows) + 1.0))
    ax.errorbar(v, y, xerr=np.nan_to_num(np.vstack([np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)])),
                fmt="o", capsize=3)
    ax.axvline(0, color="#c9d1da", lw=1)
    ax.set_yticks(y, [r["model"] for r in rows])
    ax.set_xlabel("Bradley-Terry strength (log odds, mean 0)")
    ax.set_title("ranking by pairwise preference (95% bootstrap interval; higher is better)")
    return _svg(fig)
