"""`hms_score`: DiscoveryBench's hypothesis matching score, with a judge model.

The procedure (as DiscoveryBench's evaluation defines it; the wording of the prompts here is our own):
1. The judge splits the gold and the predicted hypothesis each into sub-hypotheses (text, context, variables,
   relations). An empty split stands for one sub-hypothesis: the whole text, context "None".
2. Predicted sub-hypotheses are matched greedily, in order, to the first not yet matched gold one with the
   same context: identical context strings match, a "None" context matches nothing else, otherwise the judge
   decides. (All candidate pairs are asked in one batch; the greedy pass then reads the answers, which gives
   the same matching as asking one pair at a time.)
3. Each matched pair: the judge counts the variables of each side and their (fuzzy) intersection, giving a
   variable F1; and rates the relation: very similar 1.0, similar but more general 0.5, different 0.0.
   Pair score = F1 x relation score.
4. Final = (matched gold contexts / gold sub-hypotheses) x (sum of pair scores / predicted sub-hypotheses).

Differences from the reference script, on purpose: a judge reply that can't be read makes the sample a
`parse_error` (the script scores an unreadable variable reply as -1 and an unreadable context reply as no
match); and step 3 compares the matched sub-hypotheses (the script passes the full hypotheses there; set
`pair_text: full` for that behaviour).
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

SPLIT_PROMPT = """Split the hypothesis below into its sub-hypotheses. For each one give:
- "text": the sub-hypothesis in plain language;
- "context": the boundary conditions under which it holds (a population, a period, a place, a subgroup); \
when it holds for the whole dataset, describe that from the dataset description;
- "variables": the list of variables (dataset columns or concepts) it involves;
- "relations": how those variables relate (e.g. "positive linear", "inversely proportional").
Use only what the hypothesis and the workflow say; add nothing.

Research question: {query}
Datasets: {datasets}
Hypothesis: {hypothesis}
Workflow: {workflow}

Reply with one JSON object: {{"sub_hypo": [{{"text": ..., "context": ..., "variables": [...], "relations": ...}}, ...]}}"""

CONTEXT_PROMPT = """Do these two sub-hypotheses hold under the same context (the same boundary conditions, such \
as population, period or place)? When both hold for the full dataset, that is the same context.

Gold sub-hypothesis: {gold_text}
Gold context: {gold_context}
Predicted sub-hypothesis: {pred_text}
Predicted context: {pred_context}

Reply with one JSON object: {{"match": true or false}}"""

VAR_PROMPT = """Compare the variables of hypothesis A (the gold one) and hypothesis B (the predicted one), both \
answering the research question "{query}".

Hypothesis A: {gold_text}
Hypothesis B: {pred_text}

Count the variables A uses, the variables B uses, and how many of them are common to both (match loosely: \
paraphrases and different surface forms of the same variable count as common).
Reply with one JSON object: {{"sizeA": <int>, "sizeB": <int>, "intersection": <int>, "explanation": "<short>"}}"""

REL_PROMPT = """Does hypothesis B (predicted) state the same relation between its variables as hypothesis A \
(gold), both answering the research question "{query}"? Relations go from general to specific, e.g. \
"some relationship" > "positive relationship" > "positive and (linear or quadratic)" > "positive and linear".

Hypothesis A: {gold_text}
Hypothesis B: {pred_text}

Options: A) very similar  B) similar but more general than hypothesis A  C) different
Reply with one JSON object: {{"answer": "A", "B" or "C", "explanation": "<short>"}}"""

RELATION_SCORES = {"A": 1.0, "B": 0.5, "C": 0.0}


class Unreadable(Exception):
    """A judge reply that holds no usable answer: the sample becomes a parse_error."""


def _ask(template: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": template.format(**fields)}]


def read_sub_hypotheses(reply: str | None, whole: str) -> list[dict[str, Any]]:
    for obj in json_objects(reply or ""):
        subs = obj.get("sub_hypo")
        if isinstance(subs, list):
            subs = [s for s in subs if isinstance(s, dict) and s.get("text")]
            if not subs:  # the judge found nothing to split: the whole hypothesis, in no particular context
                return [{"text": whole, "context": "None", "variables": [], "relations": ""}]
            return [{"text": str(s["text"]), "context": str(s.get("context") or "None"),
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
    for obj in json_objects(reply or ""):
        ans = str(obj.get("answer", "")).strip()
        low = ans.lower()
        if ans[:1].upper() in RELATION_SCORES and (len(ans) == 1 or not ans[1].isalpha()):
            letter = ans[:1].upper()
        elif "very similar" in low:
            letter = "A"
        elif "general" in low:
            letter = "B"
        elif "different" in low:
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
        self.pair_text = settings.get("pair_text", "sub")
        if self.pair_text not in ("sub", "full"):
            raise ConfigError(f"hms_score: pair_text must be 'sub' or 'full', not {self.pair_text!r}")
        self.client = self.clients[0]

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        n = len(items)
        state: list[dict[str, Any]] = [{"query": i.input, "gold": i.target or "", "pred": i.prediction or ""} for i in items]
        failed: dict[int, str] = {}

        def datasets(i: JudgeInput) -> str:
            d = i.metadata.get("datasets")
            return json.dumps(d, ensure_ascii=False) if d is not None and not isinstance(d, str) else (d or "")

        # 1. split gold and predicted hypotheses (the gold split is shared by every model: the cache keeps it)
        batch = []
        for i, s in zip(items, state):
            batch.append(_ask(SPLIT_PROMPT, query=s["query"], datasets=datasets(i), hypothesis=s["gold"],
                              workflow=i.metadata.get("workflow", "")))
            batch.append(_ask(SPLIT_PROMPT, query=s["query"], datasets=datasets(i), hypothesis=s["pred"], workflow=""))
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
            batch.append(_ask(VAR_PROMPT, query=s["query"], gold_text=gold_text, pred_text=pred_text))
            batch.append(_ask(REL_PROMPT, query=s["query"], gold_text=gold_text, pred_text=pred_text))
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
