"""`bfcl_ast`: the Berkeley Function Calling Leaderboard's AST checker (Python) on one sample.

The model's calls come from the rollout's tool-call records (`JudgeInput.tool_calls`: the calls of the first
model turn that made any, as BFCL's function-calling handlers see one response), else from its text in BFCL's
Python-call format `[func(a=1), ...]` (BFCL's default decoding for prompted models): the first assistant
message of the trajectory, else the raw output. The sample's function docs and category are in its metadata
(`functions`, `category`, set by `adapter: bfcl`); the possible answers are its target (JSON `ground_truth`).
Score 1/0; `reason` is the checker's error type and message; `details.category` feeds the per-category mean
(`bfcl_ast_category_mean`, see `summary_rows`).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import NoSettings
from evalpipe.tooleval import bfcl_checker as bc
from evalpipe.core.types import Score


def first_turn_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the first model turn that issued calls (records without `turn` count as turn 0)."""
    if not records:
        return []
    first = min(int(r.get("turn") or 0) for r in records)
    rows = [r for r in records if int(r.get("turn") or 0) == first]
    return sorted(rows, key=lambda r: int(r.get("call_index") or 0))


def first_assistant_text(item: JudgeInput) -> str | None:
    for m in item.trajectory or []:
        if isinstance(m, dict) and m.get("role") == "assistant":
            content = m.get("content")
            if isinstance(content, list):  # content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return content if isinstance(content, str) else ""
    return item.raw_output if item.raw_output is not None else item.prediction


def decode(item: JudgeInput) -> tuple[list[dict] | None, str | None, str]:
    """(decoded calls, decoding error, source) of one sample's output."""
    first_msg = next((m for m in item.trajectory or [] if isinstance(m, dict) and m.get("role") == "assistant"), None)
    records = first_turn_records(item.tool_calls or [])
    # the first reply was text and the calls came in later turns: BFCL sees only that first reply
    text_first = (records and first_msg is not None and not first_msg.get("tool_calls")
                  and int(records[0].get("turn") or 0) > 0)
    if records and not text_first:
        try:
            return bc.decode_tool_calls(records), None, "tool_calls"
        except bc.DecodeError as exc:
            return None, str(exc), "tool_calls"
    text = first_assistant_text(item)
    if text is None:
        return None, "no output", "text"
    try:
        return bc.decode_python_calls(text), None, "text"
    except bc.DecodeError as exc:
        return None, str(exc), "text"


@register_metric("bfcl_ast")
class BfclAst(Metric):
    name = "bfcl_ast"
    option_schema = NoSettings  # no settings: BFCL's checker rules
    requires_target = False  # irrelevance samples have no answers and are still scored

    def score(self, item: JudgeInput) -> Score:
        md = item.metadata or {}
        category = md.get("category") or bc.category_of(item.sample_id)
        docs = md.get("functions")
        if docs is None:
            return Score.error("no BFCL function docs in the sample's metadata ('functions'); load it with adapter: bfcl")
        answers = None
        if not bc.is_relevance_category(category):
            if item.target is None:
                return Score.unscored("no possible answer for this sample")
            try:
                answers = json.loads(item.target)
            except ValueError:
                return Score.error("target is not the JSON list of BFCL possible answers")
        decoded, err, source = decode(item)
        verdict = bc.score_output(category, docs, answers, decoded, err)
        shown = json.dumps(decoded, ensure_ascii=False, default=repr) if decoded is not None else None
        return Score(value=1.0 if verdict.valid else 0.0, correct=verdict.valid, reason=verdict.reason,
                     normalized_prediction=shown, normalized_target=item.target,
                     details={"category": category, "error_type": verdict.error_type or None, "source": source})

    @staticmethod
    def summary_rows(metric: str, counted: pd.DataFrame, details: list[dict], seed: int) -> list[dict]:
        """`<metric>_category_mean`: the unweighted mean of the per-category accuracies (each BFCL category
        counts once, whatever its size), beside the sample-weighted `all` row; n = samples, and the CI is a
        seeded percentile bootstrap over samples, resampled within each category."""
        if not len(counted):
            return []
        cats = [d.get("category") or _slice_category(sl) or bc.category_of(sid)
                for d, sl, sid in zip(details, counted["slices"], counted["sample_id"])]
        frame = pd.DataFrame({"c": cats, "s": counted["score"].to_numpy(dtype=float)})
        groups = [g.to_numpy(dtype=float) for _, g in frame.groupby("c")["s"]]
        value = float(np.mean([g.mean() for g in groups]))
        rng = np.random.default_rng(seed)
        boots = np.array([np.mean([g[rng.integers(0, len(g), len(g))].mean() for g in groups]) for _ in range(1000)])
        lo, hi = (float(x) for x in np.quantile(boots, [0.025, 0.975]))
        return [{"metric": f"{metric}_category_mean", "slice": "all", "value": value, "n": int(len(frame)),
                 "n_unscored": 0, "n_errors": 0, "stderr": float(boots.std(ddof=1)), "ci_low": lo, "ci_high": hi}]


def _slice_category(sl: Any) -> str | None:
    try:
        return (json.loads(sl) if isinstance(sl, str) and sl else {}).get("category")
    except ValueError:
        return None
