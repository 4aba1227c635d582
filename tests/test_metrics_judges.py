"""Model-graded metrics: llm_judge, llm_score, hms_score, with a scripted judge runner (test only) and with the
real `litellm` runner against a loopback OpenAI-compatible server."""
import asyncio
import dataclasses
import json
import re

import pytest

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.metrics import JudgeInput
from evalpipe.metrics import build_metric as _build_metric
from evalpipe.metrics.hms import greedy_match, hms_final
from evalpipe.runners import Runner, list_runners, register_runner
from evalpipe.core.types import Generation

CALLS: list[tuple[str, str]] = []  # (judge model, last user message) of every call that reached a judge
SCRIPTS: dict = {}  # judge model name -> function(prompt text) -> reply


class ScriptedJudge(Runner):
    name = "scripted"

    async def generate(self, request):
        text = request.messages[-1]["content"]
        CALLS.append((self.model.model, text))
        return Generation(text=SCRIPTS[self.model.model](text), input_tokens=1, output_tokens=1, cost=0.0)


register_runner("scripted", ScriptedJudge, replace=True)


@pytest.fixture
def judges(write_config, home):
    """A config with scripted judges `strict`, `lenient` and `garbled`; clears the call log."""
    CALLS.clear()
    write_config("""
benchmarks: {smoke: {adapter: file, splits: {test: {path: "{repo}/data/smoke/test.jsonl"}}}}
models: {m: {runner: echo}}
judges:
  strict: {runner: scripted, model: strict}
  lenient: {runner: scripted, model: lenient}
  garbled: {runner: scripted, model: garbled}
""")

    def answer(prompt):  # the text between "Answer to grade:" and the instructions
        return prompt.split("Answer to grade:\n", 1)[1].split("\n\n", 1)[0].strip()

    def reference(prompt):
        return prompt.split("Reference answer:\n", 1)[1].split("\n\n", 1)[0].strip()

    SCRIPTS.update({
        "strict": lambda p: json.dumps({"rationale": "compared", "verdict": "correct" if answer(p) == reference(p) else "incorrect"}),
        "lenient": lambda p: "Looks fine.\nVERDICT: CORRECT",
        "garbled": lambda p: "I am not sure what to say.",
    })
    return CALLS


def build_metric(spec, overrides=None):
    """As the metrics stage builds a metric: with the project's config (its `judges:`)."""
    from evalpipe.project import load_config

    return _build_metric(spec, overrides, load_config())


def items(*pairs):
    return [JudgeInput(f"s{i}", f"question {i}", gold, pred) for i, (pred, gold) in enumerate(pairs)]


def run(metric, its):
    return asyncio.run(metric.ascore_many(its))


def test_llm_judge_verdicts_rationale_and_defaults(judges):
    m = build_metric({"name": "llm_judge", "judge": "strict"})
    out = run(m, items(("Paris", "Paris"), ("Lyon", "Paris")))
    assert [s.value for s in out] == [1.0, 0.0] and [s.status for s in out] == ["scored", "scored"]
    assert "compared" in out[0].reason and out[0].details["judges"]["strict"]["rationale"] == "compared"
    assert m.clients[0].model.params == {"temperature": 0, "seed": 0}  # judges decode greedily, seeded
    assert len(judges) == 2


def test_unparseable_verdict_is_a_parse_error_not_a_guess(judges):
    out = run(build_metric({"name": "llm_judge", "judge": "garbled"}), items(("Paris", "Paris")))
    assert out[0].status == "parse_error" and out[0].value is None and out[0].correct is None
    assert "not sure" in out[0].details["judges"]["garbled"]["reply"]


def test_a_failed_judge_call_is_an_error_and_is_retried_next_time(judges):
    def broken(prompt):
        raise ValueError("judge endpoint down")

    SCRIPTS["broken"] = broken
    m = build_metric({"name": "llm_judge", "judge": {"runner": "scripted", "model": "broken"}})
    out = run(m, items(("Paris", "Paris")))
    assert out[0].status == "error" and "judge endpoint down" in out[0].reason
    SCRIPTS["broken"] = lambda p: "VERDICT: correct"
    assert run(m, items(("Paris", "Paris")))[0].value == 1.0  # failures are not cached
    assert len(judges) == 2


def test_identical_pairs_are_judged_once_across_batches_and_metric_instances(judges):
    its = items(("Paris", "Paris"), ("Lyon", "Paris"))
    its.append(JudgeInput("s9", its[0].input, "Paris", "Paris"))  # the same (sample, prediction) again
    run(build_metric({"name": "llm_judge", "judge": "strict"}), its)
    assert len(judges) == 2
    again = run(build_metric({"name": "llm_judge", "judge": "strict", "concurrency": 3}), its)  # call settings don't matter
    assert len(judges) == 2 and [s.value for s in again] == [1.0, 0.0, 1.0]
    assert again[0].details["judges"]["strict"]["cached"] is True
    run(build_metric({"name": "llm_judge", "judge": "strict", "prompt": "Q {input}\nAnswer to grade:\n{prediction}\n\n"
                      "Reference answer:\n{target}\n\nVERDICT?"}), its)
    assert len(judges) == 4  # another prompt is another judge


def test_partitions_judged_at_once_share_one_call_per_pair(judges):
    """Two partitions of one run (threads) asking the same pairs while the first calls are still in flight."""
    import threading
    import time

    def slow(prompt):
        time.sleep(0.3)  # both threads are asking before either has an answer
        return "VERDICT: correct"

    SCRIPTS["slow"] = slow
    its = items(("Paris", "Paris"), ("Lyon", "Paris"))
    out: list = []
    workers = [threading.Thread(target=lambda: out.append(run(build_metric(
        {"name": "llm_judge", "judge": {"runner": "scripted", "model": "slow"}}), its))) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(judges) == 2 and len(out) == 3
    assert all([s.value for s in o] == [1.0, 1.0] for o in out)


def test_several_judges_majority_and_agreement(judges):
    m = build_metric({"name": "llm_judge", "judges": ["strict", "lenient", "garbled"]})
    out = run(m, items(("Paris", "Paris"), ("Lyon", "Paris")))
    assert out[0].value == 1.0 and out[0].details["agreement"] is True
    assert out[1].value == 0.0 and out[1].details["agreement"] is False  # 1 of 2 readable verdicts: a tie is not a majority
    assert out[1].details["judges"]["garbled"]["status"] == "parse_error"
    assert out[1].details["components"] == {"[strict]": 0.0, "[lenient]": 1.0, "[garbled]": 0.0}
    mean = run(build_metric({"name": "llm_judge", "judges": ["strict", "lenient"], "combine": "mean"}), items(("Lyon", "Paris")))
    assert mean[0].value == 0.5


def test_judge_settings_errors(judges):
    with pytest.raises(ConfigError, match="unknown judge 'nope'"):
        build_metric({"name": "llm_judge", "judge": "nope"})
    with pytest.raises(ConfigError, match="unknown setting"):
        build_metric({"name": "llm_judge", "judge": "strict", "temprature": 0})
    with pytest.raises(ConfigError, match="combine"):
        build_metric({"name": "llm_judge", "judge": "strict", "combine": "vote"})


def test_judge_names_are_looked_up_in_the_config_the_caller_gives(judges):
    from evalpipe.project import load_config

    with pytest.raises(ConfigError, match="no config was given"):
        _build_metric({"name": "llm_judge", "judge": "strict"})
    with pytest.raises(ConfigError, match="needs a judge model"):
        _build_metric("llm_judge")
    cfg = load_config()
    assert [c.model.key for c in _build_metric("llm_judge", None, cfg).clients] == ["strict"]  # the first entry
    other = cfg.judges["lenient"]
    named = _build_metric({"name": "llm_judge", "judge": "strict"}, None,
                          dataclasses.replace(cfg, judges={"strict": other}))
    assert named.clients[0].model.model == "lenient"  # the caller's config, not the file's


def test_run_wide_judge_override_reaches_only_model_graded_metrics(judges):
    overrides = {"*": {"judges": ["lenient"], "concurrency": 2}}
    m = build_metric({"name": "llm_judge", "judge": "strict"}, overrides)
    assert [c.model.key for c in m.clients] == ["lenient"]
    assert build_metric("exact_match", overrides).settings == {}


def test_llm_score_is_discoverybench_discrete_scoring(judges):
    """The judge ends with `## The final answer is: True|False`; the text after the marker must be exactly True or
    False (the reference scores anything else 0: here a parse_error, which also counts 0)."""
    SCRIPTS["tf"] = lambda p: ("Thoughts: compared.\n\n## The final answer is: "
                               + ("False" if "Predicted answer:\nnorth" in p else "True.") if "north" in p or "east" in p
                               else "Thoughts: same.\n\n## The final answer is: True")
    m = build_metric({"name": "llm_score", "judge": {"runner": "scripted", "model": "tf"}})
    out = run(m, items(("100.9", "100"), ("south", "south"), ("north", "south"), ("east", "south")))
    assert [s.value for s in out] == [1.0, 1.0, 0.0, None] and out[3].status == "parse_error"
    assert out[0].reason.endswith("same.") and len(judges) == 4  # numbers go to the judge too, as in the reference
    assert "within 1% relative error" in judges[0][1] and "Query: question 0" in judges[0][1]
    shortcut = build_metric({"name": "llm_score", "judge": {"runner": "scripted", "model": "tf"}, "numeric_shortcut": True})
    out = run(shortcut, items(("100.9", "100"), ("101.5", "100"), ("0.0", "0")))
    assert [s.value for s in out] == [1.0, 0.0, 1.0] and out[0].details == {"method": "numeric"} and len(judges) == 4


HMS_REPLIES = {
    # splits
    ("split", "Gold: older people earn more in the US and smokers die earlier"): {"sub_hypo": [
        {"text": "older people earn more", "context": "US adults", "variables": ["age", "income"], "relations": "positive"},
        {"text": "smokers die earlier", "context": "all people", "variables": ["smoking", "lifespan"], "relations": "negative"}]},
    ("split", "Pred: in America income rises with age"): {"sub_hypo": [
        {"text": "income rises with age", "context": "American adults", "variables": ["income", "age"], "relations": "positive linear"}]},
}


def hms_script(prompt):
    if "Split the hypothesis" in prompt:
        hyp = re.search(r"Hypothesis: (.*)\n", prompt).group(1)
        return json.dumps(HMS_REPLIES[("split", hyp)])
    if "same context" in prompt:
        return json.dumps({"match": "US adults" in prompt and "American adults" in prompt})
    if "Count the variables" in prompt:
        return '{"sizeA": 2, "sizeB": 3, "intersection": 2, "explanation": "age and income shared"}'
    if "Options: A) very similar" in prompt:
        return json.dumps({"answer": "B) similar but more general than hypothesis A", "explanation": "less specific"})
    raise AssertionError(prompt)


def test_hms_score_follows_discoverybench(judges):
    SCRIPTS["hms"] = hms_script
    m = build_metric({"name": "hms_score", "judge": {"runner": "scripted", "model": "hms"}})
    it = JudgeInput("d1", "How does income relate to age?",
                    "Gold: older people earn more in the US and smokers die earlier", "Pred: in America income rises with age")
    s = run(m, [it])[0]
    # variable F1: p = 2/3, r = 2/2 -> 0.8; relation "more general" 0.5; recall of gold contexts 1/2; 1 predicted
    assert s.status == "scored" and s.value == pytest.approx(0.5 * (0.8 * 0.5) / 1)
    assert s.details["matched"] == {"0": 0} and s.details["pairs"][0]["variables"]["f1"] == pytest.approx(0.8)
    calls = len(judges)
    assert calls == 2 + 2 + 2  # two splits, two context questions (no exact/None shortcut), variables + relation
    run(m, [it])
    assert len(judges) == calls  # all from the judge cache


def test_hms_unreadable_reply_is_a_parse_error(judges):
    # as the official: unreadable splits -> whole hypotheses in context "None" (matched), then a relation reply that
    # is not JSON stops the official evaluation -> refused
    SCRIPTS["bad"] = lambda p: "no json here"
    s = run(build_metric({"name": "hms_score", "judge": {"runner": "scripted", "model": "bad"}}),
            [JudgeInput("d", "q", "gold hypothesis", "pred hypothesis")])[0]
    assert s.status == "parse_error" and "relation reply is not JSON" in s.reason


def test_hms_greedy_matching_and_final_score():
    same = {(0, 1): True, (1, 1): True, (1, 0): True}
    assert greedy_match(2, 2, lambda p, g: same.get((p, g), False)) == {0: 1, 1: 0}  # first match wins, gold used once
    assert greedy_match(2, 1, lambda p, g: True) == {0: 0}
    assert hms_final(2, 3, [1.0, 0.5]) == pytest.approx(1.0 * 1.5 / 3)
    assert hms_final(1, 0, []) == 0.0


# ---- the real litellm runner against a loopback OpenAI-compatible server ---------------------------------
@pytest.fixture
def openai_server():
    """A loopback OpenAI-compatible judge: "correct" when the graded answer is Paris; keeps every request body."""
    from benchmarks.mock_server import MockLLM, serve_in_thread

    class ParisJudge(MockLLM):
        def answer_for(self, prompt: str) -> str:
            ok = "Answer to grade:\nParis" in prompt
            return json.dumps({"rationale": "checked", "verdict": "correct" if ok else "incorrect"})

    with serve_in_thread(ParisJudge()) as (mock, url):
        yield url, mock.bodies


@pytest.mark.skipif("litellm" not in list_runners(), reason="the litellm runner is not registered")
@pytest.mark.parametrize("fast_path", [True, pytest.param(False, marks=pytest.mark.slow)])  # importing litellm: ~3-15 s
def test_llm_judge_through_the_litellm_runner(judges, openai_server, fast_path):
    url, seen = openai_server
    judge = {"runner": "litellm", "model": "openai/judge-1", "api_base": url, "options": {"fast_path": fast_path}}
    m = build_metric({"name": "llm_judge", "judge": judge})
    out = run(m, items(("Paris", "Paris"), ("Lyon", "Paris")))
    assert [s.value for s in out] == [1.0, 0.0] and out[0].details["judges"]
    assert len(seen) == 2 and seen[0]["temperature"] == 0 and seen[0]["seed"] == 0
    run(m, items(("Paris", "Paris"), ("Lyon", "Paris")))
    assert len(seen) == 2  # the judge cache answered


def test_model_config_of_a_named_judge(judges):
    m = build_metric({"name": "llm_judge", "judge": "strict"})
    assert isinstance(m.clients[0].model, ModelConfig) and m.clients[0].model.runner == "scripted"
