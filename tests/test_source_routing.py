"""Metric routing per sample by its `source` (design_refs 001's PROCESSER_FACTORY): `metrics_by_source`, checked
with the config and before any model call; and the per-benchmark `calculate_metrics` hook."""
import json
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.benchmarks import Adapter, register_adapter
from evalpipe.benchmarks.file import FileAdapter
from evalpipe.core.config import SplitConfig, warehouse_path
from evalpipe.core.errors import RunFailed
from evalpipe.pipeline.stages import compute_metrics, judge
from evalpipe.store.warehouse import Warehouse
from tests.helpers.cli import cli_in_process

ROWS = [
    {"id": "g1", "question": "How many legs has a spider?", "answer": "8", "source": "gaia"},
    {"id": "g2", "question": "Name the bird.", "answer": "seagull", "source": "gaia"},
    {"id": "d1", "question": "Mean of 1 and 3?", "answer": "2", "source": "dabench"},
    {"id": "x1", "question": "Capital of France?", "answer": "Paris", "source": "other"},
]
ROUTES = '{gaia: [gaia], dabench: [{name: exact_match, numeric_tolerance: 0.03}], "*": [includes]}'


def macro_by_metric(judgements: pd.DataFrame) -> list[dict]:
    """A split's own summary row: the unweighted mean of its metrics' accuracies (each source's metric counts once)."""
    means = judgements.groupby("metric", observed=True)["score"].mean()
    return [{"metric": "routed_macro", "value": float(means.mean())}]


def config(tmp_path: Path, rows=ROWS, routes=ROUTES, extra="") -> str:
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f"""
benchmarks:
  mixed:
    adapter: file
    splits: {{test: {{path: {data}}}}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
      metrics_by_source: {routes}
{extra}
models:
  perfect: {{runner: echo, reply: target}}
  fixed: {{runner: echo, reply: fixed, text: "8"}}
"""


def test_each_sample_is_judged_by_its_sources_metrics(home, write_config, tmp_path, monkeypatch):
    write_config(config(tmp_path, extra="      calculate_metrics: tests.test_source_routing:macro_by_metric"))
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--model", "perfect", "--model", "fixed", "--no-progress")
    assert r.exit_code == 0, r.output
    wh = Warehouse(warehouse_path())
    judged = wh.query("select model, sample_id, metric, score from judgements order by model, sample_id, metric")
    perfect = judged[judged["model"] == "perfect"]
    assert list(zip(perfect["sample_id"], perfect["metric"])) == [
        ("d1", "exact_match"), ("g1", "gaia"), ("g2", "gaia"), ("x1", "includes")]  # one metric each: no other rows
    fixed = judged[judged["model"] == "fixed"].set_index("sample_id")["score"].to_dict()
    assert fixed == {"d1": 0.0, "g1": 1.0, "g2": 0.0, "x1": 0.0}
    m = wh.query("select model, metric, value, n from metrics where slice = 'all' order by model, metric")
    got = {(x.model, x.metric): (x.value, x.n) for x in m.itertuples()}
    assert got[("fixed", "gaia")] == (0.5, 2) and got[("fixed", "exact_match")] == (0.0, 1)  # n: its source only
    assert got[("fixed", "includes")] == (0.0, 1)
    assert got[("fixed", "routed_macro")] == (pytest.approx(0.5 / 3), 4)  # the hook's row, n = the samples
    assert got[("perfect", "routed_macro")] == (1.0, 4)
    board = wh.query("select model, rank from leaderboard where metric = 'routed_macro' order by rank")
    assert board["model"].tolist() == ["perfect", "fixed"]  # ranked like any row: higher is better by default


def test_a_source_no_route_names_fails_before_any_model_call(home, write_config, tmp_path, monkeypatch):
    write_config(config(tmp_path, routes="{gaia: [gaia], dabench: [exact_match]}"))
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--model", "perfect", "--no-progress")
    assert r.exit_code != 0
    assert ("mixed/test: sample x1 has source 'other', which metrics_by_source does not name (it names gaia, "
            "dabench); add it, or a \"*\" entry for every other source") in r.output
    assert Warehouse(warehouse_path()).query("select count(*) as n from rollouts")["n"].tolist() == [0]


@pytest.mark.parametrize("routes,words", [
    ("{gaia: [gaia], dabench: [exact_mach]}",
     "options.metrics_by_source.dabench.0: unknown metric 'exact_mach'; did you mean 'exact_match'?"),
    ("{}", "metrics_by_source is empty"),
    ("{gaia: gaia}", "metrics_by_source.gaia"),
    ("{gaia: [gaia, includes]}\n    metrics: [includes]",
     "options.metrics_by_source.gaia.1: metric 'includes' is also under `metrics:`, which judges every sample"),
])
def test_routes_are_checked_with_the_config(write_config, tmp_path, monkeypatch, routes, words):
    write_config(config(tmp_path, routes=routes))
    r = cli_in_process(monkeypatch)("validate")
    assert r.exit_code == 2 and words in r.output, r.output
    assert len([x for x in r.output.splitlines() if x.strip()]) == 1, r.output


def _split(**options) -> SplitConfig:
    return SplitConfig(key="mixed/test", benchmark="mixed", split="test", adapter="file",
                       options={"columns": {"prompt": "question", "target": "answer", "id": "id"}, **options},
                       metrics=["includes"], prompt_template=None, base_dir=Path("."))


def test_shared_metrics_judge_every_sample_and_routes_pick_by_route_by():
    split = _split(metrics_by_source={"a": ["exact_match"]}, route_by="origin")
    prompts = pd.DataFrame({"sample_id": ["1", "2"], "model": "m", "prompt_text": "q", "target": ["x", "y"],
                            "metadata": [json.dumps({"origin": "a"}), json.dumps({"origin": "a", "source": "b"})],
                            "slices": None})
    rollouts = pd.DataFrame({"sample_id": ["1", "2"], "status": "ok", "error": None, "prediction": ["x", "n"],
                             "raw_output": None})
    from evalpipe.benchmarks import adapter_for

    assert adapter_for(split).metrics() == ["includes", "exact_match"]  # no adapter defaults besides
    j = judge(split, prompts, rollouts)
    assert list(zip(j["sample_id"], j["metric"], j["score"])) == [
        ("1", "includes", 1.0), ("1", "exact_match", 1.0), ("2", "includes", 0.0), ("2", "exact_match", 0.0)]


def test_an_adapters_own_calculate_metrics_and_its_bad_rows():
    @register_adapter("routing_test_adapter", replace=True)
    class WithSummary(FileAdapter):
        def calculate_metrics(self, judgements):
            return [{"metric": "pairs", "value": float((judgements["score"] == 1.0).sum() // 2), "kind": "count",
                     "higher_is_better": None}]

    split = SplitConfig(key="s/t", benchmark="s", split="t", adapter="routing_test_adapter", options={},
                        metrics=None, prompt_template=None, base_dir=Path("."))
    j = pd.DataFrame({"sample_id": ["1", "2", "3"], "metric": "exact_match", "status": "scored",
                      "score": [1.0, 1.0, 1.0], "target": "x", "slices": None, "details": None})
    rows = compute_metrics("s/t", "m", j, split=split).set_index("metric")
    assert rows.loc["pairs", "value"] == 1.0 and rows.loc["pairs", "n"] == 3 and rows.loc["pairs", "kind"] == "count"
    assert pd.isna(rows.loc["pairs", "higher_is_better"]) and rows.loc["exact_match", "value"] == 1.0
    assert Adapter.calculate_metrics(Adapter(split), j) == []  # none by default

    WithSummary.calculate_metrics = lambda self, judgements: [{"metric": "bad", "value": "high"}]
    with pytest.raises(RunFailed, match="s/t: calculate_metrics row 0 must be a dict with a string 'metric' and a "
                                        "numeric 'value'"):
        compute_metrics("s/t", "m", j, split=split)
