"""Python API options of the in-memory dataset form (issue 23 follow-ups): `output_path=` writes the run's portable
results file as it does for configured benchmarks; `metrics_by_source=` / `route_by=` route metrics per sample by
its source and `calculate_metrics=` adds a split's own summary rows (split options, docs/metrics.md)."""
import json

import pandas as pd
import pytest

import evalpipe
from evalpipe.core.errors import ConfigError

ROWS = [
    {"id": "g1", "question": "How many legs has a spider?", "answer": "8", "source": "gaia", "origin": "a"},
    {"id": "g2", "question": "Name the bird.", "answer": "seagull", "source": "gaia", "origin": "a"},
    {"id": "d1", "question": "Mean of 1 and 3?", "answer": "2", "source": "dabench", "origin": "b"},
    {"id": "x1", "question": "Capital of France?", "answer": "Paris", "source": "other", "origin": "b"},
]
ANSWERS = {"How many legs has a spider?": "8", "Name the bird.": "a gull", "Mean of 1 and 3?": "It is 2",
           "Capital of France?": "It is Paris"}


def answer(question: str) -> str:
    return ANSWERS[question]


def macro_by_metric(judgements: pd.DataFrame) -> list[dict]:
    """The unweighted mean of the metrics' accuracies (each source's metric counts once)."""
    means = judgements.groupby("metric", observed=True)["score"].mean()
    return [{"metric": "routed_macro", "value": float(means.mean())}]


def test_output_path_writes_the_results_file_for_an_in_memory_dataset(home, tmp_path):
    out = tmp_path / "res" / "run.json"
    res = evalpipe.evaluate(agent=answer, dataset=ROWS, metrics=["exact_match"], name="mixed", output_path=str(out),
                            run_id="r7")
    assert res.success, res.errors
    doc = json.loads(out.read_text())
    assert doc["format"] == "evalpipe.results" and doc["run"]["command"] == "evalpipe.evaluate()"
    assert doc["run"]["run_id"] == "r7" and doc["run"]["success"] is True
    (part,) = doc["partitions"]
    assert (part["benchmark_split"], part["model"]) == ("mixed/test", "answer")
    em = part["metrics"]["exact_match"]
    assert em["value"] == pytest.approx(0.25) == res.score("exact_match") and em["n"] == 4
    lines = [json.loads(x) for x in open(part["samples"]["samples_jsonl"])]
    assert [x["sample_id"] for x in lines] == ["g1", "g2", "d1", "x1"]
    assert "mixed/test" in doc["config"]["benchmark_splits"]


def test_metrics_by_source_routes_each_sample_and_calculate_metrics_adds_rows(home):
    res = evalpipe.evaluate(agent=answer, dataset=ROWS, name="mixed",
                            metrics_by_source={"gaia": ["exact_match"], "*": ["includes"]},
                            calculate_metrics=macro_by_metric)
    assert res.success, res.errors
    rows = res.metrics[res.metrics["slice"] == "all"].set_index("metric")
    # n counts only the routed samples: exact_match the two gaia ones (8 right, "a gull" wrong), includes the rest
    assert rows.loc["exact_match", "n"] == 2 and rows.loc["exact_match", "value"] == 0.5
    assert rows.loc["includes", "n"] == 2 and rows.loc["includes", "value"] == 1.0
    verdicts = res.samples.set_index("sample_id")
    assert pd.isna(verdicts.loc["x1", "exact_match_score"]) and pd.isna(verdicts.loc["g1", "includes_score"])
    assert rows.loc["routed_macro", "value"] == pytest.approx((0.5 + 1.0) / 2)


def test_route_by_names_another_field_and_routes_take_functions(home):
    @evalpipe.metric
    def says_paris(prediction, target):
        return "Paris" in (prediction or "")

    res = evalpipe.evaluate(agent=answer, dataset=ROWS, name="mixed2", route_by="origin",
                            metrics_by_source={"a": ["exact_match"], "b": [says_paris]})
    assert res.success, res.errors
    rows = res.metrics[res.metrics["slice"] == "all"].set_index("metric")
    assert rows.loc["exact_match", "n"] == 2 and rows.loc["exact_match", "value"] == 0.5
    assert rows.loc["says_paris", "n"] == 2 and rows.loc["says_paris", "value"] == 0.5


def test_the_options_say_how_to_fix_a_wrong_value(home):
    with pytest.raises(ConfigError, match=r"metrics_by_source= takes a non-empty dict \{source: \[metric, ...\]\}"):
        evalpipe.evaluate(agent=answer, dataset=ROWS, metrics_by_source=["exact_match"])
    with pytest.raises(ConfigError, match="unknown metric 'exact_mach'"):
        evalpipe.evaluate(agent=answer, dataset=ROWS, metrics_by_source={"gaia": ["exact_mach"]})
    with pytest.raises(ConfigError, match="calculate_metrics= takes a function defined at the top level of a module"):
        evalpipe.evaluate(agent=answer, dataset=ROWS, calculate_metrics=lambda j: [])
