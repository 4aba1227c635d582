"""DSGym's output layout (`evalpipe run --output-dir`, `Evaluator.evaluate(save_results=True)`) and
`DatasetRegistry.load(name)` without a config file."""
import json

import pytest

import evalpipe
from evalpipe.core.errors import ConfigError
from tests.helpers.cli import cli_in_process
from tests.helpers.configs import SMOKE_JSONL, smoke_benchmark

SMOKE = {"path": str(SMOKE_JSONL), "columns": {"prompt": "question", "target": "answer"}}


def first_word_agent(sample):
    """Right on the one-word questions (answers from the data), wrong on the others."""
    answers = {"What is the capital of France? Answer with one word.": "Paris"}
    return answers.get(sample.question, "dunno")


def _read(folder):
    results = json.loads((folder / "evaluation_results.json").read_text())
    summary = json.loads((folder / "metrics_summary.json").read_text())
    return results, summary, sorted((folder / "sample_predictions").iterdir())


def test_dataset_registry_loads_an_adapter_without_a_config_and_evaluator_runs_it(home, tmp_path):
    dataset = evalpipe.DatasetRegistry.load("file", **SMOKE)
    samples = dataset.load(split="test", limit=3)
    assert [s["id"] for s in samples] == ["s1", "s2", "s3"] and samples[0]["target"] == "Paris"
    assert samples[0]["metadata"] == {"category": "geography"} and dataset.get_metrics() == ["exact_match"]
    assert "file" in evalpipe.DatasetRegistry.list_datasets()
    with pytest.raises(ConfigError, match="unknown benchmark adapter 'nope'"):
        evalpipe.DatasetRegistry.load("nope")

    out = tmp_path / "results"
    res = evalpipe.Evaluator(dataset=dataset).evaluate(first_word_agent, samples,
                                                       config={"output_dir": str(out)}, save_results=True)
    assert res.success, res.errors
    # run as the benchmark itself (its default metric), on the first 3 samples: a try (issue 30), never the real key
    assert res.partitions == [("file/test", "first_word_agent@limit3")]
    assert res.score("exact_match") == pytest.approx(1 / 3)

    results, summary, predictions = _read(out)
    assert results["metadata"]["dataset_name"] == "file/test"
    assert results["metadata"]["model_name"] == "first_word_agent"
    agg = results["aggregated_metrics"]["exact_match"]
    assert agg["mean_score"] == pytest.approx(1 / 3) and agg["total_samples"] == 3
    assert summary["aggregated_metrics"] == results["aggregated_metrics"] and "sample_results" not in summary
    first = results["sample_results"][0]
    assert first["sample_id"] == "s1" and first["query"] == "What is the capital of France? Answer with one word."
    assert first["prediction"] == "Paris" and first["ground_truth"] == "Paris" and first["success"] is True
    assert first["metric_results"] == {"exact_match": 1.0}
    assert results["sample_results"][1]["metric_results"] == {"exact_match": 0.0}
    assert len(predictions) == 3 and json.loads(predictions[0].read_text()) == first
    assert (out / "samples.jsonl").exists() and (out / "metrics.json").exists()  # as before


def test_run_output_dir_writes_dsgyms_layout(home, write_config, monkeypatch, tmp_path):
    write_config(smoke_benchmark(limit=2, metrics="[exact_match, {name: dabstep, rule: official}]")
                 + "models:\n  echo: {runner: echo, options: {reply: target}}\n")
    out = tmp_path / "dsgym_out"
    result = cli_in_process(monkeypatch)("run", "--no-progress", "--output-dir", str(out))
    assert result.exit_code == 0, result.output
    assert f"DSGym results: {out}" in result.output
    results, summary, predictions = _read(out)
    assert [r["sample_id"] for r in results["sample_results"]] == ["s1", "s2"]
    assert results["sample_results"][1]["metric_results"] == {"dabstep": 1.0, "exact_match": 1.0}
    assert summary["aggregated_metrics"]["dabstep"]["mean_score"] == 1.0 and len(predictions) == 2
