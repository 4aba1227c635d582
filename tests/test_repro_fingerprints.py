"""Fingerprints and dataset headers (evalpipe/pipeline/fingerprints.py): computed, recorded, and failing on drift."""
import json
import random

import pytest

from evalpipe.pipeline import fingerprints
from evalpipe.project import load_config
from evalpipe.core.errors import DataError
from evalpipe.store.warehouse import Warehouse

ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i), "category": "math"} for i in range(6)]


def _jsonl(path, rows, header=None):
    lines = ([json.dumps(header)] if header is not None else []) + [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _config(write_config, data_path, extra_options=""):
    return write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {data_path}}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
      {extra_options}
    metrics: [exact_match]
models:
  perfect: {{runner: echo, reply: target}}
  parrot: {{runner: echo}}
default_models: [perfect]
""")


def _load(split_key="smoke/extra"):
    from evalpipe.benchmarks import adapter_for

    a = adapter_for(load_config().split(split_key))
    return a, list(a.load())


def test_header_line_is_read_not_loaded_as_a_sample_and_pins_the_content(tmp_path, write_config):
    data = _jsonl(tmp_path / "d.jsonl", ROWS)
    _config(write_config, data)
    _, samples = _load()
    header = fingerprints.make_header(samples, gates={"min_exact_match": 0.5})
    _jsonl(data, ROWS, header)
    adapter, again = _load()
    assert [s.id for s in again] == [r["id"] for r in ROWS]  # the header is not a sample
    h = adapter.header()
    assert h["dataset_sha256"] == fingerprints.dataset_sha256(samples) and h["version"] == 1
    assert h["gates"] == {"min_exact_match": 0.5}
    # the same samples in another order have the same fingerprint; other content has another
    shuffled = list(samples)
    random.Random(1).shuffle(shuffled)
    assert fingerprints.dataset_sha256(shuffled) == h["dataset_sha256"]
    samples[0].target = "wrong"
    assert fingerprints.dataset_sha256(samples) != h["dataset_sha256"]
    assert len(h["dataset_sha256"]) == 64


def test_a_header_after_the_first_line_is_an_error(tmp_path, write_config):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"__header__": {"version": 1}}) + "\n")
    _config(write_config, data)
    with pytest.raises(DataError, match="line 2: a '__header__' line may only be the first line"):
        _load()


def test_sidecar_header_for_csv(tmp_path, write_config):
    import pandas as pd

    data = tmp_path / "d.csv"
    pd.DataFrame(ROWS).to_csv(data, index=False)
    _config(write_config, data)
    _, samples = _load()
    (tmp_path / "d.csv.header.json").write_text(json.dumps(fingerprints.make_header(samples)))
    adapter, _ = _load()
    assert adapter.header()["dataset_sha256"] == fingerprints.dataset_sha256(samples)


def test_build_dataset_fails_with_one_line_diff_unless_told_not_to(tmp_path, write_config):
    from evalpipe.pipeline.stages import build_dataset

    data = _jsonl(tmp_path / "d.jsonl", ROWS, {"__header__": {"fingerprints": {"dataset_sha256": "ab" * 32}}})
    _config(write_config, data)
    with pytest.raises(DataError) as err:
        build_dataset(load_config().split("smoke/extra"))
    msg = str(err.value)
    assert len(msg.splitlines()) == 1
    assert msg.startswith("fingerprint mismatch for smoke/extra: dataset_sha256 header abababababab != loaded ")
    assert "fail_on_fingerprint_mismatch: false" in msg
    _config(write_config, data, "fail_on_fingerprint_mismatch: false")
    df = build_dataset(load_config().split("smoke/extra"))
    assert len(df) == 6 and df.attrs["fingerprint_mismatches"][0][0] == "dataset_sha256"


def test_runner_and_model_fingerprints_change_with_what_changes_answers():
    from evalpipe.core.config import ModelConfig

    m = ModelConfig(key="m", runner="litellm", model="openai/x", params={"temperature": 0})
    base_r, base_m = fingerprints.runner_fingerprint(m, None), fingerprints.model_fingerprint(m, {"a": 1})
    # concurrency/timeouts/experiment labels change nothing; a wrapper, a runner setting, decoding params do
    same = m.with_overrides(options={"concurrency": 9, "timeout_s": 5, "experiment": "x"})
    assert fingerprints.runner_fingerprint(same, None) == base_r
    assert fingerprints.runner_fingerprint(m, "f" * 64) != base_r
    assert fingerprints.runner_fingerprint(m.with_overrides(options={"reply": "target"}), None) != base_r
    assert fingerprints.model_fingerprint(m.with_overrides(params={"temperature": 0.7}), {"a": 1}) != base_m
    assert fingerprints.model_fingerprint(m.with_overrides(params={"seed": 3}), {"a": 1}) != base_m


def test_partition_fingerprints_recorded_mismatch_fails_and_changes_show_in_the_ui(tmp_path, write_config, instance, home):
    from dagster import AssetKey

    from eval_assets.launch import evaluate
    from resources import ModelRunnerResource

    data = _jsonl(tmp_path / "d.jsonl", ROWS)
    _config(write_config, data)
    cfg = load_config()
    r = evaluate(cfg, ["smoke/extra"], ["perfect"], instance=instance)
    assert r.success, r
    wh = Warehouse(home / "warehouse.duckdb")
    fp = wh.query("select * from fingerprints").to_dict("records")
    assert len(fp) == 1 and fp[0]["model"] == "perfect"
    _, samples = _load()
    assert fp[0]["dataset_sha256"] == fingerprints.dataset_sha256(samples)
    assert len(fp[0]["runner_fingerprint"]) == 64 and len(fp[0]["model_fingerprint"]) == 64
    assert fp[0]["prompt_wrapper_sha256"] is None and fp[0]["tokenizer_fingerprint"] is None
    ev = instance.get_latest_materialization_event(AssetKey("rollouts")).asset_materialization.metadata
    assert ev["fp_runner_fingerprint"].value == fp[0]["runner_fingerprint"]
    assert "first materialization" in ev["fingerprints_changed"].value
    manifest = json.loads((home / "artifacts" / "smoke" / "extra" / "perfect" / "latest" / "manifest.json").read_text())
    assert manifest["fingerprints"]["runner_fingerprint"] == fp[0]["runner_fingerprint"]

    # another runner setting: the re-materialization says which fingerprint changed
    r = evaluate(cfg, ["smoke/extra"], ["perfect"], instance=instance,
                 resources={"model_runner": ModelRunnerResource(options={"reply": "fixed", "text": "4"})})
    assert r.success
    ev = instance.get_latest_materialization_event(AssetKey("rollouts")).asset_materialization.metadata
    assert "runner_fingerprint: " in ev["fingerprints_changed"].value
    assert "model_fingerprint" not in ev["fingerprints_changed"].value

    # the data drift away from their header: the run fails with the one-line diff, before any model call
    _jsonl(data, ROWS, {"__header__": {"dataset_sha256": "cd" * 32, "tool_registry_sha256": None}})
    r = evaluate(cfg, ["smoke/extra"], ["parrot"], instance=instance)
    assert not r.success
    assert "fingerprint mismatch for smoke/extra: dataset_sha256 header cdcdcdcdcdcd != loaded" in r.partitions[0].error
    assert wh.query("select count(*) n from rollouts where model = 'parrot'")["n"][0] == 0


def test_tokenizer_fingerprint_of_a_local_model_folder_and_the_header_check(tmp_path, write_config):
    from evalpipe.core.config import ModelConfig

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (folder / "model.safetensors").write_bytes(b"weights")
    m = ModelConfig(key="ckpt", runner="local", model=str(folder))
    tok = fingerprints.tokenizer_fingerprint(m)
    assert tok and len(tok) == 64
    (folder / "model.safetensors").write_bytes(b"other weights")  # weights are not the tokenizer
    assert fingerprints.tokenizer_fingerprint(m) == tok
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')
    assert fingerprints.tokenizer_fingerprint(m) != tok
    assert fingerprints.tokenizer_fingerprint(ModelConfig(key="x", runner="echo")) is None

    # the partition stage compares the header's tokenizer with the model's, before any model call
    data = _jsonl(tmp_path / "d.jsonl", ROWS, {"__header__": {"tokenizer_fingerprint": tok}})
    _config(write_config, data)

    class Runner:
        def identity(self):
            return {"runner": "local", "checkpoint": "sig"}

    split = load_config().split("smoke/extra")
    with pytest.raises(DataError, match=r"smoke/extra x ckpt: tokenizer_fingerprint header \w{12} != loaded"):
        fingerprints.compute_for_partition(split, m, Runner(), "d" * 64)
    warned = []
    _config(write_config, data, "fail_on_fingerprint_mismatch: false")
    fps, mism = fingerprints.compute_for_partition(load_config().split("smoke/extra"), m, Runner(), "d" * 64,
                                                   warned.append)
    assert mism[0][0] == "tokenizer_fingerprint" and "ignored" in warned[0]
    assert fps["tokenizer_fingerprint"] == fingerprints.tokenizer_fingerprint(m)  # the model's own is recorded


def test_cli_fails_on_drift_and_the_flag_runs_anyway(tmp_path, write_config, home):
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    data = _jsonl(tmp_path / "d.jsonl", ROWS, {"__header__": {"dataset_sha256": "ef" * 32}})
    _config(write_config, data)
    r = CliRunner().invoke(main, ["run", "--split", "smoke/extra", "--model", "perfect", "--no-progress"])
    assert r.exit_code == 1 and "fingerprint mismatch for smoke/extra: dataset_sha256 header efefefefefef" in r.output
    r = CliRunner().invoke(main, ["run", "--split", "smoke/extra", "--model", "perfect", "--no-progress",
                                  "--no-fail-on-fingerprint-mismatch"])
    assert r.exit_code == 0, r.output
    h = CliRunner().invoke(main, ["dataset-header", "--split", "smoke/extra"])
    assert h.exit_code == 0
    _jsonl(data, ROWS, json.loads(h.output))  # the header the CLI prints makes the data pass again
    r = CliRunner().invoke(main, ["run", "--split", "smoke/extra", "--model", "perfect", "--no-progress"])
    assert r.exit_code == 0, r.output
