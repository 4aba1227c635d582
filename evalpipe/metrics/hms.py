"""`hms_score`: DiscoveryBench's hypothesis matching score, with a judge model.

The procedure of DiscoveryBench's evaluation (`eval/new_eval.py`, also DSGym's `hms_score`); the wording of
the prompts here is our own, their content (what the judge sees and must answer) the same:
1. The judge splits the gold and the predicted hypothesis each into sub-hypotheses (text, context, variables,
   relations), seeing the dataset descriptions and the hypothesis' workflow. An empty split stands for one
   sub-hypothesis: the whole text, context "None". A sub-hypothesis without a context has context "".
2. Predicted sub-hypotheses are matched greedily, in order, to the first not yet matched gold one with the
   same context: identical context strings match, a "None" context matches nothing else, otherwise the judge
   decides. (All candidate pairs are asked in one batch; the greedy pass then reads the answers, which gives
   the same matching as asking one pair at a time.)
3. Each matched pair: the judge compares the two hypotheses (with the query, the dataset descriptions and both
   workflows) on variables, giving counts sizeA, sizeB and their (fuzzy) intersection -> variable F1, and on the
   relation: "A) very similar" 1.0, "B) similar but general than HypoA" 0.5, "C) different" 0.0 (read as the
   reference reads it: the answer starts with the letter, or holds the option's words). Pair score = F1 x
   relation score. As in the reference, these are asked about the FULL gold and predicted hypotheses
   (`pair_text: full`, the default), so every matched pair gets the same score; `pair_text: sub` asks about the
   matched sub-hypotheses instead.
4. Final = (matched gold sub-hypotheses / gold sub-hypotheses) x (sum of pair scores / predicted sub-hypotheses).

Differences from the reference, on purpose: a judge reply that can't be read makes the sample a `parse_error`
(counted 0, and in n_errors), where the reference scores an unreadable variable reply as F1 = -1 (which can make
the final score negative), an unreadable context reply as no match, and an unreadable split as no sub-hypotheses.
Sample metadata read when present: `query`, `workflow` (the gold workflow), `datasets` (dataset descriptions, as
the discoverybench adapter builds them). The predicted workflow is the answer's `WORKFLOW:` section, if any.
"""
from __future__ import annotations

import json
from typing import Any

from evalpipe.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, register_metric
from evalpipe.metrics.llm_judge import ModelGraded
from evalpipe.metrics.verdicts import json_objects
from evalpipe.types import Score

SYSTEM = "You evaluate data-driven scientific hypotheses. Answer only in the JSON format asked for, without extra text."

SPLIT_PROMPT = """Split the hypothesis below into its sub-hypotheses, along three dimensions:
- context: the boundary conditions that limit where it holds (e.g. "for women over 40", "in Europe"); when it \
holds for the whole dataset, take the context from the dataset description;
- variables: the concepts (dataset columns) that interact under that context, or "None";
- relations: how those variables interact (e.g. "quadratic", "inversely proportional", a piecewise condition), or "None".
Use only what the hypothesis and its workflow say; add nothing, and leave out no important detail.

Datasets: {datasets}
Hypothesis: {hypothesis}
Workflow: {workflow}

Reply with one JSON object: {{"sub_hypo": [{{"text": <the sub-hypothesis in plain language>, "context": <short \
description of its context>, "variables": [<columns involved>], "relations": <short description of the \
relationship>}}, ...]}}"""

CONTEXT_PROMPT = """Do these two sub-hypotheses hold under the same context (the same boundary conditions, such \
as population, period or place; when the context covers the full dataset, it comes from the dataset description)? \
When both hold for the full dataset, that is the same context.

Gold sub-hypothesis: {gold_text}
Gold context: {gold_context}
Predicted sub-hypothesis: {pred_text}
Predicted context: {pred_context}

Reply with one JSON object: {{"match": true or false}}"""

_PAIR_HEAD = """Compare two hypotheses in natural language, HypoA (gold) and HypoB (predicted), each with an optional \
workflow. Both answer the query below over the dataset(s) described. A hypothesis has contexts (the stratification \
under which it holds, e.g. "from 1995 to 2009"), variables (the dependent and independent quantities it mentions) \
and relations (the form of the relation between them, e.g. "grew about tenfold").

Datasets: {datasets}
Query: {query}
HypoA: {gold_text}
WorkflowA: {gold_workflow}
HypoB: {pred_text}
WorkflowB: {pred_workflow}

"""

VAR_PROMPT = _PAIR_HEAD + """Count the variables HypoA uses, the variables HypoB uses, and how many are common to both \
(match loosely: paraphrases and different surface forms of the same variable count as common).
Reply with one JSON object: {{"sizeA": <int>, "sizeB": <int>, "intersection": <int>, "explanation": "<short>"}}"""

REL_PROMPT = _PAIR_HEAD + """Does HypoB state the same relation as HypoA? Relations go from general to specific, e.g. \
"some relationship" > "positive relationship" > "positive and (linear or quadratic)" > "positive and linear".
Options: A) very similar B) similar but general than HypoA C) different
Reply with one JSON object: {{"answer": <one of the options, e.g. "A) very similar">, "explanation": "<short>"}}"""

RELATION_SCORES = {"A": 1.0, "B": 0.5, "C": 0.0}


class Unreadable(Exception):
    """A judge reply that holds no usable answer: the sample becomes a parse_error."""


def _workflow_of(raw: str | None) -> str:
    from evalpipe.benchmarks.discoverybench import extract_workflow

    return extract_workflow(raw)


def _ask(template: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": template.format(**fields)}]


def read_sub_hypotheses(reply: str | None, whole: str) -> list[dict[str, Any]]:
    for obj in json_objects(reply or ""):
        subs = obj.get("sub_hypo")
        if isinstance(subs, list):
            subs = [s for s in subs if isinstance(s, dict) and s.get("text")]
            if not subs:  # the judge found nothing to split: the whole hypothesis, in no particular context
                return [{"text": whole, "context": "None", "variables": [], "relations": ""}]
            return [{"text": str(s["text"]), "context": str(s.get("context", "")) if s.get("context") is not None else "",
                     "variables": s.get("variables") or [], "relations": str(s.get("relations") or "")} for s in subs]
    raise Unreadable(f"no sub_hypo list in the split reply: {(reply or '')[:200]!r}")


def read_match(reply: str | None) -> bool:
    for obj in json_objects(reply or ""):
        m = obj.get("match")
        if isinstance(m, bool):
            return m
        if isinstance(m, str) and m.strip().lower() in ("true", "false"):
            return m.strip().lower() == "true"
    raise Unreadable(f"no match true/false in the context reply: {(reply or '')[:200]!r}")


def variable_f1(reply: str | None) -> tuple[float, dict[str, Any]]:
    for obj in json_objects(reply or ""):
        try:
            a, b, inter = int(obj["sizeA"]), int(obj["sizeB"]), int(obj["intersection"])
        except (KeyError, TypeError, ValueError):
            continue
        p = inter / b if b else 0.0
        r = inter / a if a else 0.0
        f1 = 2 * p * r / (p + r) if p > 0 and r > 0 else 0.0
        return f1, {"sizeA": a, "sizeB": b, "intersection": inter, "f1": f1, "explanation": obj.get("explanation", "")}
    raise Unreadable(f"no sizeA/sizeB/intersection in the variables reply: {(reply or '')[:200]!r}")


def relation_score(reply: str | None) -> tuple[float, dict[str, Any]]:
    """The reference's reading: the answer starts with A / B / C, or holds "very similar" / "similar but general than
    HypoA" / "different" (checked in that order)."""
    for obj in json_objects(reply or ""):
        if not isinstance(obj.get("answer"), str):
            continue
        ans = obj["answer"].strip()
        if ans.startswith("A") or "very similar" in ans:
            letter = "A"
        elif ans.startswith("B") or "similar but general than HypoA" in ans:
            letter = "B"
        elif ans.startswith("C") or "different" in ans:
            letter = "C"
        else:
            continue
        return RELATION_SCORES[letter], {"answer": letter, "explanation": obj.get("explanation", "")}
    raise Unreadable(f"no A/B/C answer in the relation reply: {(reply or '')[:200]!r}")


def greedy_match(n_pred: int, n_gold: int, same_context) -> dict[int, int]:
    """pred index -> gold index; each gold sub-hypothesis is used at most once, first match wins."""
    covered: set[int] = set()
    out: dict[int, int] = {}
    for p in range(n_pred):
        for g in range(n_gold):
            if g not in covered and same_context(p, g):
                out[p] = g
                covered.add(g)
                break
    return out


def hms_final(n_gold: int, n_pred: int, pair_scores: list[float]) -> float:
    recall_context = len(pair_scores) / n_gold if n_gold else 0.0
    mean_pair = sum(pair_scores) / n_pred if n_pred else 0.0
    return recall_context * mean_pair


@register_metric("hms_score")
class HMSScore(ModelGraded):
    """Settings: pair_text (sub | full), plus the ModelGraded settings (the first judge is used).
    Sample metadata read when present: `workflow` (the gold workflow), `datasets` (dataset descriptions)."""

    name = "hms_score"
    known_settings = {"pair_text"}

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        self.pair_text = settings.get("pair_text", "full")
        if self.pair_text not in ("sub", "full"):
            raise ConfigError(f"hms_score: pair_text must be 'sub' or 'full', not {self.pair_text!r}")
        self.client = self.clients[0]

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "pair_text": self.pair_text, "procedure": 2}

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        n = len(items)
        state: list[dict[str, Any]] = [{"query": i.metadata.get("query") or i.input, "gold": i.target or "",
                                        "pred": i.prediction or "", "gold_workflow": str(i.metadata.get("workflow") or ""),
                                        "pred_workflow": _workflow_of(i.raw_output)} for i in items]
        failed: dict[int, str] = {}

        def datasets(i: JudgeInput) -> str:
            d = i.metadata.get("datasets")
            return json.dumps(d, ensure_ascii=False) if d is not None and not isinstance(d, str) else (d or "")

        # 1. split gold and predicted hypotheses (the gold split is shared by every model: the cache keeps it)
        batch = []
        for i, s in zip(items, state):
            s["datasets"] = datasets(i)
            batch.append(_ask(SPLIT_PROMPT, datasets=datasets(i), hypothesis=s["gold"], workflow=s["gold_workflow"]))
            batch.append(_ask(SPLIT_PROMPT, datasets=datasets(i), hypothesis=s["pred"], workflow=s["pred_workflow"]))
        replies = await self.client.ask_many(batch)
        for k, s in enumerate(state):
            try:
                s["gold_subs"] = read_sub_hypotheses(self._text(replies[2 * k]), s["gold"])
                s["pred_subs"] = read_sub_hypotheses(self._text(replies[2 * k + 1]), s["pred"])
            except Unreadable as exc:
                failed[k] = str(exc)
        # 2. contexts: exact string match, "None" never matches, else ask
        pairs: list[tuple[int, int, int]] = []
        for k, s in enumerate(state):
            if k in failed:
                continue
            s["ctx"] = {}
            for p, ps in enumerate(s["pred_subs"]):
                for g, gs in enumerate(s["gold_subs"]):
                    if gs["context"] == ps["context"]:
                        s["ctx"][(p, g)] = True
                    elif "None" in (gs["context"], ps["context"]):
                        s["ctx"][(p, g)] = False
                    else:
                        pairs.append((k, p, g))
        replies = await self.client.ask_many([
            _ask(CONTEXT_PROMPT, gold_text=state[k]["gold_subs"][g]["text"], gold_context=state[k]["gold_subs"][g]["context"],
                 pred_text=state[k]["pred_subs"][p]["text"], pred_context=state[k]["pred_subs"][p]["context"])
            for k, p, g in pairs]) if pairs else []
        for (k, p, g), r in zip(pairs, replies):
            if k in failed:
                continue
            try:
                state[k]["ctx"][(p, g)] = read_match(self._text(r))
            except Unreadable as exc:
                failed[k] = str(exc)
        # 3. variables and relation of each matched pair
        asks: list[tuple[int, int, int]] = []
        for k, s in enumerate(state):
            if k in failed:
                continue
            s["matched"] = greedy_match(len(s["pred_subs"]), len(s["gold_subs"]), lambda p, g, s=s: s["ctx"][(p, g)])
            asks += [(k, p, g) for p, g in s["matched"].items()]
        batch = []
        for k, p, g in asks:
            s = state[k]
            gold_text, pred_text = ((s["gold"], s["pred"]) if self.pair_text == "full"
                                    else (s["gold_subs"][g]["text"], s["pred_subs"][p]["text"]))
            pair = dict(query=s["query"], datasets=s["datasets"], gold_text=gold_text, pred_text=pred_text,
                        gold_workflow=s["gold_workflow"], pred_workflow=s["pred_workflow"])
            batch.append(_ask(VAR_PROMPT, **pair))
            batch.append(_ask(REL_PROMPT, **pair))
        replies = await self.client.ask_many(batch) if batch else []
        for j, (k, p, g) in enumerate(asks):
            if k in failed:
                continue
            try:
                f1, var = variable_f1(self._text(replies[2 * j]))
                rel, rel_d = relation_score(self._text(replies[2 * j + 1]))
            except Unreadable as exc:
                failed[k] = str(exc)
                continue
            state[k].setdefault("pairs", []).append({"pred": p, "gold": g, "variables": var, "relation": rel_d,
                                                     "score": f1 * rel})
        out = []
        for k in range(n):
            s = state[k]
            if k in failed:
                status = "error" if failed[k].startswith("judge call failed") else "parse_error"
                out.append(Score(value=None, status=status, reason=failed[k]))
                continue
            pair_list = s.get("pairs", [])
            value = hms_final(len(s["gold_subs"]), len(s["pred_subs"]), [x["score"] for x in pair_list])
            out.append(Score(value=value, correct=None, reason=f"recall of contexts x mean pair score = {value:.3f}",
                             details={"gold_sub_hypo": s["gold_subs"], "pred_sub_hypo": s["pred_subs"],
                                      "matched": {str(p): g for p, g in s["matched"].items()}, "pairs": pair_list,
                                      "recall_context": len(pair_list) / len(s["gold_subs"])}))
        return out

    @staticmethod
    def _text(reply) -> str:
        if reply.text is None:
            raise Unreadable(f"judge call failed: {reply.error}")
        return reply.text
