"""Direction (issue 20 item 4): every metric declares, per aggregate name, whether higher is better and whether the
value is a score or a count; the leaderboard, `evalpipe leaderboard`, `evalpipe compare` and the viewer rank and
colour by it, counts read as counts, and ties share a rank (competition ranking 1, 1, 3) and read as ties."""
import json

import pandas as pd
import pytest

import partitions  # noqa: F401  (partition keys come from the test config, read now, before a test points EVALS_CONFIG elsewhere)

from evalpipe.metrics.base import Direction, Metric, direction_of, register_metric
from evalpipe.metrics.tool_integration import ToolIntegration, settings_of
from evalpipe.pipeline.stages import build_leaderboard, compute_metrics
from evalpipe.tooleval import integration as ti
from tests.helpers.cli import invoke

SPLIT = "tool_integration/shipped"
MADRID = {"ok": True, "city": "Madrid", "temp_c": 27, "conditions": "sunny"}


def _rec(args, result):
    return {"turn": 0, "call_index": 0, "name": "weather.current", "arguments": json.dumps(args),
            "arguments_valid": True, "result": json.dumps(result), "error": None}


def _judgements(model: str, contaminated: bool) -> pd.DataFrame:
    """Three control items through the real harness; the dirty model volunteers tool content in one."""
    rows = []
    for i in range(3):
        spec = ti.ItemSpec(id=f"ctl-{i}", kind="control", prompt_text="What is 2 + 2?")
        dirty = contaminated and i == 0
        answer = "4. Also, it is 27 °C in Madrid." if dirty else "4"
        result = ti.analyze(spec, answer, [_rec({"city": "Madrid"}, MADRID)] if dirty else [])
        result["settings"] = settings_of({})
        rows.append({"sample_id": spec.id, "metric": "tool_integration", "status": "scored",
                     "score": float(result["ok"]), "correct": bool(result["ok"]), "target": None,
                     "slices": json.dumps({"kind": "control"}), "details": json.dumps(result)})
    return pd.DataFrame(rows)


def _metrics() -> pd.DataFrame:
    return pd.concat([compute_metrics(SPLIT, m, _judgements(m, m == "dirty")) for m in ("clean", "dirty")],
                     ignore_index=True)


def _board_row(board, metric, model):
    return board[(board["metric"] == metric) & (board["model"] == model)].iloc[0]


# ---- declarations ---------------------------------------------------------------------------------------------
def test_metrics_declare_direction_and_kind_per_aggregate_name():
    assert direction_of("exact_match") == Direction(True, "score")
    assert direction_of("tool_integration") == Direction(True, "score")
    assert direction_of("tool_integration_control_contamination_rate") == Direction(False, "score")
    assert direction_of("tool_integration_negative_control_hallucination_rate") == Direction(False, "score")
    assert direction_of("tool_integration_controls_with_integration") == Direction(False, "count")
    assert direction_of("tool_integration_span_cap_exceeded") == Direction(False, "count")
    assert direction_of("tool_integration_span_histogram").kind == "count"
    assert direction_of("tool_integration_coverage") == Direction(True, "score")
    assert direction_of("llm_judge[gpt4]") == Direction(True, "score")       # a judge's own accuracy
    assert direction_of("code_execution_pass@1") == Direction(True, "score")
    assert direction_of("latency_s_p95").higher_is_better is False           # usage rows
    assert direction_of("output_tokens_total").kind == "count"
    assert ToolIntegration.direction_of("tool_integration_controls_with_integration").kind == "count"


def test_a_plugin_metric_declares_its_own_direction_and_it_reaches_the_metrics_rows():
    @register_metric("wer_test_plugin", replace=True)
    class WordErrorRate(Metric):
        name = "wer_test_plugin"
        higher_is_better = False
        aggregates = {"substitutions": Direction(False, "count")}

    assert direction_of("wer_test_plugin") == Direction(False, "score")
    assert direction_of("wer_test_plugin_substitutions") == Direction(False, "count")
    j = pd.DataFrame([{"sample_id": "a", "metric": "wer_test_plugin", "status": "scored", "score": 0.2, "target": "x",
                       "slices": None, "details": None}])
    row = compute_metrics("s/t", "m", j).iloc[0]
    assert (row["metric"], row["higher_is_better"], row["kind"]) == ("wer_test_plugin", False, "score")


# ---- the leaderboard ------------------------------------------------------------------------------------------
def test_a_lower_is_better_rate_ranks_the_clean_model_first():
    m = _metrics()
    rate = m[(m["metric"] == "tool_integration_control_contamination_rate") & (m["slice"] == "all")]
    assert dict(zip(rate["model"], rate["value"])) == {"clean": 0.0, "dirty": pytest.approx(1 / 3)}
    board = build_leaderboard(m)
    for metric in ("tool_integration_control_contamination_rate", "tool_integration_controls_with_integration",
                   "tool_integration"):  # the last one is higher-is-better: clean still first
        assert _board_row(board, metric, "clean")["rank"] == 1, metric
        assert _board_row(board, metric, "dirty")["rank"] == 2, metric
    r = _board_row(board, "tool_integration_control_contamination_rate", "clean")
    assert (r["higher_is_better"], r["kind"], r["tied"]) == (False, "score", False)


def test_a_count_is_a_count_on_the_leaderboard():
    board = build_leaderboard(_metrics())
    r = _board_row(board, "tool_integration_controls_with_integration", "dirty")
    assert (r["kind"], r["value"], r["higher_is_better"]) == ("count", 1.0, False)
    from evalpipe.metrics.aggregate import format_value

    assert format_value(1.0, "count") == "1" and format_value(1 / 3, "score") == "0.3333"


def test_ties_share_a_rank_and_read_as_ties():
    rows = [{"benchmark_split": "s/t", "model": mdl, "metric": "exact_match", "slice": "all", "value": v, "n": 4,
             "n_unscored": 0, "n_errors": 0, "stderr": float("nan"), "ci_low": 0.0, "ci_high": 1.0}
            for mdl, v in (("a", 0.0), ("b", 0.0), ("c", 0.0), ("d", 0.5), ("e", 0.5), ("f", 0.25))]
    board = build_leaderboard(pd.DataFrame(rows)).set_index("model")
    assert board["rank"].to_dict() == {"d": 1, "e": 1, "f": 3, "a": 4, "b": 4, "c": 4}  # competition ranking
    assert board["tied"].to_dict() == {"d": True, "e": True, "f": False, "a": True, "b": True, "c": True}
    from evalpipe.metrics.aggregate import rank_label

    assert [rank_label(board.loc[m, "rank"], board.loc[m, "tied"]) for m in "defa"] == ["=1", "=1", "3", "=4"]
    assert rank_label(pd.NA, False) == "-"


def test_old_partitions_without_the_columns_are_ranked_by_the_declarations():
    m = _metrics().drop(columns=["higher_is_better", "kind"])  # as read from a warehouse written before the columns
    board = build_leaderboard(m)
    assert _board_row(board, "tool_integration_control_contamination_rate", "clean")["rank"] == 1
    assert _board_row(board, "tool_integration_controls_with_integration", "clean")["kind"] == "count"


# ---- CLI ------------------------------------------------------------------------------------------------------
@pytest.fixture
def warehouse(home):
    from evalpipe.cli.main import _warehouse

    wh = _warehouse()
    m = _metrics()
    for model in ("clean", "dirty"):
        part = {"benchmark_split": SPLIT, "model": model}
        j = _judgements(model, model == "dirty").assign(benchmark_split=SPLIT, model=model)
        wh.write("judgements", j, part)
        wh.write("metrics", m[m["model"] == model], part)
    wh.write("leaderboard", build_leaderboard(m), {})
    return wh


def test_leaderboard_command_ranks_by_direction_and_shows_counts_as_counts(warehouse):
    r = invoke("leaderboard", "--metric", "tool_integration_controls_with_integration")
    assert r.exit_code == 0, r.output
    rows = [ln.split() for ln in r.output.splitlines()[1:]]  # split, metric, rank, model, value, better, kind, n
    assert [ln[2:7] for ln in rows] == [["1", "clean", "0", "lower", "count"], ["2", "dirty", "1", "lower", "count"]], \
        r.output
    assert "1.0000" not in r.output and "0.0000" not in r.output
    rows = json.loads(invoke("leaderboard", "--format", "json", "--metric",
                           "tool_integration_control_contamination_rate").output)
    assert [(x["model"], x["rank"], x["higher_is_better"], x["tied"]) for x in rows] == [
        ("clean", 1, False, False), ("dirty", 2, False, False)]


def test_leaderboard_command_marks_ties(warehouse):
    r = invoke("leaderboard", "--metric", "tool_integration_negative_control_hallucination_rate")
    # no negative controls in the set: no value, so no rank (and nothing tied)
    assert r.exit_code == 0 and "=1" not in r.output
    r = invoke("leaderboard", "--metric", "tool_integration_span_cap_exceeded")  # 0 and 0: a tie
    assert [ln.split()[2:4] for ln in r.output.splitlines()[1:]] == [["=1", "clean"], ["=1", "dirty"]], r.output


def test_compare_marks_the_better_model_by_direction(warehouse):
    c = json.loads(invoke("compare", "dirty", "clean", "--metric", "tool_integration_control_contamination_rate",
                        "--format", "json").output)
    assert (c["better"], c["higher_is_better"]) == ("clean", False)
    assert (c["value_a"], c["value_b"]) == (pytest.approx(1 / 3), 0.0)
    t = invoke("compare", "dirty", "clean", "--metric", "tool_integration_controls_with_integration")
    assert t.exit_code == 0, t.output
    assert "better: clean (lower is better)" in t.output and "count" in t.output
    c = json.loads(invoke("compare", "dirty", "clean", "--format", "json").output)  # the per-sample metric
    assert (c["metric"], c["better"], c["higher_is_better"]) == ("tool_integration", "clean", True)


def test_a_bad_declaration_is_refused_when_the_metric_is_registered():
    class Bad(Metric):
        name = "bad_direction_test"
        kind = "percent"

    with pytest.raises(ValueError, match="kind one of score, count, amount"):
        register_metric("bad_direction_test", Bad)

    class BadAggregate(Metric):
        name = "bad_direction_test"
        aggregates = {"x": (False, "count")}

    with pytest.raises(ValueError, match=r"aggregates\['x'\] must be a Direction"):
        register_metric("bad_direction_test", BadAggregate)


def test_summarize_lists_the_better_model_first_by_direction(warehouse):
    rows = json.loads(invoke("summarize", "--format", "json", "--metric",
                           "tool_integration_control_contamination_rate").output)
    assert [(x["model"], x["better"]) for x in rows] == [("clean", "lower"), ("dirty", "lower")]
    rows = json.loads(invoke("summarize", "--format", "json", "--metric", "tool_integration").output)
    assert [(x["model"], x["better"]) for x in rows] == [("clean", "higher"), ("dirty", "higher")]


def test_the_run_summary_shows_a_count_as_a_count():
    from evalpipe.store.artifacts import summary_markdown

    summary = {"benchmark_split": SPLIT, "model": "dirty", "run_id": None,
               "counts": {"samples": 3, "ok": 3, "errors": 0, "from_journal": 0, "input_tokens": 0,
                          "output_tokens": 0, "cost_usd": 0},
               "metrics": [{"metric": "tool_integration_controls_with_integration", "slice": "all", "value": 1.0,
                            "n": 3, "n_unscored": 0, "n_errors": 0, "ci_low": 0.0, "ci_high": 2.0, "kind": "count"}]}
    text = summary_markdown(summary)
    assert "| all | 1 | 3 |" in text and "1.0000" not in text and "0.000 - 2.000" not in text
