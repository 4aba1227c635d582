"""Model-graded metrics: `llm_judge` (a judge model grades the answer against the reference) and `llm_score`
(DiscoveryBench's discrete LLM scoring, as DSGym runs it: the judge reasons and ends with
`## The final answer is: True|False`; numbers right within 1% relative error).

Several judges at once (`judges: [a, b, c]`): each verdict is kept in the details; the sample's score is the
majority (`combine: majority`, ties count as incorrect), the mean (`combine: mean`), or requires all
(`combine: unanimous`); `agreement` (all parsed verdicts equal) is reported per sample and as the row
`<metric>_agreement`, and each judge's own accuracy as `<metric>[<judge>]`.
"""
from __future__ import annotations

import asyncio
import re
from typing import Any

from evalpipe.core.config import EvalConfig
from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import LLMJudgeSettings, LLMScoreSettings, ModelGradedSettings
from evalpipe.metrics.judge_client import CALL_SETTINGS, JudgeClient, judges_from_settings
from evalpipe.metrics.numbers import numbers_close, parse_number
from evalpipe.metrics.verdicts import NEGATIVE, POSITIVE, parse_verdict
from evalpipe.core.types import Score

_FIELD = re.compile(r"\{(input|target|prediction|raw_output)\}")


def render_template(template: str, item: JudgeInput) -> str:
    """Fill {input} {target} {prediction} {raw_output}; other braces (JSON examples) are left alone."""
    values = {"input": item.input, "target": item.target, "prediction": item.prediction, "raw_output": item.raw_output}
    return _FIELD.sub(lambda m: "" if values[m.group(1)] is None else str(values[m.group(1)]), template)


class ModelGraded(Metric):
    """Base of metrics that call judge models. Settings shared by all of them:
    judge / judges (names under the config's `judges:` or inline mappings), concurrency, timeout_s,
    max_retries (call settings: they don't change verdicts, so they stay out of the identity)."""

    name = "model_graded"
    known_settings: set[str] = set()
    shared_settings = ("judges", *CALL_SETTINGS)
    needs_judge = True
    takes_config = True  # `judges:` and `rate_limits:` of the project
    option_schema: Any = ModelGradedSettings  # typed and ranged (metrics/settings.py)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # the declared settings are what the constructor accepts: known_settings plus the shared ones (a subclass
        # that declares no settings model of its own: names only)
        super().__init_subclass__(**kwargs)
        if "option_schema" not in cls.__dict__:
            cls.option_schema = frozenset(cls.known_settings | {"judge", "judges", *CALL_SETTINGS})

    def __init__(self, config: EvalConfig | None = None, **settings: Any):
        allowed = self.known_settings | {"judge", "judges", *CALL_SETTINGS}
        unknown = set(settings) - allowed
        if unknown:
            raise ConfigError(f"{self.name}: unknown setting(s) {sorted(unknown)}; known: {sorted(allowed)}")
        super().__init__(**settings)
        self.judge_models = judges_from_settings(settings, self.name, config)
        call = {k: settings[k] for k in CALL_SETTINGS if k in settings}
        rate_limits = config.raw.get("rate_limits") if config is not None else None
        self.clients = [JudgeClient(m, call, rate_limits=rate_limits) for m in self.judge_models]

    def identity(self) -> dict[str, Any]:
        verdict_settings = {k: v for k, v in self.settings.items() if k not in CALL_SETTINGS + ("judge", "judges")}
        return {"metric": self.name, "settings": verdict_settings, "judges": [c.identity for c in self.clients]}

    def score(self, item: JudgeInput) -> Score:
        return asyncio.run(self.ascore_many([item]))[0]


DEFAULT_JUDGE_PROMPT = """You grade an answer to a question by comparing it with the reference answer.

Question:
{input}

Reference answer:
{target}

Answer to grade:
{prediction}

The answer is correct when it states the same thing as the reference answer; differences in wording, \
formatting or capitalisation don't matter. Hedged answers, several alternative answers, or answers that \
contradict the reference are incorrect.
Reply with a single JSON object and nothing else:
{"rationale": "<one or two sentences>", "verdict": "correct" or "incorrect"}"""


@register_metric("llm_judge")
class LLMJudge(ModelGraded):
    """Settings: prompt (a template with {input} {target} {prediction} {raw_output}), system (optional system
    message), combine (majority | mean | unanimous), plus the ModelGraded settings."""

    name = "llm_judge"
    known_settings = {"prompt", "system", "combine"}
    option_schema = LLMJudgeSettings
    default_prompt = DEFAULT_JUDGE_PROMPT
    positive, negative = POSITIVE, NEGATIVE

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        self.prompt = str(settings.get("prompt") or self.default_prompt)
        self.system = settings.get("system")
        self.combine = str(settings.get("combine", "majority"))
        if self.combine not in ("majority", "mean", "unanimous"):
            raise ConfigError(f"{self.name}: combine must be majority, mean or unanimous, not {self.combine!r}")

    def messages(self, item: JudgeInput) -> list[dict[str, Any]]:
        msgs = [{"role": "system", "content": str(self.system)}] if self.system else []
        return msgs + [{"role": "user", "content": render_template(self.prompt, item)}]

    def pre_verdict(self, item: JudgeInput) -> Score | None:
        """A verdict reached without a judge call (None: ask the judges)."""
        return None

    def read_verdict(self, text: str) -> tuple[float | None, str]:
        """(score, rationale) read from one judge reply; score None when the reply holds no readable verdict."""
        return parse_verdict(text, self.positive, self.negative)

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        out: list[Score | None] = [self.pre_verdict(i) for i in items]
        todo = [k for k, s in enumerate(out) if s is None]
        batch = [self.messages(items[k]) for k in todo]
        replies = await asyncio.gather(*(c.ask_many(batch) for c in self.clients)) if todo else []
        for pos, k in enumerate(todo):
            out[k] = self._combine([(c.model.key, r[pos]) for c, r in zip(self.clients, replies)])
        return out  # type: ignore[return-value]

    def _combine(self, per_judge: list[tuple[str, Any]]) -> Score:
        verdicts: dict[str, dict[str, Any]] = {}
        values: list[float] = []
        for name, reply in per_judge:
            usage = reply.usage()  # [spend] the judge call's tokens, cost, latency (0 when cached)
            if reply.text is None:
                verdicts[name] = {"status": "error", "error": reply.error, "usage": usage}
                continue
            value, rationale = self.read_verdict(reply.text)
            if value is None:
                verdicts[name] = {"status": "parse_error", "reply": reply.text[:2000], "usage": usage}
                continue
            verdicts[name] = {"status": "scored", "score": value, "rationale": rationale[:2000], "cached": reply.cached,
                              "usage": usage}
            values.append(value)
        details: dict[str, Any] = {"judges": verdicts}
        if len(per_judge) > 1:
            details["components"] = {f"[{n}]": v.get("score", 0.0) for n, v in verdicts.items()}
            if len(values) > 1:
                details["agreement"] = len({round(v, 6) for v in values}) == 1
        if not values:
            status = "parse_error" if any(v["status"] == "parse_error" for v in verdicts.values()) else "error"
            first = next(iter(verdicts.values()))
            reason = "unparseable verdict" if status == "parse_error" else f"judge call failed: {first.get('error')}"
            return Score(value=None, status=status, reason=reason, details=details)
        if self.combine == "mean":
            value = sum(values) / len(values)
        elif self.combine == "unanimous":
            value = float(all(v >= 0.5 for v in values))
        else:
            value = float(sum(v >= 0.5 for v in values) * 2 > len(values))
        reason = " | ".join(f"{n}: {v.get('rationale') or v['status']}" for n, v in verdicts.items())
        return Score(value=value, correct=value >= 0.5, reason=reason[:4000], details=details)


# DiscoveryBench's discrete LLM scoring (as DSGym runs it, `llm_score`): one call per answer, the judge reasons
# and ends with a fixed marker followed by True or False. The rules are theirs, the wording ours.
FINAL_MARKER = "## The final answer is:"
DEFAULT_SCORE_PROMPT = """Decide whether the predicted answer to the query below is right or wrong.
Query: {query}

Predicted answer:
{prediction}

Gold answer:
{target}

How to decide:
- A numerical answer is right when it is within 1% relative error of the gold value.
- Anything else is judged against the gold answer.
- The answer must be clear and complete; showing a calculation without stating the result is not right.

Reply in this format:

Thoughts: <your reasoning>

## The final answer is: <True or False only>
"""


@register_metric("llm_score")
class LLMScore(LLMJudge):
    """DiscoveryBench's discrete LLM score: the judge ends its reply with `## The final answer is: True|False`.

    Read as the reference reads it: the text after the first marker (up to a second one), stripped, must be exactly
    `True` (1) or `False` (0). A reply without the marker or with anything else there scores 0 in the reference; here
    it is a `parse_error`, which also counts 0 (and shows in n_errors). The prompt's `{query}` is the sample's
    `query` / `question` metadata (DiscoveryBench, DAEval, QRData adapters set it), else its input.
    `numeric_shortcut` (false): when both answers are plain numbers, decide without a call, right iff within
    `rel_tol` (0.01) of the gold number (not in the reference; off by default)."""

    name = "llm_score"
    known_settings = LLMJudge.known_settings | {"numeric_shortcut", "rel_tol"}
    option_schema = LLMScoreSettings
    default_prompt = DEFAULT_SCORE_PROMPT
    positive, negative = {"true"}, {"false"}

    def messages(self, item: JudgeInput) -> list[dict[str, Any]]:
        query = item.metadata.get("query") or item.metadata.get("question") or item.input
        text = render_template(self.prompt.replace("{query}", "" if query is None else str(query)), item)
        return ([{"role": "system", "content": str(self.system)}] if self.system else []) + [{"role": "user", "content": text}]

    def read_verdict(self, text: str) -> tuple[float | None, str]:
        if FINAL_MARKER not in text:
            return None, ""
        head, tail = text.split(FINAL_MARKER, 2)[:2]
        answer = tail.strip()
        rationale = head.strip()
        if rationale.lower().startswith("thoughts:"):
            rationale = rationale[len("thoughts:"):].strip()
        return {"True": 1.0, "False": 0.0}.get(answer), rationale

    def pre_verdict(self, item: JudgeInput) -> Score | None:
        if not self.settings.get("numeric_shortcut", False):
            return None
        p, g = parse_number(item.prediction), parse_number(item.target)
        if p is None or g is None:
            return None
        ok = numbers_close(p, g, rel_tol=float(self.settings.get("rel_tol", 0.01)))
        return Score(value=float(ok), correct=ok, reason=f"numeric: {p:g} vs {g:g}", normalized_prediction=str(p),
                     normalized_target=str(g), details={"method": "numeric"})
