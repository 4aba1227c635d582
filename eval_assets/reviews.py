"""The `pairwise` and `reviews` assets: judges' pairwise preferences, and people's (and judges') reviews as the
warehouse's derived tables for metrics and the leaderboard.

- `pairwise` runs the config's `pairwise:` section (evalpipe/metrics/pairwise.py `run_pairwise`, as `evalpipe
  pairwise` does): each pair asked in both orders, the preferences appended to `reviews`. Without the section it
  records that there is nothing to do.
- `reviews` reads the `reviews` table (written by the viewer and by `pairwise`) and rewrites the derived tables
  `review_metrics` (the judges' calibration against people, metrics-shaped, per partition, judge and fingerprint)
  and `review_ranking` (the Bradley-Terry ranking per split and source), which the viewer's runs page shows beside
  the accuracy leaderboard; the counts and both tables are its metadata too.
Thin wiring: the numbers come from evalpipe/metrics/{pairwise,calibration,bradley_terry}.py.
"""

import hashlib

import pandas as pd
from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset

from evalpipe.metrics import bradley_terry, calibration
from evalpipe.metrics.pairwise import PairwiseRequest, run_pairwise
from resources import EvalConfigResource, WarehouseResource


def _md(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        return "-" if v is None or v != v else f"{v:.3f}" if isinstance(v, float) else str(v)

    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows])


@asset(group_name="reviews", description="A judge model's pairwise preferences between the config's `pairwise:` "
       "models on its split (both orders of every pair), appended to the `reviews` table.")
def pairwise(context: AssetExecutionContext, eval_config: EvalConfigResource,
             warehouse: WarehouseResource) -> MaterializeResult:
    cfg = eval_config.get()
    raw = cfg.raw.get("pairwise")
    if not raw:
        return MaterializeResult(metadata={"judged": MetadataValue.int(0), "note": MetadataValue.text(
            "no pairwise: section in the config: nothing to judge")})
    out = run_pairwise(warehouse.get(), PairwiseRequest.from_config(raw), cfg)
    return MaterializeResult(metadata={
        "judge": MetadataValue.text(out.judge), "judged": MetadataValue.int(out.judged),
        "skipped": MetadataValue.int(out.skipped), "judge_calls": MetadataValue.int(out.calls),
        "judge_cached": MetadataValue.int(out.cached),
        "pairs": MetadataValue.md(_md(out.pairs, list(out.pairs[0]) if out.pairs else []))})


@asset(group_name="reviews", deps=[pairwise], description="People's and judges' reviews (the warehouse's "
       "append-only `reviews` table): the judges' calibration (`review_metrics`) and the Bradley-Terry ranking per "
       "split (`review_ranking`), rewritten whole from the reviews.")
def reviews(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    wh = warehouse.get()
    con = wh.connect(["reviews", "judgements"])
    try:
        n, last = con.execute("SELECT count(*), max(review_id) FROM reviews").fetchone()
        cal = calibration.table_rows(con)
        ranking = bradley_terry.table_rows(con, resamples=200)
    finally:
        con.close()
    wh.write("review_metrics", pd.DataFrame(cal), {})
    wh.write("review_ranking", pd.DataFrame(ranking), {})
    refused = sorted({f"{r['benchmark_split']} ({r['source']}): {r['note']}" for r in ranking
                      if r.get("strength") is None})
    meta = {"reviews": MetadataValue.int(int(n)),
            "calibration": MetadataValue.md(_md(cal, ["benchmark_split", "model", "metric", "slice", "value", "n"])),
            "ranking": MetadataValue.md(_md([r for r in ranking if r.get("strength") is not None],
                                            ["benchmark_split", "source", "rank", "model", "strength", "ci_low",
                                             "ci_high", "comparisons"]))}
    if refused:
        meta["ranking_refused"] = MetadataValue.text("\n".join(refused))
    version = hashlib.sha256(f"{n}:{last}".encode()).hexdigest()[:16]
    return MaterializeResult(metadata=meta, data_version=DataVersion(version))
