"""`hms_score`: DiscoveryBench's hypothesis matching score, with a judge model.

The procedure of DiscoveryBench's evaluation (`eval/new_eval.py`, also DSGym's `hms_score`); the wording of
the prompts here is our own, their content (what the judge sees and must answer) the same:
1. The judge splits the gold and the predicted hypothesis each into sub-hypotheses (text, context, variables,
   relations), seeing the dataset descriptions and the hypothesis' workflow. An empty split stands for one
   sub-hypothesis: the whole text, context "None". A sub-hypothesis without a context compares as "".
2. Predicted sub-hypotheses are matched greedily, in order, to the first not yet matched gold one with the
   same context: equal contexts match, a "None" context matches nothing else, otherwise the judge decides.
   (All candidate pairs are asked in one batch; the greedy pass then reads the answers in the official order,
   which gives the same matching, and the same stops, as asking one pair at a time.)
3. Each matched pair: the judge compares the two hypotheses (with the query, the dataset descriptions and both
   workflows) on variables, giving counts sizeA, sizeB and their (fuzzy) intersection -> variable F1, and on the
   relation: "A) very similar" 1.0, "B) similar but general than HypoA" 0.5, "C) different" 0.0. Pair score = F1 x
   relation score. As in the reference, these are asked about the FULL gold and predicted hypotheses
   (`pair_text: full`, the default), so every matched pair gets the same score; `pair_text: sub` asks about the
   matched sub-hypotheses instead.
4. Final = (matched gold sub-hypotheses / gold sub-hypotheses) x (sum of pair scores / predicted sub-hypotheses).

Judge settings and replies as the official code (docs/metrics.md, hms_score, has the table): the split and context
questions at temperature 1 (its `get_response`), the variables and relation questions at temperature 0, 250 tokens,
JSON-only replies (its `run_chatgpt_query_multi_turn`); replies parsed as it parses them, with its fallbacks (an
unreadable split is the whole hypothesis in context "None", an unreadable variables reply F1 = -1, an unknown
relation answer -1, a context reply asked up to 5 times). Where the official code raises, the sample is refused
(`parse_error`). Named settings, off by default, for the deliberate differences: `lenient_json` (find the JSON in
prose or fences), `strict_replies` (refuse every fallback), `judge_params: judge` (the judge entry's own params).
Sample metadata read when present: `query`, `workflow` (the gold workflow), `datasets` (dataset descriptions, as
the discoverybench adapter builds them). The predicted workflow is the answer's `WORKFLOW:` section.
"""
from __future__ import annotations

import json
import re
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, register_metric
from evalpipe.metrics.settings import HMSSettings
from evalpipe.metrics.judge_client import CALL_SETTINGS, JudgeClient
from evalpipe.metrics.llm_judge import ModelGraded
from evalpipe.metrics.verdicts import json_objects
from evalpipe.core.types import Score

# DiscoveryBench's reply format (its adapter's answer rules): HYPOTHESIS: ... then WORKFLOW: ...
_HYPO = re.compile(r"hypothesis\s*[:：]", re.IGNORECASE)
_WORKFLOW = re.compile(r"\n\s*\**workflow\s*\**\s*[:：]", re.IGNORECASE)


def extract_hypothesis(output: str | None) -> str | None:
    """The text after the last `HYPOTHESIS:` up to a `WORKFLOW:` line; without the marker, the whole reply."""
    if not isinstance(output, str):
        return None
    marks = list(_HYPO.finditer(output))
    text = output[marks[-1].end():] if marks else output
    text = _WORKFLOW.split("\n" + text, maxsplit=1)[0]
    return text.strip().strip("*").strip()


def extract_workflow(output: str | None) -> str:
    if not isinstance(output, str):
        return ""
    parts = _WORKFLOW.split("\n" + output)
    return parts[-1].strip() if len(parts) > 1 else ""


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

# The official judge settings (DiscoveryBench eval/new_eval.py): the split and context calls go through its
# `get_response` (utils/openai_helpers.py, decoding OPENAI_GEN_HYP: temperature 1), the variables and relation
# calls through `run_chatgpt_query_multi_turn` (eval/lm_utils.py, whose own OPENAI_GEN_HYP, temperature 0 and
# 250 tokens, overrides the arguments it is given) with JSON-only replies.
OFFICIAL_SPLIT_PARAMS = {"temperature": 1.0, "max_tokens": 4096, "top_p": 1.0, "frequency_penalty": 0,
                         "presence_penalty": 0}
OFFICIAL_PAIR_PARAMS = {"temperature": 0, "max_tokens": 250, "top_p": 1.0, "frequency_penalty": 0,
                        "presence_penalty": 0, "response_format": {"type": "json_object"}}
CONTEXT_TRIES = 5  # get_response's max_retry for the context question (the split asks once)
_FENCE_CHARS = "`json"  # get_response trims the reply with str.strip("```json"): a character set, not a prefix
UNREAD = object()


class Unreadable(Exception):
    """A judge reply that holds no usable answer where the official code has no fallback (it raises): the sample
    is refused (parse_error). Under `strict_replies`, also where it has one."""


def load_reply(text: str | None, *, trim_fences: bool, lenient: bool = False) -> Any:
    """The reply's JSON value as the official code reads it (json.loads of the stripped reply; split and context
    replies first lose any of the characters `` ` j s o n `` at both ends), or UNREAD. `lenient`: when that fails,
    the first JSON object found anywhere in the reply (prose around it, code fences)."""
    t = (text or "").strip()
    if trim_fences:
        t = t.strip(_FENCE_CHARS)
    try:
        return json.loads(t)
    except (ValueError, RecursionError):
        pass
    if lenient:
        found = json_objects(text or "")
        if found:
            return found[0]
    return UNREAD


def _whole(hypothesis: str) -> dict[str, Any]:
    return {"text": hypothesis, "context": "None", "variables": [], "relations": "", "explanation": "unable to segment"}


def read_sub_hypotheses(reply: str | None, whole: str, lenient: bool = False) -> tuple[list[Any], bool]:
    """(sub-hypotheses, unreadable). As the official: an unreadable reply or an empty `sub_hypo` stands for the
    whole hypothesis in context "None" (unreadable True for the former); a reply that is JSON but not an object
    with a `sub_hypo` list (or an empty value) stops the official evaluation. Elements are kept as they are: their
    `text` and `context` are checked when the matching reads them (see `HMSScore._same_context`)."""
    obj = load_reply(reply, trim_fences=True, lenient=lenient)
    if obj is UNREAD or obj is None:
        return [_whole(whole)], True
    if not isinstance(obj, dict):
        raise Unreadable(f"the split reply is JSON but not an object, where the official code stops: {_head(reply)}")
    if "sub_hypo" not in obj:
        raise Unreadable(f"the split reply has no sub_hypo, where the official code stops: {_head(reply)}")
    subs = obj["sub_hypo"]
    if isinstance(subs, (list, str, dict)) and len(subs) == 0:
        return [_whole(whole)], False
    if not isinstance(subs, list):
        raise Unreadable(f"the split reply's sub_hypo is not a list, where the official code stops: {_head(reply)}")
    return subs, False


def read_match(reply: str | None, lenient: bool = False, strict: bool = False) -> bool | None:
    """The context verdict as the official reads it: the JSON object's `match`, by truthiness (so "false" as a
    string is a match, 0 is not, a missing key is no match); None: unreadable (the official asks again). A JSON
    value that is not an object stops the official evaluation. `strict`: `match` must be true or false."""
    obj = load_reply(reply, trim_fences=True, lenient=lenient)
    if obj is UNREAD:
        return None
    if not isinstance(obj, dict):
        raise Unreadable(f"the context reply is JSON but not an object, where the official code stops: {_head(reply)}")
    m = obj.get("match", False)
    if strict and not isinstance(m, bool):
        raise Unreadable(f"strict_replies: the context reply's match is not true/false: {_head(reply)}")
    return bool(m)


def variable_f1(reply: str | None, lenient: bool = False) -> tuple[float, dict[str, Any]]:
    """Variable F1 as the official computes it: p = intersection/sizeB if sizeB (by truthiness) else 0, r likewise
    with sizeA, F1 = 2pr/(p+r) when both are > 0 else 0, with the numbers as the JSON gives them (floats count,
    strings don't). A reply that is not JSON, or lacks any of sizeA, sizeB, intersection, explanation, or whose
    values can't be divided, is F1 = -1 (the official fallback; details `unreadable`)."""
    obj = load_reply(reply, trim_fences=False, lenient=lenient)
    try:
        if obj is UNREAD:
            raise ValueError("not JSON")
        p = r = 0.0
        if obj["sizeB"]:
            p = obj["intersection"] / obj["sizeB"]
        if obj["sizeA"]:
            r = obj["intersection"] / obj["sizeA"]
        f1 = 2 * p * r / (p + r) if p > 0.0 and r > 0.0 else 0.0
        details = {k: obj[k] for k in ("sizeA", "sizeB", "intersection", "explanation")}
    except Exception:  # the official catches everything here
        return -1.0, {"f1": -1.0, "unreadable": True, "reply": (reply or "")[:2000]}
    return f1, {**details, "f1": f1}


def relation_score(reply: str | None, lenient: bool = False) -> tuple[float, dict[str, Any]]:
    """The official reading: json.loads of the reply (else it stops), `answer` a string (else it stops), stripped:
    starts with A / B / C, or holds "very similar" / "similar but general than HypoA" / "different" (in that order)
    -> 1 / 0.5 / 0; anything else -1 (details `unreadable`)."""
    obj = load_reply(reply, trim_fences=False, lenient=lenient)
    if obj is UNREAD:
        raise Unreadable(f"the relation reply is not JSON, where the official code stops: {_head(reply)}")
    if not isinstance(obj, dict) or not isinstance(obj.get("answer"), str):
        raise Unreadable(f"the relation reply has no answer text, where the official code stops: {_head(reply)}")
    ans = obj["answer"].strip()
    if ans.startswith("A") or "very similar" in ans:
        letter = "A"
    elif ans.startswith("B") or "similar but general than HypoA" in ans:
        letter = "B"
    elif ans.startswith("C") or "different" in ans:
        letter = "C"
    else:
        return -1.0, {"answer": ans, "unreadable": True, "explanation": obj.get("explanation", "")}
    return RELATION_SCORES[letter], {"answer": letter, "explanation": obj.get("explanation", "")}


def _workflow_of(raw: str | None) -> str:
    return extract_workflow(raw)


def _ask(template: str, **fields: Any) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": template.format(**fields)}]


def _head(reply: str | None) -> str:
    return repr((reply or "")[:200])


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


def _sub_text(sub: Any) -> Any:
    if isinstance(sub, dict) and "text" in sub:
        return sub["text"]
    raise Unreadable(f"a sub-hypothesis without text, where the official code stops: {str(sub)[:200]!r}")


def _context(sub: Any) -> Any:
    return sub.get("context", "") if isinstance(sub, dict) else ""


def _counts_ok(var: dict[str, Any]) -> bool:
    """strict_replies: the variable counts are whole numbers with 0 <= intersection <= each size."""
    vals = [var.get(k) for k in ("sizeA", "sizeB", "intersection")]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return False
    a, b, i = vals
    return 0 <= i <= min(a, b)


JUDGE_PARAMS = ("official", "judge")


@register_metric("hms_score")
class HMSScore(ModelGraded):
    """Settings: pair_text (full | sub), judge_params (official | judge), lenient_json (false), strict_replies
    (false), plus the ModelGraded settings (the first judge is used). See the module docstring."""

    name = "hms_score"
    known_settings = {"pair_text", "judge_params", "lenient_json", "strict_replies"}
    option_schema = HMSSettings

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        self.pair_text = settings.get("pair_text", "full")
        if self.pair_text not in ("sub", "full"):
            raise ConfigError(f"hms_score: pair_text must be 'sub' or 'full', not {self.pair_text!r}")
        self.judge_params = settings.get("judge_params", "official")
        if self.judge_params not in JUDGE_PARAMS:
            raise ConfigError(f"hms_score: judge_params must be 'official' (DiscoveryBench's decoding) or 'judge' "
                              f"(the judge entry's own params), not {self.judge_params!r}")
        for key in ("lenient_json", "strict_replies"):
            if not isinstance(settings.get(key, False), bool):
                raise ConfigError(f"hms_score: {key} must be true or false, not {settings[key]!r}")
        self.lenient = settings.get("lenient_json", False)
        self.strict = settings.get("strict_replies", False)
        self.client = self.clients[0]
        if self.judge_params == "official":  # the procedure's decoding, over the judge entry's (its seed etc. stay)
            call = {k: settings[k] for k in CALL_SETTINGS if k in settings}
            m = self.judge_models[0]
            self.split_client = JudgeClient(m.with_overrides(params=OFFICIAL_SPLIT_PARAMS), call)
            self.pair_client = JudgeClient(m.with_overrides(params=OFFICIAL_PAIR_PARAMS), call)
        else:
            self.split_client = self.pair_client = self.client

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "pair_text": self.pair_text, "procedure": 3,
                "judges": [self.split_client.identity, self.pair_client.identity]}

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        n = len(items)
        state: list[dict[str, Any]] = [{"query": i.metadata.get("query") or i.input, "gold": i.target or "",
                                        "pred": i.prediction or "", "gold_workflow": str(i.metadata.get("workflow") or ""),
                                        "pred_workflow": _workflow_of(i.raw_output)} for i in items]
        failed: dict[int, str] = {}
        # [spend] each sample's judge calls (its share of every batch), failed samples' too: details.judges.*.usage
        used: list[dict[str, list[dict[str, Any]]]] = [{"split": [], "pair": []} for _ in range(n)]

        def datasets(i: JudgeInput) -> str:
            d = i.metadata.get("datasets")
            return json.dumps(d, ensure_ascii=False) if d is not None and not isinstance(d, str) else (d or "")

        # 1. split gold and predicted hypotheses (the gold split is shared by every model: the cache keeps it)
        batch = []
        for i, s in zip(items, state):
            s["datasets"] = datasets(i)
            batch.append(_ask(SPLIT_PROMPT, datasets=datasets(i), hypothesis=s["gold"], workflow=s["gold_workflow"]))
            batch.append(_ask(SPLIT_PROMPT, datasets=datasets(i), hypothesis=s["pred"], workflow=s["pred_workflow"]))
        replies = await self.split_client.ask_many(batch)
        for k, s in enumerate(state):
            used[k]["split"] += [replies[2 * k].usage(), replies[2 * k + 1].usage()]
            try:
                s["gold_subs"], bad_gold = read_sub_hypotheses(self._text(replies[2 * k]), s["gold"], self.lenient)
                s["pred_subs"], bad_pred = read_sub_hypotheses(self._text(replies[2 * k + 1]), s["pred"], self.lenient)
                if self.strict and (bad_gold or bad_pred):
                    raise Unreadable("strict_replies: a split reply is not JSON (the official code takes the whole "
                                     "hypothesis in context 'None')")
            except Unreadable as exc:
                failed[k] = str(exc)
        # 2. contexts: equal values match, a "None" context matches nothing else, else the judge decides. All pairs
        # the greedy pass may read are asked in one batch; an unreadable reply is asked again (a fresh call), up to
        # CONTEXT_TRIES times as the official does
        pending: list[tuple[int, int, int]] = []
        for k, s in enumerate(state):
            if k in failed:
                continue
            s["ctx"] = {}
            for p, ps in enumerate(s["pred_subs"]):
                for g, gs in enumerate(s["gold_subs"]):
                    try:
                        _sub_text(gs), _sub_text(ps)
                    except Unreadable:
                        continue  # the greedy pass stops there if it gets to this pair
                    gc, pc = _context(gs), _context(ps)
                    if gc != pc and "None" not in (gc, pc):
                        pending.append((k, p, g))
        for attempt in range(CONTEXT_TRIES):
            if not pending:
                break
            asked, pending = pending, []
            replies = await self.split_client.ask_many([
                _ask(CONTEXT_PROMPT, gold_text=_sub_text(state[k]["gold_subs"][g]), pred_text=_sub_text(state[k]["pred_subs"][p]),
                     gold_context=_context(state[k]["gold_subs"][g]), pred_context=_context(state[k]["pred_subs"][p]))
                for k, p, g in asked], attempt=attempt)
            for (k, p, g), r in zip(asked, replies):
                used[k]["split"].append(r.usage())
                try:
                    verdict: Any = read_match(self._text(r), self.lenient, self.strict)
                except Unreadable as exc:
                    verdict = exc
                if verdict is None:
                    pending.append((k, p, g))
                state[k]["ctx"][(p, g)] = verdict
        for k, p, g in pending:
            state[k]["ctx"][(p, g)] = Unreadable(f"no readable context reply in {CONTEXT_TRIES} tries, where the "
                                                 f"official code stops")
        # 3. greedy matching, then variables and relation of each matched pair
        asks: list[tuple[int, int, int]] = []
        for k, s in enumerate(state):
            if k in failed:
                continue
            try:
                s["matched"] = greedy_match(len(s["pred_subs"]), len(s["gold_subs"]),
                                            lambda p, g, s=s: self._same_context(s, p, g))
            except Unreadable as exc:
                failed[k] = str(exc)
                continue
            asks += [(k, p, g) for p, g in s["matched"].items()]
        batch = []
        for k, p, g in asks:
            s = state[k]
            gold_text, pred_text = ((s["gold"], s["pred"]) if self.pair_text == "full"
                                    else (_sub_text(s["gold_subs"][g]), _sub_text(s["pred_subs"][p])))
            pair = dict(query=s["query"], datasets=s["datasets"], gold_text=gold_text, pred_text=pred_text,
                        gold_workflow=s["gold_workflow"], pred_workflow=s["pred_workflow"])
            batch.append(_ask(VAR_PROMPT, **pair))
            batch.append(_ask(REL_PROMPT, **pair))
        replies = await self.pair_client.ask_many(batch) if batch else []
        for j, (k, p, g) in enumerate(asks):
            used[k]["pair"] += [replies[2 * j].usage(), replies[2 * j + 1].usage()]
            if k in failed:
                continue
            try:
                f1, var = variable_f1(self._text(replies[2 * j]), self.lenient)
                rel, rel_d = relation_score(self._text(replies[2 * j + 1]), self.lenient)
                if self.strict and (var.get("unreadable") or not _counts_ok(var)):
                    raise Unreadable(f"strict_replies: unusable variables reply (the official code reads F1 = "
                                     f"{f1:g}): {_head(replies[2 * j].text)}")
                if self.strict and rel_d.get("unreadable"):
                    raise Unreadable(f"strict_replies: the relation answer is none of A/B/C (the official code "
                                     f"reads -1): {_head(replies[2 * j + 1].text)}")
            except Unreadable as exc:
                failed[k] = str(exc)
                continue
            state[k].setdefault("pairs", []).append({"pred": p, "gold": g, "variables": var, "relation": rel_d,
                                                     "score": f1 * rel})
        out = []
        for k in range(n):
            s = state[k]
            judges = {role: {"judge": client.model.key, "usage": used[k][role]}
                      for role, client in (("split", self.split_client), ("pair", self.pair_client)) if used[k][role]}
            if k in failed:
                status = "error" if failed[k].startswith("judge call failed") else "parse_error"
                out.append(Score(value=None, status=status, reason=failed[k], details={"judges": judges}))
                continue
            pair_list = s.get("pairs", [])
            value = hms_final(len(s["gold_subs"]), len(s["pred_subs"]), [x["score"] for x in pair_list])
            notes = [w for w, hit in (("variables reply unreadable, F1 -1 as the official", any(
                x["variables"].get("unreadable") for x in pair_list)), ("relation answer none of A/B/C, -1 as the "
                "official", any(x["relation"].get("unreadable") for x in pair_list))) if hit]
            out.append(Score(value=value, correct=None,
                             reason="; ".join([f"recall of contexts x mean pair score = {value:.3f}", *notes]),
                             details={"gold_sub_hypo": s["gold_subs"], "pred_sub_hypo": s["pred_subs"],
                                      "matched": {str(p): g for p, g in s["matched"].items()}, "pairs": pair_list,
                                      "recall_context": len(pair_list) / len(s["gold_subs"]), "judges": judges}))
        return out

    @staticmethod
    def _same_context(s: dict[str, Any], p: int, g: int) -> bool:
        """The official reading of one (predicted, gold) pair in the greedy pass: both texts are read first, and a
        matched pair's contexts are read as keys (a missing one stops the official evaluation)."""
        gs, ps = s["gold_subs"][g], s["pred_subs"][p]
        _sub_text(gs), _sub_text(ps)
        gc, pc = _context(gs), _context(ps)
        if gc == pc:
            same = True
        elif "None" in (gc, pc):
            same = False
        else:
            same = s["ctx"][(p, g)]
            if isinstance(same, Exception):
                raise same if isinstance(same, Unreadable) else Unreadable(str(same))
        if same and not ("context" in gs and "context" in ps):
            raise Unreadable("a matched sub-hypothesis has no context, where the official code stops")
        return bool(same)

    @staticmethod
    def _text(reply) -> str:
        if reply.text is None:
            raise Unreadable(f"judge call failed: {reply.error}")
        return reply.text
