import pytest

from evalpipe.project import load_config
from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key


@pytest.mark.parametrize("raw,key", [
    ("openai/gpt-4o", "openai/gpt-4o"), ("ckpt|step[100]", "ckpt-step-100"), ("  my model ", "my-model"),
    ("hf.co/org/m@rev", "hf.co/org/m@rev"),
])
def test_sanitize_key(raw, key):
    assert sanitize_key(raw) == key


def test_sanitize_key_rejects_empty():
    with pytest.raises(ValueError):
        sanitize_key("|||")


def test_splits_models_and_relative_paths(write_config):
    write_config("""
benchmarks:
  qa:
    adapter: file
    options: {path: data/x.jsonl}
    splits:
      dev: {}
      test: {limit: 3, metrics: [exact_match]}
models:
  "org/m|1": {runner: echo, params: {temperature: 0}, reply: target}
""")
    cfg = load_config()
    assert sorted(cfg.splits) == ["qa/dev", "qa/test"]
    assert cfg.splits["qa/test"].options == {"path": "data/x.jsonl", "limit": 3}
    assert cfg.splits["qa/test"].metrics == ["exact_match"] and cfg.splits["qa/dev"].metrics is None
    assert cfg.splits["qa/dev"].resolve("data/x.jsonl") == cfg.path.parent / "data" / "x.jsonl"
    m = cfg.model("org/m-1")
    assert m.runner == "echo" and m.params == {"temperature": 0} and m.options == {"reply": "target"}
    assert cfg.default_models == ["org/m-1"]


@pytest.mark.parametrize("text,needle", [
    ("benchmarks: [1, 2]", "benchmarks: must be a mapping"),
    ("benchmarks:\n  qa: {splits: [a]}", "needs an 'adapter'"),
    ("benchmarks:\n  qa: {adapter: file, colums: {}}", "unknown key"),
    ("models: {a: {runner: echo}}\ndefault_models: [b]", "default model 'b'"),
    ("benchmarks: {qa: [unclosed", "not valid YAML"),
    # run artifacts and the models registry spell '/' as '__': these two would overwrite each other's
    ("models: {org/m: {runner: echo}, org__m: {runner: echo}}", "would share the folder 'org__m'"),
])
def test_config_errors_are_one_clear_line(write_config, text, needle):
    write_config(text)
    with pytest.raises(ConfigError) as err:
        load_config()
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unknown_split_and_model_name_what_exists(write_config):
    write_config("benchmarks: {qa: {adapter: file, splits: [dev]}}\nmodels: {a: {runner: echo}}\n")
    cfg = load_config()
    with pytest.raises(ConfigError, match="configured: qa/dev"):
        cfg.split("qa/test")
    with pytest.raises(ConfigError, match="configured: a"):
        cfg.model("b")


def test_the_models_registry_refuses_a_key_that_would_replace_another(home):
    from evalpipe.core.config import ModelConfig
    from evalpipe.store.models_registry import discovered_models, register_model

    register_model(ModelConfig(key="org/m", runner="echo"))
    register_model(ModelConfig(key="org/m", runner="echo", options={"reply": "target"}))  # the same model: updated
    with pytest.raises(ConfigError, match="would replace the registered model 'org/m'"):
        register_model(ModelConfig(key="org__m", runner="echo"))
    assert discovered_models()["org/m"].options == {"reply": "target"} and "org__m" not in discovered_models()
