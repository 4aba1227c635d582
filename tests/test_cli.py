"""The `evalpipe` command line: every command, its output and its exit code."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

REPO = Path(__file__).parents[1]


def _broken_runner(model):
    raise RuntimeError("cannot start the model server for 'test-cli-broken'")


from evalpipe.runners import register_runner  # noqa: E402

register_runner("test-cli-broken", _broken_runner, replace=True)

CONFIG = smoke_benchmark(limit=3, options="slice_by: [category]") + """models:
  perfect: {runner: echo, reply: target}
  parrot: {runner: echo}
  broken: {runner: test-cli-broken}   # a runner that can't start: the partition fails (exit 1)
  unreachable:                       # every sample fails: nothing listens on port 9
    runner: litellm
    model: openai/nothing
    api_base: http://127.0.0.1:9/v1
default_models: [perfect]
"""


@pytest.fixture
def cli(home, write_config, monkeypatch):
    """Invoke the CLI in this process; env vars it sets are restored after the test."""
    write_config(CONFIG)
    return cli_in_process(monkeypatch)


@pytest.mark.slow
def test_run_then_read_the_results_every_way(cli, home, tmp_path):
    r = cli("run", "--model", "perfect", "--model", "parrot", "--concurrency", "2",
            "--timeout-s", "5", "--runner-option", "max_retries=1", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "| smoke/extra       | perfect | ok       | exact_match |" in r.output  # the summary table
    assert "warehouse:" in r.output

    s = cli("summarize", "--json")
    rows = json.loads(s.output)
    assert {(x["model"], x["value"], x["n"]) for x in rows} == {("perfect", 1.0, 3), ("parrot", 0.0, 3)}
    s = cli("summarize", "--model", "perfect", "--slices")
    assert s.exit_code == 0 and "category=geography" in s.output and "parrot" not in s.output
    assert cli("summarize", "--model", "nobody").exit_code == 2

    v = cli("view", "--model", "parrot", "--incorrect-only", "--limit", "2")
    assert v.exit_code == 0 and "2 sample(s)" in v.output and "s1" in v.output and "s3" not in v.output
    assert "0 sample(s)" in cli("view", "--model", "parrot", "--correct-only").output
    d = cli("view", "--split", "smoke/extra", "--model", "perfect", "--detailed", "--limit", "1")
    assert "prompt:\n[user]\nWhat is the capital of France?" in d.output and "target: Paris" in d.output
    assert "0 sample(s)" in cli("view", "--model", "perfect", "--level", "3").output
    bad = cli("view", "--model", "perfect", "--correct-only", "--incorrect-only")
    assert bad.exit_code == 2 and "exclude each other" in bad.output
    assert cli("view").exit_code == 2  # two partitions: which one?

    q = cli("sql", "select model, count(*) as n from rollouts group by model order by model")
    assert q.exit_code == 0 and "| parrot  |   3 |" in q.output
    assert json.loads(cli("sql", "--json", "select 1 as x").output) == [{"x": 1}]
    e = cli("sql", "select * from no_such_table")
    assert e.exit_code == 2 and e.output.startswith("error: SQL error: Catalog Error") and len(e.output.splitlines()) == 1

    out = tmp_path / "export"
    x = cli("export", "--split", "smoke/extra", "--model", "parrot", "--out", str(out))
    assert x.exit_code == 0 and x.output.strip() == str(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json", "samples.jsonl", "events.jsonl", "errors.jsonl", "summary.json", "summary.md"])
    assert len((out / "samples.jsonl").read_text().splitlines()) == 3


@pytest.mark.slow
def test_runner_and_benchmark_options_override_one_run(cli):
    # parrot repeats the question; forcing a fixed reply through --runner-option changes its answers
    r = cli("run", "--model", "parrot", "--split", "extra", "--benchmark-option", "limit=2",
            "--runner-option", "reply=fixed", "--runner-option", "text=Paris", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "parrot" not in cli("summarize", "--json").output  # limit=2 is a try (--limit 2): not a full result
    rows = json.loads(cli("summarize", "--json", "--include-limited").output)
    assert [(x["model"], x["value"], x["n"]) for x in rows] == [("parrot@limit2", 0.5, 2)]  # s1 "Paris", s2 "5"


@pytest.mark.slow
def test_exit_codes_failure_and_gate(cli, write_config):
    r = cli("run", "--model", "broken", "--no-progress")
    assert r.exit_code == 1
    assert "smoke/extra x broken: " in r.output and "cannot start the model server" in r.output
    # every rollout fails (connection refused, no retries): nothing was measured, the partition failed (exit 1)
    g = cli("run", "--model", "unreachable", "--runner-option", "max_retries=0", "--no-progress")
    assert g.exit_code == 1, g.output
    assert "smoke/extra x unreachable: rollouts: every one of the 3 sample(s) failed" in g.output
    # some rollouts fail: the partition is scored (failures count as wrong) and the error-rate gate fails (exit 3)
    from benchmarks.mock_server import MockLLM, serve_in_thread

    with serve_in_thread(MockLLM()) as (mock, url):
        mock.script["What is 2 + 3? Answer with a number."] = [(500, {}, "overloaded")]
        write_config(CONFIG.replace("http://127.0.0.1:9/v1", url))
        g = cli("run", "--model", "unreachable", "--runner-option", "max_retries=0", "--no-progress")
    assert g.exit_code == 3, g.output
    assert "check error_rate on rollouts [smoke/extra|unreachable]: FAILED" in g.output
    assert "gate failed" in g.output


def test_user_errors_are_one_line_with_exit_2(cli):
    for args, text in [(["run", "--model", "nope"], "unknown model 'nope'"),
                       (["run", "--benchmark", "nope"], "unknown benchmark(s) ['nope']"),
                       (["run", "--runner-option", "oops"], "--runner-option expects key=value"),
                       (["run", "--runner-option", "api_key=abcdefgh"], "looks like a secret"),
                       (["run", "--benchmark-option", "x=sk-proj-abcdefghijklmnop1234"], "looks like a secret"),
                       (["--redact-pattern", "([", "sql", "select 1"], "is not a valid regex")]:
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert r.output.startswith("error: ") and text in r.output and len(r.output.strip().splitlines()) == 1


def test_listing_commands(cli):
    assert "| echo " in cli("runners").output
    listed = cli("metrics").output
    # the adapters' own metrics too (registered by the benchmarks package, not evalpipe.metrics)
    assert all(f"| {m} " in listed for m in ("exact_match", "gaia", "gaia_strict", "qrdata", "tau2_reward")), listed
    assert "| file " in cli("adapters").output


def test_debug_raises_the_real_exception(cli):
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown model 'nope'"):
        cli("--debug", "run", "--model", "nope")


def test_console_script_is_installed_and_exits_2_on_a_user_error(write_config, home):
    # a fresh process knows only the built-in runners (the test runner above is registered in this one)
    cfg = write_config("\n".join(ln for ln in CONFIG.splitlines() if "test-cli-broken" not in ln))
    exe = Path(sys.executable).parent / "evalpipe"
    env = {"PATH": str(exe.parent), "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "HOME": str(home)}
    r = subprocess.run([str(exe), "run", "--model", "nope"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: unknown model 'nope'") and "Traceback" not in r.stderr, r.stderr
