"""The `reviews` asset: people's (and judges') reviews as Dagster sees them, for metrics and the leaderboard.

The viewer appends reviews to the warehouse's `reviews` table as they are recorded (evalpipe/viewer/reviews.py);
this asset reads them back and records, as its materialization's metadata, how many there are, the judges'
calibration against people (evalpipe/metrics/calibration.py, also as metrics-shaped rows) and the Bradley-Terry
ranking per split (evalpipe/metrics/bradley_terry.py). Thin wiring: the numbers come from those modules.
"""

import hashlib

from dagster import AssetExecutionContext, DataVersion, MaterializeResult, MetadataValue, asset

from evalpipe.metrics import bradley_terry, calibration
from evalpipe.metrics.reviews import preferences
from resources import WarehouseResource


def _md(rows: list[dict], cols: list[str]) -> str:
    def cell(v):
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                     + ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows])


@asset(group_name="reviews", description="People's and judges' reviews (the warehouse's append-only `reviews` "
       "table, written by the viewer): counts, judge calibration and the Bradley-Terry ranking per split.")
def reviews(context: AssetExecutionContext, warehouse: WarehouseResource) -> MaterializeResult:
    wh = warehouse.get()
    con = wh.connect(["reviews", "judgements"])
    try:
        n, last = con.execute("SELECT count(*), max(review_id) FROM reviews").fetchone()
        cal = calibration.calibration(calibration.pairs(con))
        splits = [r[0] for r in con.execute("SELECT DISTINCT benchmark_split FROM reviews WHERE kind = 'pairwise' "
                                            "ORDER BY 1").fetchall()]
        rankings, notes = [], []
        for split in splits:
            try:
                r = bradley_terry.rank(preferences(con, split), resamples=200)
                rankings += [{"split": split, **row} for row in r.rows]
            except ValueError as exc:
                notes.append(f"{split}: {exc}")
    finally:
        con.close()
    meta = {"reviews": MetadataValue.int(int(n)),
            "calibration": MetadataValue.md(_md(calibration.metric_rows(cal), ["metric", "slice", "value", "n"])),
            "ranking": MetadataValue.md(_md(rankings, ["split", "rank", "model", "strength", "ci_low", "ci_high",
                                                       "comparisons"]))}
    if notes:
        meta["ranking_refused"] = MetadataValue.text("\n".join(notes))
    version = hashlib.sha256(f"{n}:{last}".encode()).hexdigest()[:16]
    return MaterializeResult(metadata=meta, data_version=DataVersion(version))
