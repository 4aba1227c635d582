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


def heatmap_svg(data: dict[str, Any]) -> bytes:
    """models x benchmark splits, each cell the split's official metric."""
    if not data["models"] or not data["columns"]:
        return _empty("no metrics yet: run `evalpipe run`")
    import numpy as np

    plt = _plt()
    vals = np.array([[v if _ok(v) else np.nan for v in row] for row in data["values"]], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 + 1.5 * len(data["columns"]), 0.8 + 0.45 * len(data["models"])))
    im = ax.imshow(np.ma.masked_invalid(vals), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(data["columns"])), data["columns"], rotation=20, ha="right")
    ax.set_yticks(range(len(data["models"])), data["models"])
    for i in range(vals.shape[0]):
        for j in range(vals.shape[1]):
            v = vals[i, j]
            ax.text(j, i, _MISSING if np.isnan(v) else f"{v:.3f}", ha="center", va="center",
                    color="black" if np.isnan(v) or v >= 0.6 else "white")
    fig.colorbar(im, ax=ax, fraction=0.04)
    ax.set_title("models x benchmarks (official metric, all samples)")
    return _svg(fig)


def slice_bars_svg(rows: list[dict[str, Any]], metric: str) -> bytes:
    """Per-slice bars for each model, with the 95% CI as error bars."""
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
        ax.bar(x, v, width, label=m, yerr=np.nan_to_num(err), capsize=3)
    ax.set_xticks(range(len(slices)), slices)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per slice (95% CI)")
    ax.legend(fontsize=8, loc="upper right")
    return _svg(fig)


def cost_accuracy_svg(rows: list[dict[str, Any]], metric: str) -> bytes:
    """Accuracy against cost (total USD of the partition; output tokens when no model has a price)."""
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
            if _ok(r["ci_low"]) and _ok(r["ci_high"]) else None
        ax.errorbar([x], [r["value"]], yerr=yerr, fmt="o", capsize=3)
        ax.annotate(r["model"], (x, r["value"]), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_ylim(-0.02, 1.05)
    ax.set_title(f"{metric} against cost")
    return _svg(fig)
