"""The Python API's parts, without running the graph: source fingerprints, the function runner and metric, the
records adapter and its column mapping, the decorators, and the one-line errors of each input kind."""
import asyncio
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import evalpipe
from evalpipe.api.python import build_raw_config, dataset_entry, metric_specs, model_entry
from evalpipe.core.callables import callable_fingerprint
from evalpipe.core.config import ModelConfig, SplitConfig
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.core.types import RolloutRequest, Score


def _define(src: str, name: str = "f", **globals_):
    ns = dict(globals_)
    exec(compile(textwrap.dedent(src), f"<{name}-{abs(hash(src))}>", "exec"), ns)
    return ns[name]


# ---- fingerprints -------------------------------------------------------------------------------------------------
def test_fingerprint_follows_the_body_and_the_constants_it_reads():
    def a(x):
        return x + 1

    def a_again(x):
        return x + 1

    assert callable_fingerprint(a) == callable_fingerprint(a)
    assert callable_fingerprint(a) != callable_fingerprint(a_again)  # another name: another identity

    def make(k):
        def inner(x):
            return x * k
        return inner

    assert callable_fingerprint(make(2)) == callable_fingerprint(make(2))
    assert callable_fingerprint(make(2)) != callable_fingerprint(make(3))  # a closure constant
    g1 = _define("def f(x):\n    return x * SCALE\n", SCALE=2)
    g2 = _define("def f(x):\n    return x * SCALE\n", SCALE=3)
    assert callable_fingerprint(g1) != callable_fingerprint(g2)  # a module constant it reads
    client = object()  # not a plain constant: left out, so the fingerprint is stable across processes
    h1 = _define("def f(x):\n    return CLIENT\n", CLIENT=client)
    h2 = _define("def f(x):\n    return CLIENT\n", CLIENT=object())
    assert callable_fingerprint(h1) == callable_fingerprint(h2)
    b1 = _define("def f(x):\n    return x + 1\n")
    b2 = _define("def f(x):\n    return x + 2\n")  # no source file: the code object stands in
    assert callable_fingerprint(b1) != callable_fingerprint(b2)


# ---- the function runner ------------------------------------------------------------------------------------------
def _request(question="What is 2+2?"):
    return RolloutRequest(sample_id="s1", messages=[{"role": "user", "content": question}], fingerprint="x",
                          metadata={"level": 1})


def _run(fn, **options):
    from evalpipe.runners import build_runner
    from evalpipe.runners.function import register_function

    model = ModelConfig(key="k", runner="function", model="f", options={"function": register_function(fn), **options})
    runner = build_runner(model)

    async def go():
        try:
            return await runner.generate(_request())
        finally:
            await runner.aclose()
    return runner, asyncio.run(go())


def test_function_runner_passes_the_sample_or_its_text_and_reads_text_or_dicts():
    seen = {}

    def whole(sample):
        seen["sample"] = sample
        return "4"

    runner, gen = _run(whole)
    assert gen.text == "4" and seen["sample"].question == "What is 2+2?" and seen["sample"].metadata == {"level": 1}
    assert runner.identity()["version"] == callable_fingerprint(whole)

    def text_only(question: str) -> dict:
        return {"text": question.upper(), "usage": {"input_tokens": 3, "output_tokens": 1, "cost": 0.5}}

    _, gen = _run(text_only)
    assert gen.text == "WHAT IS 2+2?" and gen.input_tokens == 3 and gen.cost == 0.5

    async def async_agent(question: str) -> str:
        await asyncio.sleep(0)
        return "async " + question

    _, gen = _run(async_agent)
    assert gen.text == "async What is 2+2?"


def test_function_runner_of_a_function_not_in_this_process_says_so():
    from evalpipe.runners import build_runner

    with pytest.raises(ConfigError, match="not defined in this process"):
        build_runner(ModelConfig(key="k", runner="function", options={"function": "0" * 16}))


# ---- the function metric ------------------------------------------------------------------------------------------
def _judge(spec, prediction="4", target="4"):
    from evalpipe.metrics.base import JudgeInput, build_metric

    metric = build_metric(spec)
    return metric, asyncio.run(metric.ascore_many([JudgeInput("s1", "2+2?", target, prediction)]))[0]


def test_function_metric_reads_bools_numbers_scores_and_errors():
    from evalpipe.metrics.function import register_function_metric

    def same(prediction, target):
        return prediction == target

    spec = register_function_metric(same)
    assert spec == {"name": "same", "source": callable_fingerprint(same)}
    metric, s = _judge(spec)
    assert (s.value, s.correct) == (1.0, True) and metric.identity()["settings"]["source"] == spec["source"]
    assert _judge(spec, prediction="5")[1].correct is False

    def closeness(prediction, target, sample):
        return 1 / (1 + abs(float(prediction) - float(target))) if sample.input else 0

    assert _judge(register_function_metric(closeness), prediction="5")[1].value == 0.5

    def broken(prediction):
        raise ValueError("boom")

    s = _judge(register_function_metric(broken))[1]
    assert s.status == "error" and s.reason == "ValueError: boom"

    async def graded(prediction, target):
        return Score(value=0.25, reason="partly")

    assert _judge(register_function_metric(graded))[1].value == 0.25

    def many(a, b, c, d):
        return True

    with pytest.raises(ConfigError, match=r"must take \(prediction, target, sample\)"):
        register_function_metric(many)


def test_function_metric_cannot_take_a_builtin_name():
    def exact_match(prediction, target):
        return True

    with pytest.raises(ConfigError, match="'exact_match' is taken by a built-in"):
        metric_specs([exact_match])


# ---- records and column mapping -----------------------------------------------------------------------------------
def _load(entry):
    from evalpipe.benchmarks import adapter_for

    split = SplitConfig(key="r/test", benchmark="r", split="test", adapter=entry["adapter"],
                        options=entry["options"], metrics=None, prompt_template=None, base_dir=Path("."))
    return list(adapter_for(split).load())


@pytest.mark.parametrize("prompt,target", [("input", "target"), ("question", "answer"), ("prompt", "expected")])
def test_records_map_the_usual_column_names(prompt, target):
    name, entry = dataset_entry([{prompt: "2+2?", target: 4, "id": "a", "level": 1}], {}, Path("."), None, None)
    assert name.startswith("records-") and entry["adapter"] == "records"
    [s] = _load(entry)
    assert (s.id, s.input, s.target, s.metadata) == ("a", "2+2?", "4", {"level": 1})


def test_records_from_a_dataframe_with_explicit_columns_and_no_ids():
    df = pd.DataFrame({"q": ["a?", "b?"], "gold": ["A", "B"], "answer": ["x", "y"]})
    _, entry = dataset_entry(df, {}, Path("."), {"prompt": "q", "target": "gold"}, "mine")
    samples = _load(entry)
    assert [(s.input, s.target) for s in samples] == [("a?", "A"), ("b?", "B")]
    assert len({s.id for s in samples}) == 2 and samples[0].metadata == {"answer": "x"}  # content-hash ids
    # the same records are the same dataset (same key); an edit is another
    assert dataset_entry(df, {}, Path("."), {"prompt": "q", "target": "gold"}, "mine")[1] == entry
    df2 = df.assign(gold=["A", "C"])
    assert dataset_entry(df2, {}, Path("."), {"prompt": "q", "target": "gold"}, "mine")[1] != entry


def test_records_and_files_errors_are_one_line_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"no target column \(looked for target, answer.*columns=\{'target'"):
        dataset_entry([{"input": "x", "gold": "y"}], {}, Path("."), None, None)
    with pytest.raises(ConfigError, match="no prompt column"):
        dataset_entry([{"text": "x", "target": "y"}], {}, Path("."), None, None)
    with pytest.raises(ConfigError, match="record 1 is a str"):
        dataset_entry([{"input": "x", "target": "y"}, "oops"], {}, Path("."), None, None)
    with pytest.raises(ConfigError, match="dataset is empty"):
        dataset_entry([], {}, Path("."), None, None)
    with pytest.raises(ConfigError, match=r"columns: target='gold' is not a column"):
        dataset_entry([{"input": "x", "target": "y"}], {}, Path("."), {"target": "gold"}, None)
    with pytest.raises(ConfigError, match="neither a benchmark of the config"):
        dataset_entry("gaia", {}, Path("."), None, None)
    with pytest.raises(ConfigError, match="not found"):
        dataset_entry(str(tmp_path / "missing.jsonl"), {}, Path("."), None, None)
    # no ground truth, asked for: unscored samples, not an error
    _, entry = dataset_entry([{"input": "x"}], {}, Path("."), {"target": None}, None)
    assert _load(entry)[0].target is None
    # a file maps the same names
    f = tmp_path / "qa.jsonl"
    f.write_text('{"question": "2+2?", "answer": "4"}\n')
    name, entry = dataset_entry(str(f), {}, Path("."), None, None)
    assert name == "qa" and entry["options"]["columns"]["prompt"] == "question"


def test_records_of_another_process_are_a_clear_error():
    with pytest.raises(DataError, match="not in this process"):
        _load({"adapter": "records", "options": {"records": "f" * 16}})


# ---- agents, metrics, the raw config --------------------------------------------------------------------------------
def test_agent_kinds_and_their_errors():
    from evalpipe.runners.echo import EchoRunner

    def solver(sample):
        return "x"

    key, entry = model_entry(solver, {}, None)
    assert key == "solver" and entry["runner"] == "function" and entry["options"]["function"] == callable_fingerprint(solver)
    assert model_entry(evalpipe.agent(name="named")(solver), {}, None)[0] == "named"
    assert model_entry("openai/gpt-4o-mini", {}, None)[1] == {"runner": "litellm", "model": "openai/gpt-4o-mini"}
    assert model_entry("m1", {"models": {"m1": {"runner": "echo"}}}, None) == ("m1", {"runner": "echo"})
    key, entry = model_entry(EchoRunner, {}, None)
    assert key == "echo" and entry["runner"].startswith("python:EchoRunner:")
    with pytest.raises(ConfigError, match=r"unknown model 'gpt4'.*litellm model string"):
        model_entry("gpt4", {}, None)
    with pytest.raises(ConfigError, match="a lambda has no name"):
        model_entry(lambda s: "x", {}, None)
    with pytest.raises(ConfigError, match="agent must be a function"):
        model_entry(42, {}, None)


def test_metric_kinds_and_an_unknown_name():
    from evalpipe.metrics.exact_match import ExactMatch

    @evalpipe.metric(name="shouty", higher_is_better=False)
    def loud(prediction, target):
        return prediction.isupper()

    specs = metric_specs(["exact_match", {"name": "exact_match", "case_sensitive": False}, loud, ExactMatch,
                          ExactMatch(case_sensitive=False)])
    assert specs[:2] == ["exact_match", {"name": "exact_match", "case_sensitive": False}]
    assert specs[2]["name"] == "shouty" and specs[3] == "exact_match"
    assert specs[4] == {"name": "exact_match", "case_sensitive": False}  # a built-in's instance: its entry, not a new one
    from evalpipe.metrics.base import Metric, get_metric

    assert get_metric("exact_match") is ExactMatch

    class Length(Metric):
        name = "length"

        def score(self, item):
            return Score(value=float(len(item.prediction or "")))

    assert metric_specs([Length(), Length]) == ["length", "length"]

    class Impostor(Metric):
        name = "exact_match"

    with pytest.raises(ConfigError, match="'exact_match' is taken by a built-in or plugin metric"):
        metric_specs([Impostor])
    from evalpipe.metrics.base import direction_of

    assert direction_of("shouty").higher_is_better is False
    with pytest.raises(ConfigError, match="unknown metric 'exact_mtch'"):
        metric_specs(["exact_mtch"])
    with pytest.raises(ConfigError, match="metrics=\\[\\] evaluates nothing"):
        metric_specs([])
    with pytest.raises(ConfigError, match="must be a name, a function or a Metric"):
        metric_specs([3])


def test_raw_config_has_one_benchmark_and_one_model_and_keeps_the_judges(tmp_path):
    cfg = tmp_path / "evals.yaml"
    cfg.write_text("benchmarks:\n  b: {adapter: file, splits: {test: {path: x.jsonl}}}\n"
                   "models:\n  m: {runner: echo}\njudges:\n  j: {runner: echo}\n")

    def solver(sample):
        return "x"

    raw, base, bench, key = build_raw_config(solver, [{"input": "a", "target": "b"}], None, config=cfg,
                                             slice_by=["level"], params={"temperature": 0})
    assert base == tmp_path and list(raw["benchmarks"]) == [bench] and list(raw["models"]) == [key] == ["solver"]
    assert raw["judges"] == {"j": {"runner": "echo"}} and raw["models"]["solver"]["params"] == {"temperature": 0}
    assert raw["benchmarks"][bench]["options"]["slice_by"] == ["level"]


def test_decorators_keep_the_function_callable():
    @evalpipe.agent
    def a(sample):
        return "x"

    @evalpipe.tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    assert a(None) == "x" and a.name == "a" and add(1, 2) == 3
    assert add.schema["function"]["parameters"]["required"] == ["a", "b"]
    with pytest.raises(ConfigError, match="has no docstring"):
        evalpipe.tool(lambda x: x)


def test_positional_arguments_keep_the_configured_form_for_names():
    from evalpipe.api import _forms

    def solver(sample):
        return "x"

    data = [{"input": "a", "target": "b"}]
    assert _forms(("smoke", "echo"), None, None, None, None, None) == (None, None, None, "smoke", "echo")
    assert _forms((["smoke"],), None, None, None, None, ["echo"]) == (None, None, None, ["smoke"], ["echo"])
    assert _forms((solver, data, ["exact_match"]), None, None, None, None, None)[:3] == (solver, data, ["exact_match"])
    assert _forms(("openai/gpt-4o-mini",), None, data, None, None, None)[:2] == ("openai/gpt-4o-mini", data)
    with pytest.raises(TypeError, match="both by position and by keyword"):
        _forms((solver,), solver, None, None, None, None)
