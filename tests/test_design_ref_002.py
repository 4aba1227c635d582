"""Document 002 (DSGym's evaluation README, ../shared/design_refs/002_*): its Python calls as the document writes
them, each one that docs/design_refs.md says works. Only names of data that must be local are adapted (a `path=`
to the shipped DAEval sample; the document's `agent` is a function here, or a Runner where evalpipe runs the loop)."""
import json
import threading
import time
from pathlib import Path

import pytest

from evalpipe import ConfigError, DatasetRegistry, Evaluator
from evalpipe.core.types import Generation
from evalpipe.tools.base import ChatTurn, ToolCall
from evalpipe.runners.base import Runner

REPO = Path(__file__).parents[1]
DAEVAL = str(REPO / "data" / "daeval_sample")
ROWS = [{"id": f"r{i}", "input": f"{i} + 1", "target": str(i + 1)} for i in range(4)]


class EvaluationConfig(dict):  # DSGym's EvaluationConfig: the fields Evaluator.evaluate reads
    def __init__(self, **fields):
        super().__init__(fields)


def offered_tools(task) -> str:
    """The agent of the examples: says which tools the sample offered (the protocol decides)."""
    return ",".join(t["function"]["name"] if "function" in t else t.get("name", "?") for t in (task.tools or []))


def adds(task) -> str:
    a, _, _ = task.question.partition(" + ")
    return str(int(a) + 1)


def test_example_2_daeval_multi_turn_with_the_result_dict_and_files(home, tmp_path):
    # Example 2, as written: DatasetRegistry.load("daeval") (here with the shipped copy), its samples, the evaluator
    # with protocol="multi_turn" and the dataset's own metric (list_match), save_results=True
    dataset = DatasetRegistry.load("daeval", path=DAEVAL)
    samples = dataset.load(split="validation", limit=3)
    evaluator = Evaluator(protocol="multi_turn", dataset=dataset)
    config = EvaluationConfig(model_name="gpt-4o", dataset_name="daeval", output_dir=str(tmp_path / "results"))
    agent = offered_tools
    results = evaluator.evaluate(agent, samples, config=config, save_results=True)
    assert results.success, results.errors
    # the document's result dict
    assert results["aggregated_metrics"]["list_match"]["total_samples"] == 3
    assert results["aggregated_metrics"]["list_match"]["mean_score"] == 0.0
    assert [r["prediction"] for r in results["sample_results"]] == ["python"] * 3  # multi_turn: the python tool
    assert results["metadata"]["model_name"] == "gpt-4o" and "aggregated_metrics" in results
    saved = json.loads((tmp_path / "results" / "evaluation_results.json").read_text())
    assert saved["aggregated_metrics"] == results["aggregated_metrics"]
    # the dataset's metrics and their settings (DSGym's get_metrics / get_metric_configs)
    assert dataset.get_metrics() == ["list_match"] and dataset.get_metric_configs() == {"list_match": {}}


def test_single_turn_offers_no_tools(home):
    dataset = DatasetRegistry.load("daeval", path=DAEVAL)
    samples = dataset.load(split="validation", limit=2)
    evaluator = Evaluator(protocol="single_turn")
    results = evaluator.evaluate(offered_tools, samples)
    assert results.success and [r["prediction"] for r in results["sample_results"]] == ["", ""]


class AlwaysPython(Runner):
    """A model that calls the python tool on every turn: only max_turns ends its conversation."""

    async def chat(self, messages, tools, request):
        return ChatTurn(content=None, tool_calls=[ToolCall("python", {"code": "1 + 1"}, f"c{len(messages)}")],
                        finish_reason="tool_calls", input_tokens=0, output_tokens=0, cost=0.0)

    async def generate(self, request):
        return Generation(text="", finish_reason="stop", input_tokens=0, output_tokens=0, cost=0.0)


def test_multi_turn_max_turns_bounds_the_loop(home):
    evaluator = Evaluator(protocol="multi_turn", max_turns=15)
    samples = DatasetRegistry.load("daeval", path=DAEVAL).load(split="validation", limit=1)
    results = evaluator.evaluate(AlwaysPython, samples)
    assert results.success, results.errors
    wh = results.result.warehouse
    row = wh.query("select turns, stop_reason, tool_calls from rollouts").to_dict("records")[0]
    assert (row["turns"], row["stop_reason"]) == (15, "max_turns")
    # a function agent runs its own loop: max_turns can't bound it, and says so before anything runs
    with pytest.raises(ConfigError, match="max_turns bounds the loop evalpipe runs for a model agent"):
        evaluator.evaluate(offered_tools, samples)


def test_metric_configs_are_applied_or_refused(home):
    # the document's "Manual Metric Selection" names a setting llm_score does not have (`model`): refused in one
    # line when the evaluator is built, before any model call
    with pytest.raises(ConfigError, match=r"metric_configs\['llm_score'\]: 'model' is not a setting of llm_score"):
        Evaluator(
            protocol="multi_turn",
            metrics=["exact_match", "llm_score", "semantic_similarity"],
            metric_configs={
                "exact_match": {"numeric_tolerance": 0.05},
                "llm_score": {"model": "gpt-4o-mini"},
                "hms_score": {"model": "gpt-4o"}
            }
        )
    # what can be honoured is: exact_match's DSGym tolerance changes the verdicts (an unused entry changes nothing)
    def close(task) -> str:
        return str(int(task.question.partition(" + ")[0]) + 1.04)

    strict = Evaluator(metrics=["exact_match"], name="tol").evaluate(close, ROWS)
    tolerant = Evaluator(metrics=["exact_match"], metric_configs={"exact_match": {"numeric_tolerance": 0.05},
                                                                   "hms_score": {}},
                         name="tol", model_name="close_tol").evaluate(close, ROWS)
    assert strict["aggregated_metrics"]["exact_match"]["mean_score"] == 0.0
    assert tolerant["aggregated_metrics"]["exact_match"]["mean_score"] == 1.0  # off by 0.04: at most 4% of 1..4


def test_parallel_workers_is_the_concurrency(home):
    running, peak, lock = [0], [0], threading.Lock()

    def slow(task) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.3)
        with lock:
            running[0] -= 1
        return adds(task)

    evaluator = Evaluator(
        parallel_workers=24  # For API-based models (litellm)
        # parallel_workers=1   # For local models (vllm/sglang)
    )
    results = evaluator.evaluate(slow, ROWS)
    assert results.success and peak[0] == 4
    results = Evaluator(parallel_workers=1, model_name="slow_1").evaluate(slow, ROWS)
    assert results.success and peak[0] == 4 and results["aggregated_metrics"]["exact_match"]["mean_score"] == 1.0


@pytest.mark.parametrize("kwargs,match", [
    ({"protocol": "multi"}, "protocol must be one of multi_turn, single_turn"),
    ({"max_turns": 0}, "max_turns must be a whole number >= 1"),
    ({"protocol": "single_turn", "max_turns": 3}, "single_turn.*max_turns does not apply"),
    ({"parallel_workers": "24"}, "parallel_workers must be a whole number"),
    ({"metric_configs": {"exact_mtch": {}}}, "unknown metric 'exact_mtch'"),
    ({"protocl": "multi_turn"}, "unknown option 'protocl'"),
])
def test_wrong_values_are_one_line_errors_before_anything_runs(home, kwargs, match):
    with pytest.raises(ConfigError, match=match):
        Evaluator(**kwargs)
    assert not (home / "warehouse.duckdb").exists()
