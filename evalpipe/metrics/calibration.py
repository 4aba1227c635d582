"""Judge calibration: how often a model-graded metric's judges agree with people's verdicts.

People mark samples right or wrong in the viewer (the `reviews` table, kind verdict; each reviewer's latest verdict
on a sample counts, each reviewer's verdict is one comparison). For every model-graded metric (a judgement whose
details carry `judges`), each judge's own verdict on that sample is set against each person's: per metric, judge
model and judge fingerprint (the metric's identity: its prompt, settings and judges), the agreement (accuracy,
people as the truth), Cohen's kappa and the confusion matrix, all from scikit-learn. Kappa is None (never 0 or
1 made up) when it is undefined: every verdict on both sides in one class.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

from evalpipe.metrics.reviews import latest_reviews_sql

LABELS = [True, False]  # right, wrong: rows = people, columns = the judge


def pairs(con, split: str | None = None) -> list[dict[str, Any]]:
    """One row per (person's verdict, judge verdict) on the same sample and metric."""
    sql = f"""SELECT r.benchmark_split, r.model, r.sample_id, r.reviewer, r.verdict, j.metric, j.details,
                     j.judge_fingerprint, j.correct, j.status
              FROM ({latest_reviews_sql('verdict')}) r
              JOIN judgements j ON j.benchmark_split = r.benchmark_split AND j.model = r.model
                   AND j.sample_id = r.sample_id
              WHERE r.source = 'person' AND r.verdict IN ('right', 'wrong')"""
    params: list[Any] = []
    if split:
        sql += " AND r.benchmark_split = ?"
        params.append(split)
    cur = con.execute(sql + " ORDER BY j.metric, r.benchmark_split, r.model, r.sample_id, r.reviewer", params)
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        r = dict(zip(cols, row))
        try:
            details = json.loads(r["details"]) if r["details"] else {}
        except ValueError:
            details = {}
        judges = details.get("judges") if isinstance(details, dict) else None
        if not isinstance(judges, dict) or not judges:
            continue  # not model-graded
        person = r["verdict"] == "right"
        base = {k: r[k] for k in ("benchmark_split", "model", "sample_id", "reviewer", "metric")}
        fp = r["judge_fingerprint"] or "-"
        for name, v in judges.items():
            if isinstance(v, dict) and v.get("status") == "scored" and v.get("score") is not None:
                out.append({**base, "judge": name, "fingerprint": fp, "person": person,
                            "judge_verdict": float(v["score"]) >= 0.5})
        if len(judges) > 1 and r["status"] == "scored" and r["correct"] is not None:
            out.append({**base, "judge": "(combined)", "fingerprint": fp, "person": person,
                        "judge_verdict": bool(r["correct"])})
    return out


def agreement(person: list[bool], judge: list[bool]) -> dict[str, Any]:
    """n, accuracy, Cohen's kappa and the confusion matrix (people x judge, right first) of paired verdicts."""
    from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix

    n = len(person)
    if n == 0:
        return {"n": 0, "accuracy": None, "kappa": None, "confusion": [[0, 0], [0, 0]]}
    cm = confusion_matrix(person, judge, labels=LABELS)
    kappa = None
    if len(set(person) | set(judge)) > 1:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            k = float(cohen_kappa_score(person, judge, labels=LABELS))
        kappa = None if math.isnan(k) else k
    return {"n": n, "accuracy": float(accuracy_score(person, judge)), "kappa": kappa,
            "confusion": [[int(v) for v in row] for row in cm]}


def calibration(rows: Iterable[dict[str, Any]], by: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One row per (*by, metric, judge, fingerprint): agreement() of its pairs, plus `reviewers` and `samples`.
    `by`: also split by these keys of the pairs (e.g. ("benchmark_split", "model"): one row per partition)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in by) + (r["metric"], r["judge"], r["fingerprint"]), []).append(r)
    out = []
    for key, rs in sorted(groups.items()):
        metric, judge, fp = key[len(by):]
        a = agreement([r["person"] for r in rs], [r["judge_verdict"] for r in rs])
        out.append({**dict(zip(by, key)), "metric": metric, "judge": judge, "fingerprint": fp, **a,
                    "reviewers": len({r["reviewer"] for r in rs}),
                    "samples": len({(r["benchmark_split"], r["model"], r["sample_id"]) for r in rs})})
    return out


def metric_rows(cal: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calibration as metrics-shaped rows: `<metric>_human_agreement` and `<metric>_human_kappa`, sliced by
    `judge=<judge>,fingerprint=<first 12>`."""
    out = []
    for c in cal:
        sl = f"judge={c['judge']},fingerprint={str(c['fingerprint'])[:12]}"
        for suffix, key in (("human_agreement", "accuracy"), ("human_kappa", "kappa")):
            out.append({"metric": f"{c['metric']}_{suffix}", "slice": sl, "value": c[key], "n": c["n"],
                        "higher_is_better": True, "kind": "score"})
    return out


def table_rows(con) -> list[dict[str, Any]]:
    """The warehouse's `review_metrics` rows: metric_rows() per partition (benchmark_split, model: the model whose
    samples were judged and reviewed), the agreement with its Wilson 95% interval (metrics/aggregate.py, as for any
    right/wrong rate), kappa without one."""
    from evalpipe.metrics.aggregate import wilson_ci

    out = []
    for c in calibration(pairs(con), by=("benchmark_split", "model")):
        for m in metric_rows([c]):
            lo = hi = None
            if m["metric"].endswith("_human_agreement") and c["n"]:
                lo, hi = wilson_ci(int(round(c["accuracy"] * c["n"])), c["n"])
            out.append({"benchmark_split": c["benchmark_split"], "model": c["model"], **m, "ci_low": lo,
                        "ci_high": hi, "judge": c["judge"], "fingerprint": c["fingerprint"],
                        "reviewers": c["reviewers"]})
    return out
