"""DiscoveryBench: the repository layout (metadata + answer key), slices, answer extraction, and llm_score / hms_score
end to end on the shipped sample with a scripted model (pandas through the python tool) and a scripted judge."""
import json
import re
from pathlib import Path

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.discoverybench import extract_hypothesis, extract_workflow
from evalpipe.config import ModelConfig, SplitConfig
from evalpipe.errors import DataError
from evalpipe.runners import Runner, register_runner
from evalpipe.types import Generation

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
    from evalpipe import pipeline
    from evalpipe.config import load_config
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
