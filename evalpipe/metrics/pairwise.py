"""Pairwise preferences: a judge model picks the better of two models' answers to the same sample, and the
preferences are appended to the warehouse's `reviews` table beside people's (evalpipe/metrics/reviews.py), from
which the Bradley-Terry ranking reads them (evalpipe/metrics/bradley_terry.py).

Position bias: every pair is asked in both orders (A first, then B first). The two readings, turned back into
"A preferred" (1), "B preferred" (0) or "tie" (0.5), are averaged: two agreeing readings give that answer; a judge
that prefers whichever answer it saw first gives a tie (`consistent: false`). A reply that names no winner in
either order is a parse_error, never a guess.
"""
from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from evalpipe.core.config import EvalConfig, ModelConfig
from evalpipe.metrics.reviews import new_review_id, write_reviews

DEFAULT_PAIRWISE_PROMPT = """Two assistants answered the same question. Decide which answer is better: more \
correct first, then more complete and clear. Their order says nothing about their quality.

Question:
{input}

Reference answer (may be empty):
{target}

Answer 1:
{answer_1}

Answer 2:
{answer_2}

Reply with a single JSON object and nothing else:
{"rationale": "<one or two sentences>", "winner": "1", "2" or "tie"}"""

_FIELDS = re.compile(r"\{(input|target|answer_1|answer_2)\}")
_WINNER = re.compile(r'"winner"\s*:\s*"?\s*(1|2|tie)\b', re.IGNORECASE)
OUTCOME = {1.0: "a", 0.0: "b", 0.5: "tie"}


@dataclass
class PairItem:
    sample_id: str
    input: str
    target: str | None
    answer_a: str | None
    answer_b: str | None


@dataclass
class PairVerdict:
    sample_id: str
    preference: str | None  # a | b | tie; None when no reading could be parsed
    status: str  # scored | parse_error | error
    consistent: bool | None  # both orders agreed
    readings: tuple[Any, Any]  # (A shown first, B shown first): 1 / 0 / 0.5 for A, or None


def read_winner(text: str) -> str | None:
    """'1', '2' or 'tie' from a judge's reply (its JSON `winner`), or None."""
    m = _WINNER.search(text or "")
    if m:
        return m.group(1).lower()
    try:
        v = json.loads(text)
    except (TypeError, ValueError):
        return None
    w = str(v.get("winner", "")).strip().lower() if isinstance(v, dict) else ""
    return w if w in ("1", "2", "tie") else None


def render(template: str, item: PairItem, first: str | None, second: str | None) -> str:
    values = {"input": item.input, "target": item.target or "", "answer_1": first or "", "answer_2": second or ""}
    return _FIELDS.sub(lambda m: str(values[m.group(1)]), template)


class PairwiseJudge:
    """A judge model asked for its preference between two answers, in both orders. `judge`: a name under the
    config's `judges:` or an inline mapping (as llm_judge's `judge` setting)."""

    def __init__(self, judge: Any, config: EvalConfig | None = None, prompt: str | None = None,
                 settings: dict[str, Any] | None = None):
        from evalpipe.metrics.judge_client import JudgeClient, resolve_judge

        self.model: ModelConfig = resolve_judge(judge, "pairwise_judge", config)
        rate_limits = config.raw.get("rate_limits") if config is not None else None
        self.client = JudgeClient(self.model, dict(settings or {}), rate_limits=rate_limits)
        self.prompt = prompt or DEFAULT_PAIRWISE_PROMPT

    def messages(self, item: PairItem, a_first: bool) -> list[dict[str, Any]]:
        first, second = (item.answer_a, item.answer_b) if a_first else (item.answer_b, item.answer_a)
        return [{"role": "user", "content": render(self.prompt, item, first, second)}]

    async def ajudge(self, items: Sequence[PairItem]) -> list[PairVerdict]:
        batch = [self.messages(i, True) for i in items] + [self.messages(i, False) for i in items]
        replies = await self.client.ask_many(batch)
        out = []
        for k, item in enumerate(items):
            r1, r2 = replies[k], replies[k + len(items)]
            if r1.text is None or r2.text is None:
                out.append(PairVerdict(item.sample_id, None, "error", None, (None, None)))
                continue
            # order 1 showed A as answer 1; order 2 showed B as answer 1
            a1 = {"1": 1.0, "2": 0.0, "tie": 0.5}.get(read_winner(r1.text) or "")
            a2 = {"1": 0.0, "2": 1.0, "tie": 0.5}.get(read_winner(r2.text) or "")
            if a1 is None or a2 is None:
                out.append(PairVerdict(item.sample_id, None, "parse_error", None, (a1, a2)))
                continue
            mean = (a1 + a2) / 2
            value = 1.0 if mean > 0.5 else 0.0 if mean < 0.5 else 0.5
            out.append(PairVerdict(item.sample_id, OUTCOME[value], "scored", a1 == a2, (a1, a2)))
        return out

    def judge(self, items: Sequence[PairItem]) -> list[PairVerdict]:
        return asyncio.run(self.ajudge(items))


def pair_items(con, split: str, model_a: str, model_b: str, limit: int | None = None) -> list[PairItem]:
    """The samples both models answered (an ok rollout each) on `split`, in sample order."""
    sql = """SELECT a.sample_id, coalesce(p.prompt_text, '') AS input, p.target, a.prediction AS a, b.prediction AS b
             FROM rollouts a JOIN rollouts b ON b.benchmark_split = a.benchmark_split AND b.sample_id = a.sample_id
                  AND b.model = ? AND b.status = 'ok'
             LEFT JOIN prompts p ON p.benchmark_split = a.benchmark_split AND p.model = a.model
                  AND p.sample_id = a.sample_id
             WHERE a.benchmark_split = ? AND a.model = ? AND a.status = 'ok'
             ORDER BY p.sample_index, a.sample_id"""
    params: list[Any] = [model_b, split, model_a]
    if limit:
        sql += " LIMIT ?"
        params.append(int(limit))
    return [PairItem(*row) for row in con.execute(sql, params).fetchall()]


def review_rows(split: str, model_a: str, model_b: str, verdicts: Sequence[PairVerdict], reviewer: str,
                source: str = "judge") -> list[dict[str, Any]]:
    """`reviews` rows for the scored verdicts (kind pairwise)."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return [{"review_id": new_review_id(), "benchmark_split": split, "reviewer": reviewer, "source": source,
             "created_at": now, "kind": "pairwise", "sample_id": v.sample_id, "model": model_a, "model_b": model_b,
             "preference": v.preference,
             "comment": None if v.consistent else "the judge's two orders disagreed (position bias): a tie"}
            for v in verdicts if v.status == "scored"]


def judge_pairs(warehouse, split: str, model_a: str, model_b: str, judge: Any, config: EvalConfig | None = None,
                limit: int | None = None, prompt: str | None = None) -> list[PairVerdict]:
    """Judge every sample both models answered on `split` (both orders) and append the scored preferences to the
    `reviews` table (source judge, reviewer = the judge's model key)."""
    con = warehouse.connect(["rollouts", "prompts"])
    try:
        items = pair_items(con, split, model_a, model_b, limit)
    finally:
        con.close()
    pj = PairwiseJudge(judge, config, prompt=prompt)
    verdicts = pj.judge(items)
    write_reviews(warehouse, review_rows(split, model_a, model_b, verdicts, reviewer=pj.model.key))
    return verdicts


# ---- a configured run: the `pairwise:` section, `evalpipe pairwise` and the `pairwise` asset ----------------------
@dataclass
class PairwiseRequest:
    """What to judge: every pair of `models` on `split` (the samples both answered), by `judge` (a name under
    `judges:` or an inline mapping). `limit`: the first N such samples per pair. `again`: judge again the samples
    this judge already has a preference for (else they are skipped: no call, no duplicate review)."""

    split: str
    models: list[str]
    judge: Any
    limit: int | None = None
    prompt: str | None = None
    again: bool = False

    @classmethod
    def from_config(cls, raw: dict[str, Any] | None, split: str | None = None, models: Sequence[str] | None = None,
                    judge: Any = None, limit: int | None = None, again: bool = False) -> "PairwiseRequest":
        """The config's `pairwise:` section, with what the caller gives (the command line) taking precedence."""
        from evalpipe.core.errors import ConfigError

        raw = dict(raw or {})
        split = split or raw.get("split")
        models = list(models or raw.get("models") or [])
        judge = judge if judge is not None else raw.get("judge")
        if not split:
            raise ConfigError("pairwise: which split? pass --split or set pairwise.split in the config")
        if len(set(models)) < 2:
            raise ConfigError("pairwise: name two different models (--models A B, or pairwise.models in the config)")
        if judge is None:
            raise ConfigError("pairwise: which judge? pass --judge NAME (a name under judges:) or set pairwise.judge")
        prompt = raw.get("prompt")
        if prompt is not None and not {"{answer_1}", "{answer_2}"} <= set(re.findall(r"\{answer_[12]\}", prompt)):
            raise ConfigError("pairwise.prompt must show both answers: put {answer_1} and {answer_2} in it")
        return cls(split=split, models=list(dict.fromkeys(models)), judge=judge,
                   limit=limit if limit is not None else raw.get("limit"), prompt=prompt, again=again)

    def pairs(self) -> list[tuple[str, str]]:
        return [(a, b) for i, a in enumerate(self.models) for b in self.models[i + 1:]]


@dataclass
class PairwiseOutcome:
    judge: str
    pairs: list[dict[str, Any]]  # per pair of models: model_a, model_b, samples, skipped, judged (scored) and problems
    calls: int = 0  # judge calls made (both orders of every pair judged)
    cached: int = 0  # judge replies read from the judge cache instead

    @property
    def judged(self) -> int:
        return sum(p["judged"] for p in self.pairs)

    @property
    def skipped(self) -> int:
        return sum(p["skipped"] for p in self.pairs)


def _judged_already(con, split: str, a: str, b: str, reviewer: str) -> set[str]:
    rows = con.execute("SELECT sample_id FROM reviews WHERE kind = 'pairwise' AND source = 'judge' AND reviewer = ? "
                       "AND benchmark_split = ? AND ((model = ? AND model_b = ?) OR (model = ? AND model_b = ?))",
                       [reviewer, split, a, b, b, a]).fetchall()
    return {r[0] for r in rows}


def plan_pairwise(warehouse, req: PairwiseRequest, config: EvalConfig | None = None
                  ) -> tuple["PairwiseJudge", dict[tuple[str, str], tuple[list[PairItem], int]]]:
    """The judge and, per pair of models, the items to judge and how many were skipped (judged already). Every
    setting that cannot be honoured is a one-line ConfigError/DataError here, before any model call."""
    from evalpipe.core.errors import DataError

    pj = PairwiseJudge(req.judge, config, prompt=req.prompt)  # an unknown judge: ConfigError
    con = warehouse.connect(["rollouts", "prompts", "reviews"])
    try:
        have = {m: n for m, n in con.execute("SELECT model, count(*) FROM rollouts WHERE benchmark_split = ? AND "
                                             "status = 'ok' GROUP BY model", [req.split]).fetchall()}
        missing = [m for m in req.models if not have.get(m)]
        if missing:
            raise DataError(f"pairwise: {', '.join(missing)} has no answered samples on {req.split}; models with "
                            f"answers there: {', '.join(sorted(have)) or 'none'} (evalpipe run them first)")
        plan = {}
        for a, b in req.pairs():
            items = pair_items(con, req.split, a, b, req.limit)
            if not items:
                raise DataError(f"pairwise: {a} and {b} answered no sample of {req.split} in common")
            done = set() if req.again else _judged_already(con, req.split, a, b, pj.model.key)
            plan[(a, b)] = ([i for i in items if i.sample_id not in done], sum(i.sample_id in done for i in items))
    finally:
        con.close()
    return pj, plan


def run_pairwise(warehouse, req: PairwiseRequest, config: EvalConfig | None = None) -> PairwiseOutcome:
    """Judge every pair of the request's models (both orders, PairwiseJudge) and append the scored preferences to
    `reviews` (source judge, reviewer = the judge's key). The calls go through the judge client like every
    model-graded metric's: the judge cache, rate limits, retries."""
    pj, plan = plan_pairwise(warehouse, req, config)
    out = PairwiseOutcome(judge=pj.model.key, pairs=[])
    for (a, b), (items, skipped) in plan.items():
        verdicts = pj.judge(items) if items else []
        write_reviews(warehouse, review_rows(req.split, a, b, verdicts, reviewer=pj.model.key))
        out.pairs.append({"model_a": a, "model_b": b, "samples": len(items) + skipped, "skipped": skipped,
                          "judged": sum(v.status == "scored" for v in verdicts),
                          "position_bias_ties": sum(v.status == "scored" and not v.consistent for v in verdicts),
                          "parse_errors": sum(v.status == "parse_error" for v in verdicts),
                          "errors": sum(v.status == "error" for v in verdicts)})
    out.calls, out.cached = pj.client.stats.calls, pj.client.stats.cached
    return out
