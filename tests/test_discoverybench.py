"""DiscoveryBench: the repository layout (metadata + answer key), slices, answer extraction, and llm_score / hms_score
end to end on the shipped sample with a scripted model (pandas through the python tool) and a scripted judge."""
import json
import re
from pathlib import Path

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.discoverybench import extract_hypothesis, extract_workflow
from evalpipe.core.config import ModelConfig, SplitConfig
from evalpipe.core.errors import DataError
from evalpipe.runners import Runner, register_runner
from evalpipe.core.types import Generation

REPO = Path(__file__).parents[1]
SAMPLE = REPO / "data" / "discoverybench_sample"
JUDGE_CALLS: list[str] = []


def split(name="test", path=SAMPLE, **options):
    return SplitConfig(key=f"discoverybench/{name}", benchmark="discoverybench", split=name, adapter="discoverybench",
                       options={"path": str(path), **options}, metrics=None, prompt_template=None, base_dir=REPO)


def test_loads_test_and_train_with_gold_from_answer_key_and_metadata():
    a = adapter_for(split())
    test = list(a.load())
    assert [s.id for s in test] == ["crop_yield/0/0", "wages/0/0"]
    assert test[0].target.startswith("Yield rises linearly with fertilizer") and [a.slices(s) for s in test] == [
        {"domain": "agriculture"}, {"domain": "economics"}]
    m = test[0].metadata
    assert m["query"] == "How does fertilizer use relate to yield?" and m["workflow"] == ""
    assert m["datasets"][0]["dataset_description"] == "Yields of ten wheat plots in one season."
    assert [c["name"] for c in m["datasets"][0]["columns"]] == ["fertilizer_kg", "irrigated", "yield_t"]
    assert "fertilizer_kg: Nitrogen fertilizer" in test[0].input and "HYPOTHESIS:" in test[0].system
    assert "Domain knowledge" not in test[0].input
    train = list(adapter_for(split("train")).load())
    assert [s.id for s in train] == ["coffee_sleep/0/0", "coffee_sleep/0/1"]
    assert "0.44 fewer hours" in train[0].target and train[0].metadata["workflow"].startswith("1. Regressed")
    k = list(adapter_for(split("train", domain_knowledge=True)).load())[0]
    assert "Domain knowledge: Caffeine" in k.input
    assert [s.id for s in adapter_for(split(domains="economics")).load()] == ["wages/0/0"]


def test_without_answer_key_test_samples_are_unscored_and_errors(tmp_path):
    import shutil

    root = tmp_path / "clone"
    shutil.copytree(SAMPLE / "discoverybench", root / "discoverybench")
    assert all(s.target is None for s in adapter_for(split(path=root)).load())
    with pytest.raises(DataError, match="no real/dev/ folder"):
        list(adapter_for(split("dev", path=root)).load())
    (root / "discoverybench/real/test/wages/wages.csv").unlink()
    with pytest.raises(DataError, match="dataset file 'wages.csv' not found"):
        list(adapter_for(split(path=root)).load())


def test_hypothesis_and_workflow_extraction():
    reply = "I ran a regression.\nHYPOTHESIS: Yield rises with fertilizer.\nWORKFLOW: 1. OLS of yield on fertilizer."
    assert extract_hypothesis(reply) == "Yield rises with fertilizer."
    assert extract_workflow(reply) == "1. OLS of yield on fertilizer."
    assert extract_hypothesis("Just a sentence.") == "Just a sentence." and extract_workflow("x") == ""


# ---- end to end with a scripted judge ------------------------------------------------------------------------------
class DSJudge(Runner):
    name = "dsjudge"

    async def generate(self, request):
        p = request.messages[-1]["content"]
        JUDGE_CALLS.append(p)
        if "## The final answer is" in p:
            pred = p.split("Predicted answer:\n", 1)[1].split("\n\nGold answer", 1)[0]
            return Generation(text="Thoughts: checked.\n\n## The final answer is: " + ("True" if "0.03" in pred else "False"))
        if "Split the hypothesis" in p:
            hyp = re.search(r"Hypothesis: (.*)\n", p).group(1)
            if "no clear relation" in hyp:
                return Generation(text='{"sub_hypo": []}')
            ctx = "all plots" if ("fertilizer" in hyp or "Yield" in hyp) else "all workers"
            return Generation(text=json.dumps({"sub_hypo": [{"text": hyp, "context": ctx, "variables": ["a", "b"],
                                                             "relations": "positive"}]}))
        if "Count the variables" in p:
            return Generation(text='{"sizeA": 2, "sizeB": 2, "intersection": 2, "explanation": "same"}')
        if "Options: A) very similar" in p:
            return Generation(text='{"answer": "A) very similar", "explanation": "same slope"}')
        raise AssertionError(p[:300])


register_runner("dsjudge", DSJudge, replace=True)

SCRIPT = [
    {"sample_id": "crop_yield/0/0", "turns": [
        {"tool_calls": [{"name": "python", "arguments": {"code": "import numpy as np, pandas as pd\n"
                                                                  "d = pd.read_csv('crop_yield.csv')\n"
                                                                  "print(round(np.polyfit(d.fertilizer_kg, d.yield_t, 1)[0], 3))"}}]},
        {"content": "HYPOTHESIS: Yield increases linearly with fertilizer, about 0.03 t/ha per kg.\nWORKFLOW: OLS fit."}]},
    {"sample_id": "wages/0/0", "turns": [{"content": "HYPOTHESIS: There is no clear relation between schooling and wages."}]},
]


@pytest.mark.slow
def test_llm_score_and_hms_end_to_end(home, write_config):
    write_config("""
benchmarks:
  discoverybench:
    adapter: discoverybench
    splits: {test: {}}
    options: {path: "{repo}/data/discoverybench_sample"}
models: {m: {runner: echo}}
judges: {ds: {runner: dsjudge, model: x}}  # issue 20: a model-graded metric needs a judge in the config
""")
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.runners import build_runner, run_settings_for

    JUDGE_CALLS.clear()
    cfg = load_config()
    sp = cfg.split("discoverybench/test")
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": SCRIPT})
    prompts = pipeline.build_prompts(sp, model.key, pipeline.build_dataset(sp))
    roll = pipeline.run_rollouts(sp, model, prompts, build_runner(model), run_settings_for(model),
                                 journal_file=home / "j.sqlite")
    assert "0.03" in "".join(str(t) for t in roll["tool_trace"].dropna())  # the slope the sandboxed pandas printed
    judge = {"runner": "dsjudge", "model": "x"}
    j = pipeline.judge(sp, prompts, roll, metrics=[{"name": "llm_score", "judge": judge},
                                                   {"name": "hms_score", "judge": judge}])
    m = {(r.metric, r.slice): r.value for r in pipeline.compute_metrics(sp.key, model.key, j).itertuples()}
    assert m[("llm_score", "all")] == 0.5 and m[("llm_score", "domain=agriculture")] == 1.0
    # crop: one sub-hypothesis each side, same context string -> matched; F1 1 x relation 1 -> 1.0
    # wages: the prediction splits into nothing -> whole text, context "None" -> no match -> 0.0
    assert m[("hms_score", "all")] == 0.5 and m[("hms_score", "domain=economics")] == 0.0
    split_prompts = [p for p in JUDGE_CALLS if "Split the hypothesis" in p]
    assert len(split_prompts) == 4 and any("Workflow: OLS fit." in p for p in split_prompts)
    pair = [p for p in JUDGE_CALLS if "Count the variables" in p]
    assert len(pair) == 1 and "HypoA: Yield rises linearly" in pair[0] and "WorkflowB: OLS fit." in pair[0]
    assert "Yields of ten wheat plots" in pair[0] and "Query: How does fertilizer use relate to yield?" in pair[0]


def test_hub_offline_error_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    sc = SplitConfig(key="discoverybench/test", benchmark="discoverybench", split="test", adapter="discoverybench",
                     options={}, metrics=None, prompt_template=None, base_dir=REPO)
    with pytest.raises(DataError, match=r"allenai/discoverybench is not in the local Hugging Face cache and "
                                        r"HF_HUB_OFFLINE=1.*set 'path:' under the discoverybench benchmark") as e:
        list(adapter_for(sc).load())
    assert "\n" not in str(e.value)


def test_metadata_id_is_the_file_number_and_windows_1252_files_load(tmp_path):
    """As in the published data: several metadata files of one dataset carry "id": 0, the answer key's metadataid
    is the file's number, and the synth files are Windows-1252 text."""
    import shutil

    root = tmp_path / "clone"
    src = SAMPLE / "discoverybench/real/test/wages"
    dst = root / "discoverybench/real/test/wages"
    shutil.copytree(src, dst)
    meta = json.loads((dst / "metadata_0.json").read_text())
    meta["datasets"][0]["description"] = "Hourly wages \u2019 schooling, 5 \u00b5"
    (dst / "metadata_3.json").write_bytes(json.dumps(meta, ensure_ascii=False).encode("cp1252"))  # still "id": 0
    (root / "eval").mkdir()
    (root / "eval/answer_key_real.csv").write_bytes(
        "dataset,metadataid,query_id,gold_hypo\nwages,0,0,first\nwages,3,0,third \u2019 one\n".encode("cp1252"))
    samples = list(adapter_for(split(path=root)).load())
    assert [(s.id, s.target) for s in samples] == [("wages/0/0", "first"), ("wages/3/0", "third \u2019 one")]
    assert "\u2019 schooling, 5 \u00b5" in samples[1].input


# ---- hms_score reads judge replies as DiscoveryBench's eval/new_eval.py does ---------------------------------------
# Each case: the judge's replies (the defaults below, with the case's overrides) and the final score the official
# code gives for them (STOP: the official evaluation raises, so the sample is refused as a parse_error). The expected
# values were worked out from the official code and checked by running its functions with these replies.
STOP = "stop"
GOLD, PRED = "GOLD income rises with age", "PRED income rises with age"


def sub(text, context, **kw):
    return {"text": text, "context": context, "variables": ["age", "income"], "relations": "positive", **kw}


def split_reply(*subs):
    return json.dumps({"sub_hypo": list(subs)})


VAR_OK = {"sizeA": 2, "sizeB": 3, "intersection": 2, "explanation": "age, income shared"}  # F1 = 0.8
HMS_DEFAULT_REPLIES = {
    "gold_split": split_reply(sub("older US adults earn more", "adults in the US")),
    "pred_split": split_reply(sub("older Americans earn more", "American adults")),
    "context": '{"match": true}',  # contexts differ as strings: the judge is asked
    "var": json.dumps(VAR_OK),
    "rel": '{"answer": "A) very similar", "explanation": "same"}',
}
HMS_CASES = [
    ("baseline", {}, 0.8),
    # context replies: the official reads the JSON's "match" by truthiness, after trimming fences; 5 tries, then raises
    ("match_string_false", {"context": '{"match": "false"}'}, 0.8),
    ("match_one", {"context": '{"match": 1}'}, 0.8),
    ("match_zero", {"context": '{"match": 0}'}, 0.0),
    ("match_missing", {"context": '{"verdict": true}'}, 0.0),
    ("match_fenced", {"context": '```json\n{"match": true}\n```'}, 0.8),
    ("match_prose_every_try", {"context": 'Yes. {"match": true}'}, STOP),
    ("match_prose_then_json", {"context": ['Yes. {"match": true}', 'Hmm', '{"match": true}']}, 0.8),
    ("match_list", {"context": "[true]"}, STOP),
    # variables replies: json.loads of the whole reply; any failure (incl. a missing key) is F1 = -1
    ("var_no_explanation", {"var": '{"sizeA": 2, "sizeB": 3, "intersection": 2}'}, -1.0),
    ("var_sizes_strings", {"var": '{"sizeA": "2", "sizeB": "3", "intersection": "2", "explanation": "x"}'}, -1.0),
    ("var_sizes_floats", {"var": '{"sizeA": 2.0, "sizeB": 3.0, "intersection": 2.0, "explanation": "x"}'}, 0.8),
    ("var_prose", {"var": "Here: " + json.dumps(VAR_OK)}, -1.0),
    ("var_fenced", {"var": "```json\n" + json.dumps(VAR_OK) + "\n```"}, -1.0),
    ("var_list", {"var": "[2, 3, 2]"}, -1.0),
    ("var_sizeB_zero", {"var": '{"sizeA": 2, "sizeB": 0, "intersection": 2, "explanation": "x"}'}, 0.0),
    ("var_sizeA_null", {"var": '{"sizeA": null, "sizeB": 3, "intersection": 2, "explanation": "x"}'}, 0.0),
    ("var_intersection_over_sizes", {"var": '{"sizeA": 1, "sizeB": 1, "intersection": 2, "explanation": "x"}'}, 2.0),
    # relation replies: json.loads of the whole reply (raises if not JSON), answer.strip(): starts with A/B/C or holds
    # the option's words, else -1
    ("rel_B", {"rel": '{"answer": "B) similar but general than HypoA", "explanation": "x"}'}, 0.4),
    ("rel_unknown_option", {"rel": '{"answer": "D) unrelated", "explanation": "x"}'}, -0.8),
    ("rel_starts_with_A", {"rel": '{"answer": "Answer: C) different", "explanation": "x"}'}, 0.8),
    ("rel_lowercase_words", {"rel": '{"answer": "b) very similar"}'}, 0.8),
    ("rel_prose", {"rel": 'Answer: {"answer": "A) very similar", "explanation": "x"}'}, STOP),
    ("rel_fenced", {"rel": '```json\n{"answer": "A) very similar", "explanation": "x"}\n```'}, STOP),
    ("rel_no_answer", {"rel": '{"explanation": "x"}'}, STOP),
    ("rel_answer_not_text", {"rel": '{"answer": 1, "explanation": "x"}'}, STOP),
    # split replies: trimmed of fences and json.loads'ed once; unreadable -> the whole hypothesis in context "None"
    ("split_prose", {"pred_split": "Sub-hypotheses: " + split_reply(sub("older Americans earn more", "American adults"))}, 0.0),
    ("split_fenced", {"pred_split": "```json\n" + split_reply(sub("older Americans earn more", "American adults")) + "\n```"}, 0.8),
    ("split_empty_both", {"gold_split": '{"sub_hypo": []}', "pred_split": '{"sub_hypo": []}'}, 0.8),
    ("split_empty_string", {"pred_split": '{"sub_hypo": ""}'}, 0.0),
    ("split_no_sub_hypo_key", {"pred_split": '{"subs": []}'}, STOP),
    ("split_sub_hypo_string", {"pred_split": '{"sub_hypo": "older Americans earn more"}'}, STOP),
    ("split_not_an_object", {"pred_split": "[1, 2]"}, STOP),
    ("split_no_text", {"pred_split": json.dumps({"sub_hypo": [{"context": "American adults"}]})}, STOP),
    ("split_no_context_keys", {"gold_split": json.dumps({"sub_hypo": [{"text": "a"}]}),
                               "pred_split": json.dumps({"sub_hypo": [{"text": "b"}]})}, STOP),
    ("split_null_contexts", {"gold_split": split_reply(sub("a", None)), "pred_split": split_reply(sub("b", None))}, 0.8),
    ("split_context_None", {"pred_split": split_reply(sub("b", "None"))}, 0.0),
    ("split_two_gold", {"gold_split": split_reply(sub("a", "adults in the US"), sub("c", "children"))}, 0.4),
    ("split_two_pred", {"pred_split": split_reply(sub("a", "US adults"), sub("c", "children"))}, 0.4),
]
HMS_CALLS: list[tuple[str, dict]] = []
HMS_REPLIES: dict = {}


class HMSJudge(Runner):
    """Replies by prompt kind from HMS_REPLIES (a list: one reply per call, the last repeated); logs (kind, params)."""
    name = "hmsjudge"

    async def generate(self, request):
        p = request.messages[-1]["content"]
        if "Split the hypothesis" in p:
            kind = "gold_split" if f"Hypothesis: {GOLD}\n" in p else "pred_split"
        elif "same context" in p:
            kind = "context"
        elif "Count the variables" in p:
            kind = "var"
        elif "Options: A) very similar" in p:
            kind = "rel"
        else:
            raise AssertionError(p[:300])
        n = sum(k == kind for k, _ in HMS_CALLS)
        HMS_CALLS.append((kind, dict(self.model.params)))
        r = HMS_REPLIES[kind]
        return Generation(text=r[min(n, len(r) - 1)] if isinstance(r, list) else r)


register_runner("hmsjudge", HMSJudge, replace=True)


def hms(replies, **settings):
    import asyncio

    from evalpipe.metrics import JudgeInput, build_metric

    HMS_CALLS.clear()
    HMS_REPLIES.clear()
    HMS_REPLIES.update({**HMS_DEFAULT_REPLIES, **replies})
    m = build_metric({"name": "hms_score", "judge": {"runner": "hmsjudge", "model": "j"}, **settings})
    return asyncio.run(m.ascore_many([JudgeInput("d", "How does income relate to age?", GOLD, PRED)]))[0]


@pytest.mark.parametrize("case,replies,official", HMS_CASES, ids=[c[0] for c in HMS_CASES])
def test_hms_reads_judge_replies_as_the_official_code(home, case, replies, official):
    s = hms(replies)
    if official == STOP:
        assert s.status == "parse_error" and s.value is None and "official" in s.reason
    else:
        assert s.status == "scored" and s.value == pytest.approx(official)


def test_hms_context_reply_is_asked_five_times_then_refused(home):
    s = hms({"context": "I think they match."})
    assert s.status == "parse_error" and [k for k, _ in HMS_CALLS].count("context") == 5


def test_hms_context_reply_asked_again_until_readable(home):
    assert hms({"context": ["no json", '{"match": true}']}).value == pytest.approx(0.8)
    assert [k for k, _ in HMS_CALLS].count("context") == 2


def test_hms_judge_called_with_the_official_settings(home):
    hms({})
    kinds = {k: p for k, p in HMS_CALLS}
    assert set(kinds) == {"gold_split", "pred_split", "context", "var", "rel"}
    for k in ("gold_split", "pred_split", "context"):  # the official get_response: temperature 1, no response format
        assert {x: kinds[k].get(x) for x in ("temperature", "top_p", "max_tokens", "response_format")} == {
            "temperature": 1.0, "top_p": 1.0, "max_tokens": 4096, "response_format": None}
    for k in ("var", "rel"):  # the official lm_utils call: temperature 0, 250 tokens, JSON-only replies
        assert {x: kinds[k].get(x) for x in ("temperature", "top_p", "max_tokens", "response_format")} == {
            "temperature": 0, "top_p": 1.0, "max_tokens": 250, "response_format": {"type": "json_object"}}
    hms({}, judge_params="judge")  # the judge entry's own params (greedy, seeded), as before
    assert all(p == {"temperature": 0, "seed": 0} for _, p in HMS_CALLS)


@pytest.mark.parametrize("case,setting,value", [
    ("var_prose", {"lenient_json": True}, 0.8),
    ("var_fenced", {"lenient_json": True}, 0.8),
    ("rel_prose", {"lenient_json": True}, 0.8),
    ("match_prose_every_try", {"lenient_json": True}, 0.8),
    ("split_prose", {"lenient_json": True}, 0.8),
    ("var_no_explanation", {"strict_replies": True}, STOP),
    ("var_intersection_over_sizes", {"strict_replies": True}, STOP),
    ("rel_unknown_option", {"strict_replies": True}, STOP),
    ("split_prose", {"strict_replies": True}, STOP),
    ("match_string_false", {"strict_replies": True}, STOP),
    ("baseline", {"strict_replies": True, "lenient_json": True}, 0.8),
])
def test_hms_deliberate_differences_are_named_settings(home, case, setting, value):
    s = hms(next(c[1] for c in HMS_CASES if c[0] == case), **setting)
    if value == STOP:
        assert s.status == "parse_error" and s.value is None
    else:
        assert s.status == "scored" and s.value == pytest.approx(value)


def test_hms_setting_values_are_checked(home):
    from evalpipe.core.errors import ConfigError
    from evalpipe.metrics import build_metric

    for bad in ({"judge_params": "fast"}, {"lenient_json": "yes"}, {"strict_replies": 1}):
        with pytest.raises(ConfigError, match="hms_score"):
            build_metric({"name": "hms_score", "judge": {"runner": "hmsjudge", "model": "j"}, **bad})


@pytest.fixture
def hms_server():
    """A loopback OpenAI-compatible server that answers hms_score's questions (HMS_DEFAULT_REPLIES) and keeps every
    request body."""
    from benchmarks.mock_server import MockLLM, serve_in_thread

    class HmsJudge(MockLLM):
        def answer_for(self, p: str) -> str:
            kind = ("gold_split" if f"Hypothesis: {GOLD}\n" in p else "pred_split") if "Split the hypothesis" in p else (
                "context" if "same context" in p else "var" if "Count the variables" in p else "rel")
            return HMS_DEFAULT_REPLIES[kind]

    with serve_in_thread(HmsJudge()) as (mock, url):
        yield url, mock.bodies


def test_hms_official_judge_settings_reach_the_wire(home, hms_server):
    """Through the litellm runner (its fast path) to a loopback server: the requests carry the official decoding."""
    import asyncio

    from evalpipe.metrics import JudgeInput, build_metric
    from evalpipe.runners import list_runners

    if "litellm" not in list_runners():
        pytest.skip("the litellm runner is not registered")
    url, seen = hms_server
    judge = {"runner": "litellm", "model": "openai/judge-1", "api_base": url, "options": {"fast_path": True}}
    s = asyncio.run(build_metric({"name": "hms_score", "judge": judge}).ascore_many(
        [JudgeInput("d", "How does income relate to age?", GOLD, PRED)]))[0]
    assert s.value == pytest.approx(0.8)
    by_kind = {("pair" if "Count the variables" in b["messages"][-1]["content"] or "Options: A)" in
                b["messages"][-1]["content"] else "split"): b for b in seen}
    assert len(seen) == 5  # two splits, one context question, variables, relation
    assert by_kind["split"]["temperature"] == 1.0 and by_kind["split"]["max_tokens"] == 4096
    assert "response_format" not in by_kind["split"]
    assert by_kind["pair"]["temperature"] == 0 and by_kind["pair"]["max_tokens"] == 250
    assert by_kind["pair"]["response_format"] == {"type": "json_object"}
