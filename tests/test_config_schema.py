"""The whole config is checked before any model call: `file:line: where: what` with a "did you mean", exit 2, and
no rollout row written. Also: keys added this round are accepted, declared runner options are checked, a split with
0 samples runs to the end with n=0 metrics."""
import pytest
from click.testing import CliRunner

import eval_assets.definitions  # noqa: F401  (partitions come from the test config at first import, not from ours)
from pydantic import BaseModel, Field

from evalpipe.project.schema import load_yaml, validate_config
from evalpipe.core.errors import ConfigError
from evalpipe.runners import register_runner
from evalpipe.runners.echo import EchoRunner

BASE = """\
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {path: "{repo}/data/smoke/test.jsonl"}
    options:
      columns: {prompt: question, target: answer, id: id}
    metrics: [exact_match]
models:
  perfect: {runner: echo, reply: target}
"""


class _Opts(BaseModel):
    temperature_hint: float = Field(default=0.0, ge=0)
    mode: str = "a"


class DeclaringRunner(EchoRunner):
    """An echo runner that declares its options (what other runners may do)."""

    option_schema = _Opts


register_runner("test-declaring", DeclaringRunner, replace=True)


def problems(text: str, tmp_path) -> list[str]:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    try:
        dups: list = []
        data, lines = load_yaml(text, p, dups)
        validate_config(data, p, lines, dups)
    except ConfigError as exc:
        return exc.problems or [str(exc)]
    return []


@pytest.mark.parametrize("text,line,needle", [
    ("benchmarks:\n  smoke:\n    adapter: fiel\n", 3, "benchmarks.smoke.adapter: unknown adapter 'fiel'; did you mean 'file'?"),
    ("benchmarks:\n  smoke:\n    adapter: file\n    metrics: [exact_mach]\n", 4,
     "benchmarks.smoke.metrics.0: unknown metric 'exact_mach'; did you mean 'exact_match'?"),
    ("models:\n  m:\n    runner: litelm\n", 3, "models.m.runner: unknown runner 'litelm'; did you mean 'litellm'?"),
    ("models:\n  m:\n    rnner: echo\n", 3, "models.m.rnner: unknown key; did you mean 'runner'?"),
    ("models:\n  m:\n    modle: x\n", 3, "models.m.modle: unknown key; did you mean 'model'?"),
    ("benchmarks:\n  smoke:\n    adapter: file\n    split: [a]\n", 4, "benchmarks.smoke.split: unknown key; did you mean 'splits'?"),
    ("benchmark: {}\n", 1, "benchmark: unknown key; did you mean 'benchmarks'?"),
    ("benchmarks:\n  smoke:\n    adapter: file\n    options:\n      limit: -3\n", 5,
     "benchmarks.smoke.options.limit: input should be greater than or equal to 0 (got -3)"),
    ("benchmarks:\n  s:\n    adapter: file\n    splits:\n      a: {limit: -1}\n", 5, "benchmarks.s.splits.a.limit"),
    ("models:\n  m:\n    runner: echo\n    concurrency: lots\n", 4, "models.m.concurrency: must be an integer (got 'lots')"),
    ("models:\n  m:\n    runner: echo\n    options: {concurrency: 0}\n", 4, "models.m.options.concurrency: input should be greater than or equal to 1"),
    ("models:\n  m:\n    runner: echo\n    timeout_s: 0\n", 4, "models.m.timeout_s: input should be greater than 0"),
    ("judges:\n  j:\n    runner: echo\n    timeout_s: -1\n", 4, "judges.j.timeout_s"),
    ("models:\n  m: {runner: echo}\n  m: {runner: echo, reply: target}\n", 3, "duplicate key 'm' (first at line 2)"),
    ("sandbox: bwarp\n", 1, "sandbox: input should be 'auto', 'bwrap', 'docker' or 'process'"),
    ("max_concurrent_partitions: 0\n", 1, "max_concurrent_partitions: input should be greater than or equal to 1"),
    ("tracing: {exportr: jsonl}\n", 1, "tracing.exportr: unknown key; did you mean 'exporter'?"),
    ("benchmarks:\n  s:\n    adapter: file\n    tools: {fixture: x}\n", 4, "benchmarks.s.tools.fixture: unknown key; did you mean 'fixtures'?"),
    ("models:\n  m: {runner: echo}\ndefault_models: [n]\n", 3, "default_models.0: default model 'n' is not under 'models'"),
    ("models:\n  m:\n    runner: test-declaring\n    temprature_hint: 1\n", 4,
     "models.m: unknown option 'temprature_hint' for runner 'test-declaring'; did you mean 'temperature_hint'?"),
    ("models:\n  m:\n    runner: test-declaring\n    options: {temperature_hint: -1}\n", 4,
     "models.m.options.temperature_hint: input should be greater than or equal to 0"),
    ("benchmarks:\n  s:\n    adapter: file\n    metrics:\n      - {name: llm_judge, judge: strcit}\njudges:\n  strict: {runner: echo}\n",
     5, "benchmarks.s.metrics.0.judge: unknown judge 'strcit'; did you mean 'strict'?"),
    ("plugins: [no_such_module_xyz]\n", 1, "plugins.0: cannot import plugin module 'no_such_module_xyz'"),
    ("benchmarks:\n  s:\n    adapter: file\n    metrics:\n      - exact_match\n      - {name: exact_match, numeric: false}\n",
     6, "benchmarks.s.metrics.1: metric 'exact_match' is listed twice (entries 0 and 1)"),
    ("benchmarks:\n  s:\n    adapter: file\n    splits:\n      a: {metrics: [includes, includes]}\n", 5,
     "benchmarks.s.splits.a.metrics.1: metric 'includes' is listed twice"),
    ("benchmarks: {qa: [unclosed\n", 2, "not valid YAML"),
])
def test_each_mistake_is_one_line_with_file_and_line(tmp_path, text, line, needle):
    found = problems(text, tmp_path)
    assert found, text
    hit = [p for p in found if needle in p]
    assert hit, found
    assert hit[0].startswith(f"{tmp_path / 'c.yaml'}:{line}: ") and "\n" not in hit[0]


def test_a_named_sandbox_backend_that_cannot_run_here_is_a_config_error(tmp_path, monkeypatch):
    import evalpipe.sandbox.docker as docker

    monkeypatch.setattr(docker.DockerSandbox, "probe", classmethod(lambda cls: "no Docker daemon"))
    found = problems("sandbox: docker\n", tmp_path)
    assert any(":1: sandbox: sandbox backend 'docker' cannot run here: no Docker daemon" in p for p in found), found
    monkeypatch.setattr(docker.DockerSandbox, "probe", classmethod(lambda cls: None))
    assert not problems("sandbox: docker\n", tmp_path)


def test_duplicate_keys_are_reported_with_the_other_problems(tmp_path):
    text = "models:\n  m: {runner: echo}\n  m: {runner: ecoh}\nsandbox: nope\n"
    found = problems(text, tmp_path)
    assert any(":3: models.m: duplicate key 'm' (first at line 2)" in p for p in found), found
    assert any("unknown runner 'ecoh'" in p for p in found) and any(":4: sandbox" in p for p in found), found


def test_runner_options_are_checked_against_the_runners_declaration(tmp_path):
    # issue 20: a built-in runner declares its options, so an option it does not take is refused (it used to be
    # passed on and ignored); a runner that declares nothing (a plugin's) keeps free-form options
    text = "models:\n  m: {runner: echo, reply: fixed, text: hi, mode: fast, params_file: p.json, engine: x}\n"
    found = problems(text, tmp_path)
    assert [p.split(": ", 1)[1].split(" for ")[0] for p in found] == [
        "models.m: unknown option 'mode'", "models.m: unknown option 'params_file'",
        "models.m: unknown option 'engine'"], found
    assert problems("models:\n  m: {runner: echo, reply: fixed, text: hi}\n", tmp_path) == []
    register_runner("test-undeclared", type("Undeclared", (EchoRunner,), {"option_schema": None}), replace=True)
    assert problems("models:\n  m: {runner: test-undeclared, mode: fast, engine: x}\n", tmp_path) == []


def test_every_problem_is_reported_and_the_first_is_the_message(tmp_path):
    text = "models:\n  m:\n    runner: litelm\n    concurrency: lots\nsandbox: nope\n"
    found = problems(text, tmp_path)
    assert len(found) == 3
    p = tmp_path / "c.yaml"
    with pytest.raises(ConfigError, match=r"c.yaml:3: .*\(and 2 more problems; run `evalpipe validate` to see all\)"):
        validate_config(*load_yaml(text, p)[:1], p, load_yaml(text, p)[1])


def test_keys_added_this_round_are_accepted(tmp_path):
    text = BASE.replace("{repo}", "/x") + """\
sandbox: auto
plugins: [json]
max_concurrent_partitions: 2
warehouse: {uri: "s3://bucket/evals"}
rate_limits: {openai: {rpm: 500}}
judges:
  j: {runner: echo, model: j, concurrency: 4, timeout_s: 30}
checks: {max_error_rate: 0.2, severity: warn}
artifacts: {enabled: false}
tracing: {exporter: jsonl, path: t.jsonl}
redact_patterns: ['X-[0-9]+']
settings: {anything: 1}
default_benchmarks: [smoke]
default_models: [perfect]
"""
    text = text.replace("    metrics: [exact_match]\n", """    metrics: [exact_match]
    prompt_wrapper: chat
    tools: {fixtures: f.jsonl, allowlist: [a], schemas: s.json, live: false, python: true, bash: false, mode: replay}
""").replace("  perfect: {runner: echo, reply: target}", """  perfect: {runner: echo, reply: target, experiment: e1, prompt_wrapper: plain, rpm: 60}""")
    assert problems(text, tmp_path) == []


@pytest.mark.parametrize("bad", [
    "  m: {runner: echo, concurrency: lots}\n",
    "  m: {runner: echo}\n  m: {runner: echo}\n",
    "  m: {runner: ecoh}\n",
    "METRIC",  # a misspelled metric: today's costliest mistake (found only after every rollout)
])
def test_cli_exits_2_before_any_rollout(home, write_config, bad):
    text = BASE.replace("{repo}", str(__import__("pathlib").Path(__file__).parents[1]))
    if bad == "METRIC":
        text, bad = text.replace("metrics: [exact_match]", "metrics: [exact_mach]"), ""
    write_config(text + bad)
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--model", "perfect", "--no-progress"])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "evals.yaml:" in lines[0], r.output
    assert not (home / "warehouse").exists() and not (home / "journal").exists()
    v = CliRunner().invoke(main, ["validate"])
    assert v.exit_code == 2 and "evals.yaml:" in v.output


def test_validate_command_ok(write_config):
    write_config(BASE.replace("{repo}", "/x"))
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["validate"])
    assert r.exit_code == 0 and "ok (1 benchmark split(s), 1 model(s))" in r.output, r.output


@pytest.mark.slow
def test_a_split_with_zero_samples_runs_to_the_end(home, write_config):
    write_config(BASE.replace("{repo}", str(__import__("pathlib").Path(__file__).parents[1]))
                 .replace('extra: {path: ', 'extra: {limit: 0, path: '))
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--model", "perfect", "--no-progress"])
    assert r.exit_code == 0, r.output
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    m = Warehouse(warehouse_path()).query("select metric, n, value from metrics where slice = 'all'")
    assert m["metric"].tolist() == ["exact_match"] and m["n"].tolist() == [0] and m["value"].isna().all()


def test_command_line_overrides_are_checked_too(home, write_config):
    write_config(BASE.replace("{repo}", "/x"))
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--model", "perfect", "--benchmark-option", "limit=-3", "--no-progress"])
    assert r.exit_code == 2 and r.output.strip() == \
        ("error: --benchmark-option limit=-3: limit must be a whole number >= 1 (the first N samples, evaluated "
         "under the model key <model>@limit<N>)"), r.output
    assert not (home / "warehouse").exists()
