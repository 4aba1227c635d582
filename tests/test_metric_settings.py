"""Issue 30 item 6: a metric setting of the wrong type or out of range, and a judge without its credentials, are
refused by `evalpipe validate` and by `run` before the first model call, as one line naming the metric, the setting,
the value and the expected form; docs/api.md's metric example is a valid metric entry; an invalid setting stops the
code location with that one line, never deeper."""
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

import eval_assets.definitions  # noqa: F401  (partitions come from the test config at first import)
from evalpipe.core.errors import ConfigError
from evalpipe.metrics import build_metric, get_metric, list_metrics
from tests.helpers.cli import cli, error_lines, no_model_call
from tests.helpers.configs import smoke_benchmark

REPO = Path(__file__).parents[1]
BASE = smoke_benchmark() + "models:\n  perfect: {runner: echo, reply: target}\n"
CODE_EXECUTION = f"""\
benchmarks:
  humaneval:
    adapter: humaneval
    metrics: [{{name: code_execution, memory_mb: lots, disk_mb: 1.5, timeout_s: -1}}]
models:
  perfect: {{runner: echo, reply: target}}
"""


def built_in(factory) -> bool:  # other test files register their own metrics in this process
    return str(getattr(factory, "__module__", "")).startswith("evalpipe.") and \
        getattr(factory, "__module__", "") != "evalpipe.metrics.function"


def test_every_built_in_metric_declares_a_typed_settings_model():
    untyped = [n for n in list_metrics() if built_in(get_metric(n)) and not (
        isinstance(get_metric(n).option_schema, type) and issubclass(get_metric(n).option_schema, BaseModel))]
    assert not untyped, untyped


def test_code_execution_settings_are_typed_and_ranged_by_validate(home, write_config):
    p = write_config(CODE_EXECUTION)
    lines = error_lines(cli("validate"))
    assert lines == [
        f"error: {p}:4: benchmarks.humaneval.metrics.0.timeout_s: metric 'code_execution': setting timeout_s must be "
        "a number of seconds > 0 (default 10), got -1",
        f"error: {p}:4: benchmarks.humaneval.metrics.0.memory_mb: metric 'code_execution': setting memory_mb must be "
        "a whole number of MB >= 1 (default 1024), got 'lots'",
        f"error: {p}:4: benchmarks.humaneval.metrics.0.disk_mb: metric 'code_execution': setting disk_mb must be a "
        "whole number of MB >= 0 (0: no quota), got 1.5",
    ], lines


def test_code_execution_settings_are_refused_by_run_before_any_model_call(home, write_config):
    write_config(CODE_EXECUTION)
    lines = error_lines(cli("run", "--model", "perfect", "--no-progress"))
    assert "metric 'code_execution': setting timeout_s must be a number of seconds > 0" in lines[0], lines
    no_model_call(home)


@pytest.mark.parametrize("entry,setting", [
    ({"name": "code_execution", "memory_mb": "lots"}, "memory_mb"),
    ({"name": "code_execution", "disk_mb": 1.5}, "disk_mb"),
    ({"name": "code_execution", "timeout_s": -1}, "timeout_s"),
    ({"name": "code_execution", "pass_at_k": [0, 1]}, "pass_at_k"),
    ({"name": "code_execution", "concurrency": 0}, "concurrency"),
    ({"name": "exact_match", "rel_tol": "1%"}, "rel_tol"),
    ({"name": "exact_match", "case_sensitive": "yes"}, "case_sensitive"),
    ({"name": "gaia", "numeric_tolerance": -0.1}, "numeric_tolerance"),
    ({"name": "gaia_strict", "fractions": 1}, "fractions"),
    ({"name": "includes", "field": "answer"}, "field"),
    ({"name": "regex", "pattern": "("}, "pattern"),
    ({"name": "last_number", "abs_tol": float("inf")}, "abs_tol"),
    ({"name": "semantic_similarity", "threshold": 2}, "threshold"),
    ({"name": "semantic_similarity", "batch_size": 0}, "batch_size"),
    ({"name": "llm_judge", "combine": "avg", "judge": {"runner": "echo"}}, "combine"),
    ({"name": "llm_judge", "timeout_s": 0, "judge": {"runner": "echo"}}, "timeout_s"),
    ({"name": "hms_score", "pair_text": "half", "judge": {"runner": "echo"}}, "pair_text"),
    ({"name": "dabstep", "rule": "lenient"}, "rule"),
    ({"name": "list_match", "skip_empty": "no"}, "skip_empty"),
    ({"name": "tool_integration", "min_eligible_for_gates": 0}, "min_eligible_for_gates"),
])
def test_a_bad_setting_is_one_line_naming_metric_setting_value_and_form(entry, setting):
    """`build_metric` (the judge resource's overrides, `evaluate(metrics=...)`) checks as the config check does."""
    with pytest.raises(ConfigError) as info:
        build_metric(entry)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"metric {entry['name']!r}: setting {setting} must be "), msg
    assert f"got {entry[setting]!r}" in msg, msg


def test_a_judge_without_its_credentials_is_refused_by_validate(home, write_config, monkeypatch):
    monkeypatch.delenv("JUDGE_KEY_FOR_TEST", raising=False)
    write_config(BASE.replace("metrics: [exact_match]", "metrics: [exact_match, llm_judge]")
                 + "judges:\n  grader: {runner: litellm, model: openai/gpt-4o, api_key_env: JUDGE_KEY_FOR_TEST}\n")
    lines = error_lines(cli("validate"))
    assert len(lines) == 1 and "judge 'grader' (metric llm_judge of smoke/extra)" in lines[0] \
        and "JUDGE_KEY_FOR_TEST (its api_key_env) is not set" in lines[0], lines
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "set")
    assert cli("validate").exit_code == 0


def test_a_routed_or_inline_judge_without_credentials_is_refused_before_any_rollout(home, write_config, monkeypatch):
    """A model-graded metric under `metrics_by_source`, with its judge given inline: `run` and `validate` refuse it
    before the rollouts are paid for."""
    monkeypatch.delenv("JUDGE_KEY_FOR_TEST", raising=False)
    judge = "{runner: litellm, model: openai/gpt-4o, api_key_env: JUDGE_KEY_FOR_TEST}"
    write_config(BASE.replace("      columns: {prompt: question, target: answer, id: id}\n",
                              "      columns: {prompt: question, target: answer, id: id}\n"
                              f"      metrics_by_source: {{'*': [{{name: llm_judge, judge: {judge}}}]}}\n"))
    lines = error_lines(cli("validate"))
    assert "JUDGE_KEY_FOR_TEST (its api_key_env) is not set" in lines[0], lines
    lines = error_lines(cli("run", "--model", "perfect", "--no-progress"))
    assert "JUDGE_KEY_FOR_TEST (its api_key_env) is not set" in lines[0], lines
    no_model_call(home)


def test_the_docs_metric_example_is_a_valid_metric_entry():
    """docs/api.md's `metrics` row: every mapping it shows is a metric entry `build_metric` accepts (the example
    `{"name": "exact_match", "ignore_case": true}` was not, and took a code location down when copied)."""
    import json

    text = (REPO / "docs" / "api.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `metrics` |"))
    entries = [json.loads(m) for m in re.findall(r"`(\{\"name\".*?\})`", row)]
    assert entries, row
    for entry in entries:
        build_metric(entry)


def test_an_invalid_setting_stops_the_code_location_with_one_line(home, write_config):
    """The code location refuses the config with the same one line `evalpipe validate` prints (file:line, metric,
    setting, value), never a traceback from deeper down."""
    from eval_assets.factory import build_definitions
    from evalpipe.project import Project

    p = write_config(BASE.replace("metrics: [exact_match]", "metrics: [{name: exact_match, ignore_case: true}]"))
    with pytest.raises(ConfigError) as info:
        build_definitions(Project.from_file(p))
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(f"{p}:8: benchmarks.smoke.metrics.0: unknown option 'ignore_case' for "
                                              "metric 'exact_match'"), msg


def test_evaluate_with_a_judge_metric_and_no_key_is_refused_before_the_agent_runs(home, monkeypatch):
    """The Python form: `evaluate(agent=..., metrics=[model-graded with a keyless judge])` is refused before the
    agent is called once (the config form and the CLI already were)."""
    import evalpipe

    monkeypatch.delenv("JUDGE_KEY_FOR_TEST", raising=False)
    calls = []

    def agent(sample):
        calls.append(sample)
        return "x"

    judge = {"runner": "litellm", "model": "openai/gpt-4o", "api_key_env": "JUDGE_KEY_FOR_TEST"}
    with pytest.raises(ConfigError, match="JUDGE_KEY_FOR_TEST"):
        evalpipe.evaluate(agent=agent, dataset=[{"input": "q", "target": "a"}],
                          metrics=[{"name": "llm_judge", "judge": judge}])
    assert calls == []
