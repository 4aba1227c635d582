"""Document 001 (the stateful pipeline, ../shared/design_refs/001_*): what docs/design_refs.md says works, through
evalpipe's names for it: an experiment id that resumes where it left off, each sample's `stage` to query
(`sample_stages`), processers chosen per sample by `source` (`metrics_by_source`), a per-benchmark
`calculate_metrics`, the four stages. Data: a mixed-source file of four rows written here."""
import json

from tests.helpers.cli import cli_in_process

ROWS = [
    {"id": "g1", "question": "How many legs has a spider?", "answer": "8", "source": "gaia"},
    {"id": "g2", "question": "Name the bird.", "answer": "seagull", "source": "gaia"},
    {"id": "d1", "question": "Mean of 1 and 3?", "answer": "2", "source": "dabench"},
    {"id": "x1", "question": "Capital of France?", "answer": "Paris", "source": "other"},
]


def test_experiment_stages_routing_and_resume(home, write_config, tmp_path, monkeypatch):
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    write_config(f"""benchmarks:
  mixed:
    adapter: file
    splits: {{test: {{path: {data}}}}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
      metrics_by_source: {{gaia: [gaia], dabench: [{{name: exact_match, numeric_tolerance: 0.03}}], "*": [includes]}}
models:
  agent: {{runner: echo, reply: target}}
default_models: [agent]
""")
    cli = cli_in_process(monkeypatch)
    # an experiment id: its own partition, resumed when run again
    r = cli("run", "--model", "agent", "--experiment", "exp1", "--no-progress")
    assert r.exit_code == 0, r.output
    q = cli("sql", "--json", "select stage, count(*) as n from sample_stages group by stage")
    assert json.loads(q.output) == [{"stage": "judged", "n": 4}]
    # PROCESSER_FACTORY by source: each sample judged by its source's metric only
    q = cli("sql", "--json", "select sample_id, metric, score from judgements order by sample_id")
    assert [(x["sample_id"], x["metric"], x["score"]) for x in json.loads(q.output)] == [
        ("d1", "exact_match", 1.0), ("g1", "gaia", 1.0), ("g2", "gaia", 1.0), ("x1", "includes", 1.0)]
    q = cli("sql", "--json", "select count(*) as n from rollouts")
    assert json.loads(q.output) == [{"n": 4}]
    r = cli("run", "--model", "agent", "--experiment", "exp1", "--no-progress")
    assert r.exit_code == 0, r.output
    q = cli("sql", "--json", "select model, count(*) as n from rollouts group by model")
    assert json.loads(q.output) == [{"model": "agent@exp1", "n": 4}]  # resumed: nothing rolled out twice
