"""`validate-sharding` on the tool-integration set (issue 22, the harness document's per-example equivalence):
2 shards of the replayed shipped set equal one pass, tool choice, normalized arguments and integration spans
included; a planted difference in each turns `per_example_mismatches` non-empty with the field named."""
import copy
import json
from pathlib import Path

import pytest

from evalpipe.repro.validate_sharding import collect, compare, tool_view

REPO = Path(__file__).resolve().parents[1]
SPLIT = "tool_integration/shipped"


def test_tool_view_normalizes_like_the_broker():
    a = [{"call_index": 1, "name": "web.search", "arguments": '{"q": "  ROPE  Precision "}'},
         {"call_index": 0, "name": "weather.current", "arguments": {"city": "Oslo", "unit": None}}]
    b = [{"call_index": 0, "name": "weather.current", "arguments": {"city": "Oslo"}},
         {"call_index": 1, "name": "web.search", "arguments": {"top_k": 3, "q": "rope precision"}}]
    assert tool_view(json.dumps(a)) == tool_view(b)
    assert tool_view(b)[0] == ["weather.current", "web.search"]
    assert tool_view([{"name": "x", "arguments": "{not json"}]) == (["x"], [None])


@pytest.mark.slow
def test_tool_integration_shards_equal_one_pass_and_planted_tool_differences(tmp_path, write_config, home):
    write_config(f"""
benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {{path: {REPO}/data/tool_integration/items.jsonl}}
    options:
      tools: {{fixtures: {REPO}/data/tool_integration/fixtures, allowlist: {REPO}/data/tool_integration/allowlist.txt}}
    metrics: [tool_integration]
models:
  clean: {{runner: replay, path: {REPO}/data/tool_integration/predictions_clean_controls.jsonl}}
""")
    baseline, shards = collect(SPLIT, "clean", 2, tmp_path / "w")
    report = compare(baseline, shards, 2)
    assert report["ok"], report
    assert report["per_example_mismatches"] == [] and sum(report["shard_sizes"]) == 60

    def plant(attr, sid, column, edit):
        planted = copy.deepcopy(shards)
        for s in planted:
            df = getattr(s, attr)
            rows = df["sample_id"] == sid
            if rows.any():
                df.loc[rows, column] = df.loc[rows, column].map(edit)
        r = compare(baseline, planted, 2)
        assert r["ok"] is False and r["metrics_match"] is False
        return [m for m in r["per_example_mismatches"] if m["sample_id"] == sid]

    def trace_edit(fn):
        return lambda t: json.dumps(fn(json.loads(t)))

    # another tool chosen
    m = plant("rollouts", "int-weather-01", "tool_trace",
              trace_edit(lambda tr: [{**c, "name": "web.search"} for c in tr]))
    assert [x["field"] for x in m] == ["tool_choice"]
    # other arguments (after normalization): a re-cased city is another key; re-spacing a query is not
    m = plant("rollouts", "int-weather-01", "tool_trace",
              trace_edit(lambda tr: [{**c, "arguments": json.dumps({"city": "Lyon"})} for c in tr]))
    assert [x["field"] for x in m] == ["tool_arguments"]
    # other integration spans in the verdict's details
    m = plant("judgements", "int-weather-01", "details",
              lambda d: json.dumps({**json.loads(d), "spans": {**json.loads(d)["spans"], "strict_values": ["x"]}}))
    assert [x["field"] for x in m] == ["integration_spans"]
