"""Re-judging without re-running: a judge change re-materializes judgements and metrics with zero calls to the
model under test, identical (judge, sample, prediction) pairs are judged once, and Dagster shows judgements
as stale after the judge changes in the config."""
import json

import pytest
from dagster import AssetKey, materialize

from evalpipe.project import load_config
from evalpipe.pipeline.fingerprints import split_judging_version
from evalpipe.runners import Runner, register_runner
from evalpipe.core.types import Generation
from evalpipe.store.warehouse import Warehouse
from partitions import eval_key

MODEL_CALLS: list[str] = []
JUDGE_CALLS: list[str] = []


class CountingModel(Runner):
    """The model under test: right on s1 and s3, wrong otherwise; every call is counted."""
    name = "counting"

    async def generate(self, request):
        MODEL_CALLS.append(request.sample_id)
        text = request.target if request.sample_id in ("s1", "s3") else "no idea"
        return Generation(text=text, input_tokens=7, output_tokens=3, cost=0.001)


class JudgeStub(Runner):
    """`strict` compares the answer with the reference; `lenient` accepts everything."""
    name = "judge_stub"

    async def generate(self, request):
        prompt = request.messages[-1]["content"]
        JUDGE_CALLS.append(self.model.model)
        if self.model.model == "lenient":
            return Generation(text='{"verdict": "correct", "rationale": "fine"}')
        answer = prompt.split("Answer to grade:\n", 1)[1].split("\n\n", 1)[0].strip()
        ref = prompt.split("Reference answer:\n", 1)[1].split("\n\n", 1)[0].strip()
        return Generation(text=f"VERDICT: {'correct' if answer == ref else 'incorrect'}")


register_runner("counting", CountingModel, replace=True)
register_runner("judge_stub", JudgeStub, replace=True)

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits: {extra: {path: "{repo}/data/smoke/test.jsonl", limit: 4}}
    options: {columns: {prompt: question, target: answer, id: id}}
    metrics: [{name: llm_judge, judge: JUDGE}, exact_match]
models:
  m1: {runner: counting}
  m2: {runner: counting}
judges:
  strict: {runner: judge_stub, model: strict}
  lenient: {runner: judge_stub, model: lenient}
"""


def values(home, model):
    wh = Warehouse(home / "warehouse.duckdb")
    df = wh.query(f"select metric, value from metrics where model = '{model}' and slice = 'all'")
    return dict(zip(df["metric"], df["value"]))


def test_judging_version_follows_judges_and_metric_settings(write_config):
    def judging_version(cfg):  # the split's metric settings (a partition of `metric_settings`)
        return split_judging_version(cfg, "smoke/extra")

    write_config(CONFIG.replace("JUDGE", "strict"))
    base = judging_version(load_config())
    write_config(CONFIG.replace("JUDGE", "lenient"))
    assert judging_version(load_config()) != base  # another judge for the split
    write_config(CONFIG.replace("JUDGE", "strict").replace("model: strict", "model: strict-v2"))
    assert judging_version(load_config()) != base  # the judge's model changed
    write_config(CONFIG.replace("JUDGE", "strict").replace("[{name: llm_judge", "[{name: llm_judge, prompt: 'x {input}'"))
    assert judging_version(load_config()) != base  # the prompt changed
    write_config(CONFIG.replace("JUDGE", "strict").replace("m2: {runner: counting}", "m3: {runner: counting}"))
    assert judging_version(load_config()) == base  # models are not judges


@pytest.mark.slow
def test_rejudging_makes_no_model_calls_and_dagster_shows_it_stale(instance, home, write_config):
    from dagster import partition_loading_context
    from dagster._core.definitions.data_version import StaleStatus
    from dagster._utils.test.data_versions import get_stale_status_resolver

    from eval_assets.assets import eval_assets

    from evalpipe.project import Project
    from eval_assets.launch import CHAIN, evaluate, run_assets
    from resources import JudgeResource, project_resources

    MODEL_CALLS.clear(), JUDGE_CALLS.clear()
    write_config(CONFIG.replace("JUDGE", "strict"))
    result = evaluate(load_config(), ["smoke/extra"], ["m1", "m2"], instance=instance)
    assert result.success, result
    assert len(MODEL_CALLS) == 8  # 4 samples x 2 models
    assert len(JUDGE_CALLS) == 4  # both models gave the same answers: each (judge, sample, prediction) judged once
    assert values(home, "m1")["llm_judge"] == 0.5 and values(home, "m1")["exact_match"] == 0.5

    # another judge for one run (the launchpad's resource override): judgements + metrics only
    lenient = {"judge": JudgeResource(judges=["lenient"])}
    assert run_assets(["judgements", "metrics"], eval_key("smoke/extra", "m1"), instance, lenient).success
    assert len(MODEL_CALLS) == 8 and len(JUDGE_CALLS) == 8  # the model under test was not called again
    assert values(home, "m1")["llm_judge"] == 1.0 and values(home, "m1")["exact_match"] == 0.5
    j = Warehouse(home / "warehouse.duckdb").query(
        "select details from judgements where model = 'm1' and metric = 'llm_judge' and sample_id = 's2'")
    assert json.loads(j["details"][0])["judges"]["lenient"]["rationale"] == "fine"
    # the whole chain for the other model: rollouts come from the journal, verdicts from the judge cache
    assert run_assets(CHAIN, eval_key("smoke/extra", "m2"), instance, lenient).success
    assert len(MODEL_CALLS) == 8 and len(JUDGE_CALLS) == 8
    assert values(home, "m2")["llm_judge"] == 1.0

    # staleness: the judge changes in the config file and the code location reloads (simulated here by building
    # the graph again and observing the split's metric settings, as `evalpipe run` and `stale_status()` do)
    key = eval_key("smoke/extra", "m1")

    def graph():  # the code location as it loads the config file now, its metric settings observed
        from eval_assets.assets import record_metric_settings

        project = Project.from_file()
        record_metric_settings(project, instance)
        return eval_assets(project)

    def status(assets, asset):
        with partition_loading_context(dynamic_partitions_store=instance):
            return get_stale_status_resolver(instance, assets).get_status(AssetKey(asset), key)

    assert status(graph(), "judgements") == StaleStatus.FRESH
    write_config(CONFIG.replace("JUDGE", "strict").replace("[{name: llm_judge", "[{name: llm_judge, system: Be fair."))
    changed = graph()
    assert status(changed, "judgements") == StaleStatus.STALE
    # re-judging makes it fresh again (no model call), and metrics stale: its input verdicts changed (m1 was
    # last judged by `lenient`); the data version is the verdicts' content, so equal verdicts would keep it fresh
    r = materialize(changed, selection=["judgements"], partition_key=key, instance=instance, resources=project_resources(Project.from_file()))
    assert r.success and len(MODEL_CALLS) == 8
    assert status(changed, "judgements") == StaleStatus.FRESH
    assert status(changed, "metrics") == StaleStatus.STALE
