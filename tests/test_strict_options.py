"""Issue 20 item 5: every setting is honoured or refused. An unknown or unsupported option (config file, command
line, `evaluate()`) is a one-line ConfigError with a "did you mean", exit 2, before any model call; `shuffle` on a
`file` split is honoured; `min_eligible_for_gates` works from the command line; a model-graded metric without a
judge is refused by `evalpipe validate` and before any rollout."""
import json
from pathlib import Path

import pytest

import eval_assets.definitions  # noqa: F401  (partitions come from the test config at first import)
from evalpipe.core.errors import ConfigError
from tests.helpers.cli import cli, no_model_call, one_error_line
from tests.helpers.configs import smoke_benchmark

REPO = Path(__file__).parents[1]
BASE = smoke_benchmark() + "models:\n  perfect: {runner: echo, reply: target}\n"


# ---- the command line ---------------------------------------------------------------------------------------------
def test_unknown_benchmark_option_is_refused(home, write_config):
    write_config(BASE)
    line = one_error_line(cli("run", "--model", "perfect", "--benchmark-option", "bogus_opt=1", "--no-progress"))
    assert "--benchmark-option: unknown option 'bogus_opt'" in line and "adapter 'file'" in line and "smoke/extra" in line, line
    line = one_error_line(cli("run", "--model", "perfect", "--benchmark-option", "shufle=true", "--no-progress"))
    assert "did you mean 'shuffle'?" in line, line
    no_model_call(home)


def test_unknown_runner_option_is_refused(home, write_config):
    write_config(BASE)
    line = one_error_line(cli("run", "--model", "perfect", "--runner-option", "bogus=1", "--no-progress"))
    assert "--runner-option: unknown option 'bogus'" in line and "runner 'echo'" in line, line
    line = one_error_line(cli("run", "--model", "perfect", "--runner-option", "replly=target", "--no-progress"))
    assert "did you mean 'reply'?" in line, line
    line = one_error_line(cli("run", "--model", "perfect", "--runner-option", "reply=targt", "--no-progress"))
    assert "--runner-option reply" in line and "'target'" in line, line
    no_model_call(home)


def test_an_option_the_adapter_cannot_apply_is_refused(home, write_config):
    write_config(BASE.replace("models:", f"""  daeval:
    adapter: daeval
    splits: {{validation: {{}}}}
    options: {{path: "{REPO}/data/daeval_sample"}}
models:"""))
    # daeval does not shuffle: refused, not ignored
    line = one_error_line(cli("run", "--benchmark", "daeval", "--model", "perfect", "--benchmark-option", "shuffle=true",
                              "--no-progress"))
    assert "shuffle" in line and "adapter 'daeval'" in line, line
    no_model_call(home)


def test_a_run_time_option_that_shapes_the_shared_dataset_is_refused(home, write_config):
    """The dataset partition is keyed by split alone: an adapter option given for one run (the file's `shuffle`,
    a protocol, GAIA's `levels`) would rewrite what every model key of the split reads, as --limit did."""
    write_config(BASE)
    line = one_error_line(cli("run", "--model", "perfect", "--benchmark-option", "shuffle=true", "--no-progress"))
    assert "--benchmark-option shuffle=True" in line and "shared by every model" in line, line
    assert "benchmarks.smoke.splits.extra_shuffle" in line and "--limit N" in line, line
    import evalpipe

    with pytest.raises(ConfigError, match=r"benchmark_options columns=.*shared by every model"):
        evalpipe.evaluate("smoke", "perfect", benchmark_options={"columns": {"prompt": "q"}})
    no_model_call(home)
    # options read after the dataset stage stay run-time settings
    r = cli("run", "--model", "perfect", "--benchmark-option", "max_turns=3", "--benchmark-option",
            "slice_by=[category]", "--no-progress")
    assert r.exit_code == 0, r.output


def test_the_launchpad_cannot_reshape_the_dataset_partition(home, write_config):
    write_config(BASE)
    from dagster import DagsterInstance

    from eval_assets.launch import _first_error, run_assets
    from resources import EvalConfigResource

    with DagsterInstance.get() as instance:
        r = run_assets(["dataset"], "smoke/extra", instance,
                       {"eval_config": EvalConfigResource(split_options={"shuffle": True})})
        assert not r.success and "eval_config.split_options shuffle=True" in _first_error(r)
        r = run_assets(["dataset"], "smoke/extra", instance,
                       {"eval_config": EvalConfigResource(split_options={"slice_by": ["category"]})})
        assert r.success


# ---- the config file ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("old,new,where,hint", [
    ("columns: {prompt", "colums: {prompt", ":7: benchmarks.smoke.options: unknown option 'colums'",
     "did you mean 'columns'?"),
    ("perfect: {runner: echo, reply: target}", "perfect: {runner: echo, replly: target}",
     ":10: models.perfect: unknown option 'replly'", "did you mean 'reply'?"),
    # a secret-looking name: the message stays readable (the redactor masks the value of `api_key: ...` pairs)
    ("perfect: {runner: echo, reply: target}", "perfect: {runner: echo, reply: target,\n    api_key: sk-x}",
     ":11: models.perfect: unknown option 'api_key' for runner 'echo'", "known: "),
    ("perfect: {runner: echo, reply: target}", "perfect: {runner: echo, reply: targte}", ":10: models.perfect.reply",
     "'target'"),
    ("metrics: [exact_match]", "metrics: [{name: exact_match, case_sensitve: true}]",
     ":8: benchmarks.smoke.metrics.0: unknown option 'case_sensitve'", "did you mean 'case_sensitive'?"),
    ("extra: {path", "extra: {shuffel: true, path", ":5: benchmarks.smoke.splits.extra: unknown option 'shuffel'",
     "did you mean 'shuffle'?"),
])
def test_config_file_mistakes_name_file_and_line(home, write_config, old, new, where, hint):
    p = write_config(BASE.replace(old, new))
    line = one_error_line(cli("run", "--model", "perfect", "--no-progress"))
    assert f"{p}{where}" in line and hint in line, line
    no_model_call(home)
    v = cli("validate")
    assert v.exit_code == 2 and where in v.output and hint in v.output, v.output


# ---- evaluate() ---------------------------------------------------------------------------------------------------
def test_evaluate_refuses_unknown_options_before_any_model_call(home, write_config):
    import evalpipe

    write_config(BASE)
    with pytest.raises(ConfigError, match=r"evaluate\(\) got unknown option 'limt'; did you mean 'limit'\?"):
        evalpipe.evaluate("smoke", "perfect", limt=2)
    with pytest.raises(ConfigError, match=r"benchmark_options: unknown option 'bogus_opt' for adapter 'file'"):
        evalpipe.evaluate("smoke", "perfect", benchmark_options={"bogus_opt": 1})
    with pytest.raises(ConfigError, match=r"runner_options: unknown option 'replly' for runner 'echo'.*'reply'"):
        evalpipe.evaluate("smoke", "perfect", runner_options={"replly": "target"})
    no_model_call(home)


# ---- shuffle on a file split ----------------------------------------------------------------------------------------
def _split(options):
    from evalpipe.core.config import SplitConfig

    return SplitConfig(key="smoke/test", benchmark="smoke", split="test", adapter="file",
                       options={"path": str(REPO / "data/smoke/test.jsonl"),
                                "columns": {"prompt": "question", "target": "answer", "id": "id"}, **options},
                       metrics=None, prompt_template=None, base_dir=REPO)


def test_file_shuffle_is_honoured_deterministic_and_keeps_the_fingerprint():
    from evalpipe.pipeline.stages import build_dataset

    plain = build_dataset(_split({}))
    a = build_dataset(_split({"shuffle": True, "seed": 1}))
    b = build_dataset(_split({"shuffle": True, "seed": 1}))
    c = build_dataset(_split({"shuffle": True, "seed": 2}))
    assert a["sample_id"].tolist() == b["sample_id"].tolist()  # deterministic
    assert a["sample_id"].tolist() != plain["sample_id"].tolist()  # honoured
    assert a["sample_id"].tolist() != c["sample_id"].tolist()  # the seed matters
    assert sorted(a["sample_id"]) == sorted(plain["sample_id"])
    # the same samples: the dataset fingerprint (order-free) does not move
    assert a.attrs["dataset_sha256"] == plain.attrs["dataset_sha256"] == c.attrs["dataset_sha256"]
    # a limit takes the first N of the shuffled order
    lim = build_dataset(_split({"shuffle": True, "seed": 1, "limit": 3}))
    assert lim["sample_id"].tolist() == a["sample_id"].tolist()[:3]


def test_file_shuffle_order_does_not_depend_on_the_row_order(tmp_path):
    from evalpipe.pipeline.stages import build_dataset

    rows = (REPO / "data/smoke/test.jsonl").read_text().splitlines()
    rev = tmp_path / "rev.jsonl"
    rev.write_text("\n".join(reversed(rows)) + "\n")
    a = build_dataset(_split({"shuffle": True, "seed": 5}))
    b = build_dataset(_split({"shuffle": True, "seed": 5, "path": str(rev)}))
    assert a["sample_id"].tolist() == b["sample_id"].tolist()


# ---- min_eligible_for_gates from the command line -------------------------------------------------------------------
TI_CONFIG = f"""\
benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {{path: "{REPO}/data/tool_integration/items.jsonl"}}
    options:
      tools: {{fixtures: "{REPO}/data/tool_integration/fixtures", allowlist: "{REPO}/data/tool_integration/allowlist.txt"}}
models:
  scripted: {{runner: replay, path: "{REPO}/data/tool_integration/predictions_scripted.jsonl"}}
"""


@pytest.mark.slow
def test_min_eligible_for_gates_from_the_command_line_changes_the_verdict(home, write_config):
    write_config(TI_CONFIG)
    r = cli("run", "--model", "scripted", "--no-progress")
    assert r.exit_code == 3 and "controls_with_integration: fail (1)" in r.output, r.output  # the header's 10
    r = cli("run", "--model", "scripted", "--no-progress", "--benchmark-option", "min_eligible_for_gates=100")
    # 12 controls, 29 eligible: fewer than 100, so no gate can pass or fail: "insufficient", never a pass
    assert r.exit_code == 0 and "controls_with_integration: insufficient" in r.output, r.output
    assert "coverage: insufficient" in r.output
    bad = cli("run", "--model", "scripted", "--no-progress", "--benchmark-option", "min_eligible_for_gates=0")
    assert bad.exit_code == 2 and "min_eligible_for_gates" in bad.output, bad.output


def test_min_eligible_for_gates_precedence_option_over_header_over_default(tmp_path):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.core.config import SplitConfig

    def split(path, **options):
        return SplitConfig(key="ti/x", benchmark="ti", split="x", adapter="tool_integration",
                           options={"path": str(path), **options}, metrics=None, prompt_template=None, base_dir=REPO)

    shipped = REPO / "data/tool_integration/items.jsonl"
    assert adapter_for(split(shipped)).header_settings()["min_eligible_for_gates"] == 10  # the header's
    a = adapter_for(split(shipped, min_eligible_for_gates=3))
    assert a.header_settings()["min_eligible_for_gates"] == 3  # the option wins
    assert {"name": "tool_integration", "min_eligible_for_gates": 3} in a.metrics()
    lines = shipped.read_text().splitlines()
    header = json.loads(lines[0])
    del header["__header__"]["min_eligible_for_gates"]
    (tmp_path / "tools.json").write_text((shipped.parent / "tools.json").read_text())
    (tmp_path / "i.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    assert adapter_for(split(tmp_path / "i.jsonl")).header_settings()["min_eligible_for_gates"] == 10  # the default


# ---- judges ---------------------------------------------------------------------------------------------------------
DS = f"""\
benchmarks:
  discoverybench:
    adapter: discoverybench
    splits: {{test: {{}}}}
    options: {{path: "{REPO}/data/discoverybench_sample"}}
models:
  perfect: {{runner: echo, reply: target}}
"""


def test_validate_catches_a_model_graded_metric_without_a_judge(home, write_config):
    p = write_config(DS)
    v = cli("validate")
    assert v.exit_code == 2, v.output
    assert f"{p}:2: benchmarks.discoverybench: metric 'llm_score' needs a judge model" in v.output, v.output
    assert "metric 'hms_score' needs a judge model" in v.output and "judges:" in v.output
    line = one_error_line(cli("run", "--model", "perfect", "--no-progress"))
    assert "needs a judge model" in line
    no_model_call(home)
    # an explicit metric list too, with the line of the metric
    p = write_config(BASE.replace("metrics: [exact_match]", "metrics: [exact_match, llm_judge]"))
    v = cli("validate")
    assert v.exit_code == 2 and f"{p}:8: benchmarks.smoke.metrics.1: metric 'llm_judge' needs a judge" in v.output
    # with a judge: fine
    write_config(DS + "judges:\n  j: {runner: echo, reply: fixed, text: '## The final answer is: True'}\n")
    assert cli("validate").exit_code == 0


def test_a_judge_without_its_api_key_is_refused_before_any_rollout(home, write_config, monkeypatch):
    monkeypatch.delenv("JUDGE_KEY_FOR_TEST", raising=False)
    write_config(BASE.replace("metrics: [exact_match]", "metrics: [exact_match, llm_judge]")
                 + "judges:\n  grader: {runner: litellm, model: openai/gpt-4o, api_key_env: JUDGE_KEY_FOR_TEST}\n")
    line = one_error_line(cli("run", "--model", "perfect", "--no-progress"))
    assert "judge 'grader' (metric llm_judge of smoke/extra)" in line and "JUDGE_KEY_FOR_TEST" in line, line
    no_model_call(home)
    import evalpipe

    with pytest.raises(ConfigError, match="JUDGE_KEY_FOR_TEST"):
        evalpipe.evaluate("smoke", "perfect")
    no_model_call(home)
    from evalpipe.repro.run_request import check_judge_keys
    from evalpipe.project import load_config

    check_judge_keys(load_config(), ["smoke/extra"], {"JUDGE_KEY_FOR_TEST": "set"})  # with the key: no complaint


# ---- declarations ---------------------------------------------------------------------------------------------------
def test_every_built_in_component_declares_its_options():
    from evalpipe.benchmarks import get_adapter, list_adapters
    from evalpipe.metrics import get_metric, list_metrics
    from evalpipe.runners import get_runner, list_runners

    def built_in(factory) -> bool:  # other test files register their own helpers in this process
        factory = getattr(factory, "_evals_inner", factory)  # (tracing wraps runner factories)
        return str(getattr(factory, "__module__", "")).startswith("evalpipe.")

    missing = [f"adapter {n}" for n in list_adapters()
               if built_in(get_adapter(n)) and getattr(get_adapter(n), "option_schema", None) is None]
    missing += [f"runner {n}" for n in list_runners()
                if built_in(get_runner(n)) and getattr(get_runner(n), "option_schema", None) is None]
    missing += [f"metric {n}" for n in list_metrics()
                if built_in(get_metric(n)) and getattr(get_metric(n), "option_schema", None) is None]
    assert not missing, missing
    assert len(list_adapters()) >= 8 and len(list_runners()) >= 5 and len(list_metrics()) >= 14


def test_an_undeclared_plugin_keeps_working_and_validate_says_so(write_config):
    from evalpipe.runners import register_runner
    from evalpipe.runners.base import Runner

    class Undeclared(Runner):
        name = "undeclared-strict-test"

    register_runner("undeclared-strict-test", Undeclared, replace=True)
    write_config(BASE + "  u: {runner: undeclared-strict-test, anything: 1}\n")
    v = cli("validate")
    assert v.exit_code == 0, v.output
    assert "runner 'undeclared-strict-test' declares no option_schema" in v.output


def test_the_option_table_in_docs_matches_the_declarations():
    import re

    from evalpipe.benchmarks import get_adapter
    from evalpipe.project.schema import COMMON_SPLIT_OPTIONS, declared_names
    from evalpipe.metrics import get_metric
    from evalpipe.runners import get_runner

    get = {"adapter": get_adapter, "runner": get_runner, "metric": get_metric}
    rows = re.findall(r"^\| (adapter|runner|metric) \| (.+?) \| (.+?) \|$", (REPO / "docs/config.md").read_text(), re.M)
    assert len(rows) > 20
    for kind, names, options in rows:
        documented = set(re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", options)))  # not the (values)
        for name in re.findall(r"`([a-z_]+)`", names):
            common = COMMON_SPLIT_OPTIONS if kind == "adapter" else set()
            assert declared_names(get[kind](name).option_schema) - common == documented, (kind, name)
