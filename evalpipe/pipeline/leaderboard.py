"""The leaderboard: every partition's `all` slice ranked per benchmark split and metric by the metric's direction,
with partitions whose blocking gate failed listed unranked (the `leaderboard` asset, `evalpipe leaderboard`).

Apart from pipeline/stages.py, which re-exports these names, so that reading the leaderboard imports pandas and
the metrics' aggregation only, not the benchmarks, runners and metrics the evaluation stages need (issue 31)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from evalpipe.metrics.aggregate import format_value, rank_by_direction, rank_label, with_directions

if TYPE_CHECKING:
    from evalpipe.core.config import EvalConfig


def failed_gates(gates: pd.DataFrame | None) -> dict[tuple[str, str], str]:
    """{(benchmark_split, model): why} for each partition whose latest blocking gate outcome failed with severity
    ERROR (the `gates` table, written by the blocking asset checks)."""
    if gates is None or not len(gates):
        return {}
    bad = gates[(gates["passed"] == False) & (gates["severity"].fillna("ERROR") == "ERROR")]  # noqa: E712
    out: dict[tuple[str, str], str] = {}
    for r in bad.sort_values("check").itertuples(index=False):
        why = f"{r.check} failed" + (f": {r.description}" if isinstance(r.description, str) and r.description else "")
        key = (r.benchmark_split, r.model)
        out[key] = f"{out[key]}; {why}" if key in out else why
    return out


def intended_pairs_status(cfg: EvalConfig, board: pd.DataFrame) -> dict[str, Any]:
    """Where the config's intended (split, model) pairs stand (`EvalConfig.intended_pairs`: each split with its
    benchmark's `models:`, else default_models), from the leaderboard: `ranked`, `not_ranked` (a failed blocking
    gate), `missing` (no metrics yet). Dagster's graph counts the whole split x model product; this counts what the
    config means to run (docs/operations.md "The partition space")."""
    have = {(s, m): g for s, m, g in zip(board["benchmark_split"], board["model"],
                                         board["gate"] if "gate" in board else [None] * len(board))} \
        if len(board) else {}
    out: dict[str, Any] = {"intended": 0, "ranked": [], "not_ranked": [], "missing": []}
    for pair in cfg.intended_pairs():
        out["intended"] += 1
        if pair not in have:
            out["missing"].append(pair)
        else:
            out["not_ranked" if isinstance(have[pair], str) else "ranked"].append(pair)
    return out


def build_leaderboard(metrics: pd.DataFrame, include_limited: bool = False,
                      gates: pd.DataFrame | None = None) -> pd.DataFrame:
    """Slice `all` of every partition, ranked per benchmark split and metric by the metric's direction
    (docs/metrics.md "Direction"): competition ranking, best first (lower first for a lower-is-better metric),
    `tied` where a rank is shared; no rank for a missing value or a value with no better side. A partition whose
    blocking gate failed (`gates`) keeps its rows, unranked, with the reason in `gate`."""
    df = metrics[metrics["slice"] == "all"].drop(columns=["slice"]).copy()
    if not include_limited and len(df):  # `evalpipe run --limit N` partitions (<model>@limit<N>) never rank
        from evalpipe.core.run_marks import is_limited

        df = df[~df["model"].map(is_limited)]
    df = with_directions(df)  # partitions written before the columns existed: from the declarations
    if df.empty:
        return df.assign(rank=pd.Series(dtype="Int64"), tied=pd.Series(dtype="bool"), gate=pd.Series(dtype=object))
    blocked = failed_gates(gates)
    df["gate"] = [blocked.get((s, m)) for s, m in zip(df["benchmark_split"], df["model"])]
    ranked = df[df["gate"].isna()].copy()
    # a split whose samples are all unscored (GAIA test: answers hidden) has value NaN: no rank, not a crash
    ranked["rank"], ranked["tied"] = rank_by_direction(ranked, ["benchmark_split", "metric"]) if len(ranked) else ([], [])
    ranked["rank"], ranked["tied"] = ranked["rank"].astype("Int64"), ranked["tied"].astype(bool)
    off = df[df["gate"].notna()]
    off = off.assign(rank=pd.Series(pd.NA, index=off.index, dtype="Int64"), tied=False)
    # typed alike, and an empty part left out: concatenation never guesses a column's type from an all-NA part
    df = pd.concat([part for part in (ranked, off) if len(part)], ignore_index=True) if len(off) else ranked
    return df.sort_values(["benchmark_split", "metric", "rank", "model"], na_position="last").reset_index(drop=True)


def leaderboard_from(wh: Any, include_limited: bool = False) -> pd.DataFrame:
    """`build_leaderboard` over the warehouse's `metrics` (slice `all`) and `gates` tables, read through their
    rollups (evalpipe/store/rollup.py): one compact file refreshed by the partitions that changed, so a rebuild
    at 10,000 metric partitions does not open 10,000 files (docs/scale.md "Endpoint budgets" and the leaderboard)."""
    from evalpipe.store.rollup import table_rows

    return build_leaderboard(table_rows(wh, "metrics", "slice = 'all'"), include_limited=include_limited,
                             gates=table_rows(wh, "gates"))


def leaderboard_display(board: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard as people read it: rank `=1` where tied, the value as its kind reads (a count without
    decimals), and which side is better."""
    if not len(board):
        return pd.DataFrame(columns=["benchmark_split", "metric", "rank", "model", "value", "better", "kind", "n"])
    gate = board["gate"] if "gate" in board.columns else pd.Series([None] * len(board), index=board.index)
    out = pd.DataFrame({
        "benchmark_split": board["benchmark_split"], "metric": board["metric"],
        "rank": ["gate failed" if isinstance(g, str) else rank_label(r, t)
                 for r, t, g in zip(board["rank"], board["tied"], gate)], "model": board["model"],
        "value": [format_value(v, k) for v, k in zip(board["value"], board["kind"])],
        "better": [{True: "higher", False: "lower"}.get(h if h is not pd.NA else None, "-")
                   for h in board["higher_is_better"]],
        "kind": board["kind"], "n": board["n"]})
    if gate.notna().any():  # why a partition is off the ranking, said where it is listed
        out["gate"] = gate.fillna("").values
    return out.reset_index(drop=True)
