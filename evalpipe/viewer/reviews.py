"""Reviews in the viewer: people mark samples right or wrong (with rubric scores and a comment) and say which of two
models answered a sample better; the pages of judge calibration, the Bradley-Terry ranking and the model x sample
matrix. Writes go to the warehouse's append-only `reviews` table (one new partition file per review); what is
shown is read back from it, so a reload shows exactly what was stored.

Queues: each item (a sample of a model; a sample of a pair of models) is meant for `reviewers_per_item` people. A
reviewer is handed the first item they have not reviewed that still has an open place, counting the places held by
other people's open reservations (`reserve_s`; kept in a SQLite file beside the warehouse, so a restart keeps them). The pairwise page is blind: the form
carries only an opaque item number; the two models, in a random order, are known to the server alone.
"""
from __future__ import annotations

import json
import random
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from evalpipe.metrics import bradley_terry, calibration
from evalpipe.metrics.reviews import latest_reviews_sql, new_review_id, preferences, write_reviews
from evalpipe.viewer import queries

NAME = re.compile(r"^[\w.@+ -]{1,64}$")
MAX_COMMENT = 4000
VERDICTS = ("right", "wrong")
CHOICES = ("left", "right", "tie")


@dataclass
class ReviewSettings:
    """The `reviews:` section of the config (docs/config.md "reviews"), handed to the viewer by `evalpipe view --web`."""

    rubric: dict[str, list[Any]] = field(default_factory=dict)  # criterion -> allowed scores
    identity_header: str | None = None  # e.g. X-Forwarded-User set by an authenticating proxy
    reviewers_per_item: int = 1
    reserve_s: float = 900.0
    bootstrap: int = 200  # Bradley-Terry resamples on the ranking page

    @classmethod
    def from_config(cls, raw: dict[str, Any] | None) -> "ReviewSettings":
        raw = dict(raw or {})
        rubric = {}
        for name, scores in (raw.get("rubric") or {}).items():
            rubric[str(name)] = list(scores) if isinstance(scores, (list, tuple)) else list(range(1, int(scores) + 1))
        return cls(rubric=rubric, identity_header=raw.get("identity_header") or None,
                   reviewers_per_item=int(raw.get("reviewers_per_item") or 1),
                   reserve_s=float(raw.get("reserve_minutes") or 15) * 60.0,
                   bootstrap=int(raw.get("bootstrap") if raw.get("bootstrap") is not None else 200))


class Reservations:
    """Open items held for a reviewer until they answer or `reserve_s` passes, and the blind pairs handed out (an
    opaque item number -> which models it shows, where). Kept in a small SQLite file beside the warehouse
    (`<warehouse>.reservations.sqlite`), so a restarted viewer (or a second one on the same warehouse) still knows
    them; in memory only for a viewer with no warehouse file. Times are wall-clock (they outlive the process)."""

    def __init__(self, ttl: float, path: str | None = None):
        import sqlite3

        self.ttl = ttl
        self.path = str(path) if path else ":memory:"
        self.lock = threading.Lock()
        if path:
            from pathlib import Path

            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.con = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        if path:
            from evalpipe.store.sqlite_files import use_wal

            use_wal(self.con, 30)
        self.con.execute("CREATE TABLE IF NOT EXISTS held (item TEXT, reviewer TEXT, expires REAL, "
                         "PRIMARY KEY (item, reviewer))")
        self.con.execute("CREATE TABLE IF NOT EXISTS pairs (token TEXT PRIMARY KEY, reviewer TEXT, shown TEXT, "
                         "expires REAL)")

    @staticmethod
    def _key(item: tuple) -> str:
        return json.dumps(list(item))

    def _sweep(self) -> None:
        now = time.time()
        self.con.execute("DELETE FROM held WHERE expires < ?", [now])
        self.con.execute("DELETE FROM pairs WHERE expires < ?", [now])

    def others(self, item: tuple, reviewer: str) -> int:
        """How many other reviewers hold the item now."""
        with self.lock:  # (no sweep: the queue asks this once per candidate item; hold() sweeps)
            return self.con.execute("SELECT count(*) FROM held WHERE item = ? AND reviewer != ? AND expires >= ?",
                                    [self._key(item), reviewer, time.time()]).fetchone()[0]

    def hold(self, item: tuple, reviewer: str) -> None:
        with self.lock:
            self._sweep()
            self.con.execute("INSERT OR REPLACE INTO held VALUES (?, ?, ?)",
                             [self._key(item), reviewer, time.time() + self.ttl])

    def release(self, item: tuple, reviewer: str) -> None:
        with self.lock:
            self.con.execute("DELETE FROM held WHERE item = ? AND reviewer = ?", [self._key(item), reviewer])

    def pair(self, shown: dict[str, Any]) -> str:
        token = secrets.token_urlsafe(12)
        with self.lock:
            self._sweep()
            self.con.execute("INSERT INTO pairs VALUES (?, ?, ?, ?)",
                             [token, shown["reviewer"], json.dumps(shown), time.time() + self.ttl])
        return token

    def take_pair(self, token: str, reviewer: str) -> dict[str, Any] | None:
        """The pair behind `token`, if it is this reviewer's and still open; taken once (a second answer fails)."""
        with self.lock:
            self._sweep()
            row = self.con.execute("DELETE FROM pairs WHERE token = ? AND reviewer = ? RETURNING shown",
                                   [token, reviewer]).fetchone()
        return json.loads(row[0]) if row else None

    def close(self) -> None:
        self.con.close()


def reservations_path(warehouse) -> str | None:
    """Where a viewer on `warehouse` keeps its reservations: beside the warehouse's DuckDB file."""
    path = getattr(warehouse, "duckdb_path", None)
    if path is None or not hasattr(warehouse, "write"):
        return None
    return str(path.with_name(path.name + ".reservations.sqlite"))


def check_name(name: str | None) -> str:
    name = (name or "").strip()
    if not NAME.match(name):
        raise ValueError("a reviewer name is 1-64 letters, digits, spaces or . @ + - _")
    return name


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _latest(con, kind: str, where: str = "", params: list | None = None) -> list[dict[str, Any]]:
    return queries._records(con.execute(f"SELECT * EXCLUDE (_k) FROM ({latest_reviews_sql(kind)}) {where}",
                                        params or []))


# ---- one sample: its review form and its history ------------------------------------------------------------------
def review_page(con, settings: ReviewSettings, split: str, model: str, sample_id: str) -> dict[str, Any] | None:
    s = queries.sample(con, split, model, sample_id)
    if s is None:
        return None
    history = queries._records(con.execute(
        "SELECT review_id, reviewer, created_at, verdict, rubric, comment FROM reviews WHERE kind = 'verdict' "
        "AND benchmark_split = ? AND model = ? AND sample_id = ? ORDER BY created_at, review_id",
        [split, model, sample_id]))
    for h in history:
        h["rubric"] = queries._loads(h["rubric"], {}) or {}
    prompt = next((m["content"] for m in reversed(s["messages"]) if m.get("role") == "user"), None)
    return {"benchmark_split": split, "model": model, "sample_id": sample_id, "question": prompt,
            "prediction": s["rollout"].get("prediction"), "raw_output": s["rollout"].get("raw_output"),
            "target": s["target"], "verdicts": s["verdicts"], "history": history, "rubric": settings.rubric}


def verdict_row(settings: ReviewSettings, reviewer: str, form: dict[str, str]) -> dict[str, Any]:
    """A `reviews` row from the review form; ValueError (a 400) for anything the form should not hold."""
    split, model, sid = (form.get(k, "").strip() for k in ("split", "model", "id"))
    if not (split and model and sid):
        raise ValueError("the review form needs split, model and id")
    verdict = form.get("verdict") or None
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}")
    scores = {}
    for name, allowed in settings.rubric.items():
        v = form.get(f"rubric_{name}")
        if v in (None, ""):
            continue
        match = [a for a in allowed if str(a) == v]
        if not match:
            raise ValueError(f"rubric {name!r} takes one of {', '.join(map(str, allowed))}")
        scores[name] = match[0]
    comment = (form.get("comment") or "").strip()[:MAX_COMMENT] or None
    if verdict is None and not scores and comment is None:
        raise ValueError("nothing to record: give a verdict, a rubric score or a comment")
    return {"review_id": new_review_id(), "benchmark_split": split, "reviewer": reviewer, "source": "person",
            "created_at": now(), "kind": "verdict", "sample_id": sid, "model": model, "verdict": verdict,
            "rubric": json.dumps(scores, sort_keys=True) if scores else None, "comment": comment}


def next_sample(con, settings: ReviewSettings, held: Reservations, reviewer: str, split: str,
                model: str | None = None) -> tuple[str, str] | None:
    """The next (model, sample_id) of `split` for this reviewer (see the module's docstring), reserved for them."""
    metric = queries.primary_metric(con, split)
    sql = ("SELECT j.model, j.sample_id, count(DISTINCT r.reviewer) AS done, "
           "coalesce(bool_or(r.reviewer = ?), FALSE) AS mine FROM judgements j "
           "LEFT JOIN prompts d ON d.benchmark_split = j.benchmark_split AND d.model = j.model "
           "AND d.sample_id = j.sample_id "
           f"LEFT JOIN ({latest_reviews_sql('verdict')}) r ON r.benchmark_split = j.benchmark_split "
           "AND r.model = j.model AND r.sample_id = j.sample_id AND r.source = 'person' "
           "WHERE j.benchmark_split = ? AND j.metric = ?" + (" AND j.model = ?" if model else "") +
           " GROUP BY j.model, j.sample_id, d.sample_index ORDER BY d.sample_index, j.sample_id, j.model")
    params = [reviewer, split, metric] + ([model] if model else [])
    for m, sid, done, mine in con.execute(sql, params).fetchall():
        if mine:
            continue
        item = ("verdict", split, m, sid)
        if done + held.others(item, reviewer) < settings.reviewers_per_item:
            held.hold(item, reviewer)
            return m, sid
    return None


# ---- pairwise ------------------------------------------------------------------------------------------------------
def next_pair(con, settings: ReviewSettings, held: Reservations, reviewer: str, split: str,
              rng: random.Random) -> dict[str, Any] | None:
    """The next sample and pair of models (both answered it) for this reviewer, shown in a random order."""
    rows = con.execute(
        f"""SELECT a.sample_id, a.model, b.model, count(DISTINCT r.reviewer) AS done,
                   coalesce(bool_or(r.reviewer = ?), FALSE) AS mine
            FROM rollouts a JOIN rollouts b ON b.benchmark_split = a.benchmark_split AND b.sample_id = a.sample_id
                 AND b.model > a.model AND b.status = 'ok'
            LEFT JOIN prompts d ON d.benchmark_split = a.benchmark_split AND d.model = a.model
                 AND d.sample_id = a.sample_id
            LEFT JOIN ({latest_reviews_sql('pairwise')}) r ON r.benchmark_split = a.benchmark_split
                 AND r.sample_id = a.sample_id AND r.model = a.model AND r.model_b = b.model AND r.source = 'person'
            WHERE a.benchmark_split = ? AND a.status = 'ok'
            GROUP BY a.sample_id, a.model, b.model, d.sample_index ORDER BY d.sample_index, a.sample_id, 2, 3""",
        [reviewer, split]).fetchall()
    shown_models = set(queries.shown_models(queries.models(con, split)))
    for sid, a, b, done, mine in rows:
        if mine or a not in shown_models or b not in shown_models:
            continue
        item = ("pairwise", split, sid, a, b)
        if done + held.others(item, reviewer) >= settings.reviewers_per_item:
            continue
        held.hold(item, reviewer)
        left, right = (a, b) if rng.random() < 0.5 else (b, a)
        answers = dict(con.execute("SELECT model, prediction FROM rollouts WHERE benchmark_split = ? AND sample_id = ? "
                                   "AND model IN (?, ?)", [split, sid, a, b]).fetchall())
        p = con.execute("SELECT messages, target FROM prompts WHERE benchmark_split = ? AND model = ? AND sample_id = ?",
                        [split, a, sid]).fetchone()
        messages = queries._loads(p[0], []) if p else []
        question = next((m.get("content") for m in reversed(messages or []) if m.get("role") == "user"), None)
        token = held.pair({"reviewer": reviewer, "split": split, "sample_id": sid, "a": a, "b": b, "left": left,
                           "right": right})
        return {"item": token, "split": split, "sample_id": sid, "question": question,
                "target": p[1] if p else None, "left_answer": answers.get(left), "right_answer": answers.get(right)}
    return None


def pairwise_row(reviewer: str, shown: dict[str, Any], choice: str, comment: str | None) -> dict[str, Any]:
    if choice not in CHOICES:
        raise ValueError(f"choice must be one of {', '.join(CHOICES)}")
    preferred = {"left": shown["left"], "right": shown["right"], "tie": None}[choice]
    pref = "tie" if preferred is None else ("a" if preferred == shown["a"] else "b")
    return {"review_id": new_review_id(), "benchmark_split": shown["split"], "reviewer": reviewer, "source": "person",
            "created_at": now(), "kind": "pairwise", "sample_id": shown["sample_id"], "model": shown["a"],
            "model_b": shown["b"], "preference": pref, "shown_left": shown["left"],
            "comment": (comment or "").strip()[:MAX_COMMENT] or None}


def record(warehouse, row: dict[str, Any]) -> str:
    if not hasattr(warehouse, "write"):
        raise ValueError("reviews are stored in the warehouse: this viewer reads a results file "
                         "(run `evalpipe view --web` without RESULTS to review)")
    return write_reviews(warehouse, [row])[0]


# ---- read pages -----------------------------------------------------------------------------------------------------
def export(con, split: str | None = None) -> list[dict[str, Any]]:
    """Every review (the whole history), oldest first."""
    where, params = ("WHERE benchmark_split = ?", [split]) if split else ("", [])
    rows = queries._records(con.execute(f"SELECT * FROM reviews {where} ORDER BY created_at, review_id", params))
    for r in rows:
        r["rubric"] = queries._loads(r["rubric"], None)
    return rows


def stored_ranking(con, split: str | None = None, source: str = "all") -> list[dict[str, Any]]:
    """The Bradley-Terry ranking the `reviews` asset wrote (`review_ranking`), best first per split; a refused fit
    is its models with no strength and the reason in `note`."""
    where, params = "WHERE source = ?", [source]
    if split:
        where += " AND benchmark_split = ?"
        params.append(split)
    return queries._records(con.execute(
        f"SELECT * FROM review_ranking {where} ORDER BY benchmark_split, rank NULLS LAST, model", params))


def rubric_page(con, settings: ReviewSettings, split: str | None = None) -> dict[str, Any]:
    """People's rubric scores per split, model and rubric item (each reviewer's latest review per sample counts):
    how many, the mean (where every score is a number) and how often each score was given (the config's scores
    first, then any other recorded ones)."""
    where, params = "WHERE rubric IS NOT NULL AND source = 'person'", []
    if split:
        where += " AND benchmark_split = ?"
        params.append(split)
    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in _latest(con, "verdict", where + " ORDER BY benchmark_split, model", params):
        got.setdefault((r["benchmark_split"], r["model"]), []).append(queries._loads(r["rubric"], {}) or {})
    criteria = list(settings.rubric)
    for scores in got.values():
        criteria += [c for s in scores for c in s if c not in criteria]
    rows = []
    for (sp, model), reviews in sorted(got.items()):
        for c in criteria:
            given = [s[c] for s in reviews if c in s]
            keys = [str(v) for v in settings.rubric.get(c, [])]
            keys += [k for k in dict.fromkeys(str(v) for v in given) if k not in keys]
            numeric = bool(given) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in given)
            rows.append({"benchmark_split": sp, "model": model, "criterion": c, "n": len(given),
                         "mean": sum(given) / len(given) if numeric else None,
                         "counts": {k: sum(str(v) == k for v in given) for k in keys}})
    return {"split": split, "splits": queries.splits(con), "criteria": criteria, "rows": rows}


def calibration_page(con, split: str | None = None) -> dict[str, Any]:
    pairs = calibration.pairs(con, split)
    n_reviews = con.execute("SELECT count(*) FROM reviews WHERE kind = 'verdict' AND source = 'person'"
                            + (" AND benchmark_split = ?" if split else ""), [split] if split else []).fetchone()[0]
    return {"split": split, "splits": queries.splits(con), "rows": calibration.calibration(pairs),
            "n_reviews": int(n_reviews), "n_pairs": len(pairs)}


def ranking_page(con, settings: ReviewSettings, split: str | None = None, source: str | None = None,
                 seed: int = 0) -> dict[str, Any]:
    if source not in (None, "person", "judge"):
        raise ValueError("source must be person or judge (or left out: both)")
    prefs = preferences(con, split, source)
    out: dict[str, Any] = {"split": split, "source": source, "splits": queries.splits(con), "n": len(prefs),
                           "rows": [], "note": None, "resamples": settings.bootstrap, "resamples_fitted": 0}
    if not prefs:
        out["note"] = "no pairwise preferences yet: record some on the pairwise page"
        return out
    try:
        r = bradley_terry.rank(prefs, resamples=settings.bootstrap, seed=seed)
    except ValueError as exc:
        out["note"] = str(exc)
        return out
    out.update(rows=r.rows, note=r.note, resamples_fitted=r.resamples_fitted)
    return out


def matrix_page(con, split: str, metric: str | None, baseline: str | None, show: str | None,
                include_tries: bool = False, limit: int = 500) -> dict[str, Any]:
    """models x samples of one metric: each cell correct / incorrect / unscored / error. `baseline`: a model the
    others are set against (cells `better` / `worse` where they differ from it). `show`: all | disagree (samples
    where the models differ) | better | worse (than the baseline, by some model)."""
    metric = metric or queries.primary_metric(con, split)
    models_ = queries.shown_models(queries.models(con, split), include_tries)
    if baseline and baseline not in models_:
        raise ValueError(f"baseline {baseline!r} has no results on {split}; models: {', '.join(models_)}")
    if show not in (None, "all", "disagree", "better", "worse"):
        raise ValueError("show must be all, disagree, better or worse")
    if (show in ("better", "worse")) and not baseline:
        raise ValueError(f"show={show} needs a baseline model")
    rows = con.execute(
        """SELECT j.sample_id, d.sample_index, j.model, j.status, j.correct, r.status
           FROM judgements j
           LEFT JOIN prompts d ON d.benchmark_split = j.benchmark_split AND d.model = j.model AND d.sample_id = j.sample_id
           LEFT JOIN rollouts r ON r.benchmark_split = j.benchmark_split AND r.model = j.model AND r.sample_id = j.sample_id
           WHERE j.benchmark_split = ? AND j.metric = ? ORDER BY d.sample_index, j.sample_id""", [split, metric]).fetchall()
    cells: dict[str, dict[str, str]] = {}
    order: list[str] = []
    for sid, _, model, status, correct, rstatus in rows:
        if model not in models_:
            continue
        if sid not in cells:
            cells[sid] = {}
            order.append(sid)
        cells[sid][model] = queries.outcome_of(status, correct, rstatus)
    out_rows = []
    for sid in order:
        c = cells[sid]
        diff = {}
        if baseline:
            base = c.get(baseline)
            for m in models_:
                if m == baseline or base not in ("correct", "incorrect") or c.get(m) not in ("correct", "incorrect"):
                    continue
                if c[m] != base:
                    diff[m] = "better" if c[m] == "correct" else "worse"
        scored = {v for v in c.values() if v in ("correct", "incorrect")}
        if show == "disagree" and len(scored) < 2:
            continue
        if show in ("better", "worse") and show not in diff.values():
            continue
        out_rows.append({"sample_id": sid, "cells": [c.get(m) for m in models_],
                         "diff": [diff.get(m) for m in models_]})
    summary = []
    for k, m in enumerate(models_):
        col = [r["cells"][k] for r in out_rows]
        summary.append({"model": m, "correct": col.count("correct"), "incorrect": col.count("incorrect"),
                        "better": sum(1 for r in out_rows if r["diff"][k] == "better"),
                        "worse": sum(1 for r in out_rows if r["diff"][k] == "worse")})
    return {"split": split, "splits": queries.splits(con), "metric": metric,
            "metrics": queries.metric_names(con, split), "models": models_, "baseline": baseline,
            "show": show or "all", "rows": out_rows[:limit], "total": len(out_rows), "summary": summary,
            "cut": len(out_rows) > limit}
