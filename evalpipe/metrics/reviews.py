"""The warehouse's `reviews` table as the metrics read and write it: people's verdicts and preferences (recorded by
the viewer) and judges' preferences (evalpipe/metrics/pairwise.py). Append-only: each review is a new partition file
(benchmark_split, review_id), never rewritten; where one reviewer reviewed the same item more than once, the
latest review counts and the earlier ones stay as history. No model is called here (the viewer imports it).
"""
from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Sequence


def new_review_id() -> str:
    """Time-ordered and unique: a review's partition key (one file per review, never rewritten)."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f") + "-" + uuid.uuid4().hex[:8]


def write_reviews(warehouse, rows: Sequence[dict[str, Any]]) -> list[str]:
    """Append reviews: one new partition file each (benchmark_split, review_id); nothing is overwritten."""
    import pandas as pd

    from evalpipe.core.errors import WarehouseError

    ids = []
    for row in rows:
        part = {"benchmark_split": row["benchmark_split"], "review_id": row["review_id"]}
        if warehouse.partition_file("reviews", part).exists():  # (a review id is never reused)
            raise WarehouseError(f"review {row['review_id']} already exists; reviews are never overwritten")
        warehouse.write("reviews", pd.DataFrame([row]), part)
        ids.append(row["review_id"])
    return ids


def latest_reviews_sql(kind: str) -> str:
    """Each reviewer's latest review per item (history is kept; the latest one counts)."""
    item = "benchmark_split, sample_id, model" + (", model_b" if kind == "pairwise" else "")
    return (f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY reviewer, {item} ORDER BY created_at DESC, "
            f"review_id DESC) AS _k FROM reviews WHERE kind = '{kind}') WHERE _k = 1")


def preferences(con, split: str | None = None, source: str | None = None) -> list[tuple[str, str, float]]:
    """(model_a, model_b, outcome) from the reviews (1 = a preferred, 0 = b, 0.5 = tie)."""
    sql = f"SELECT model, model_b, preference FROM ({latest_reviews_sql('pairwise')}) WHERE preference IS NOT NULL"
    params: list[Any] = []
    if split:
        sql += " AND benchmark_split = ?"
        params.append(split)
    if source:
        sql += " AND source = ?"
        params.append(source)
    value = {"a": 1.0, "b": 0.0, "tie": 0.5}
    return [(a, b, value[p]) for a, b, p in con.execute(sql, params).fetchall() if p in value]
