"""The ArtifactWriter protocol (issue 22, the GAIA harness's `ArtifactWriter`): artifact writing goes through a
writer chosen by `artifacts: {writer: ...}` (the local folder writer by default, `memory`, or `module:attribute`),
and `artifacts: {folder_name: timestamp_run_id}` names run folders `<UTC start>_<run id>`."""
import json
import re

import pytest

from evalpipe.store import artifacts
from tests.helpers.configs import smoke_benchmark

MODELS = """models:
  parrot: {runner: echo, reply: target}
"""


class RecordingWriter:
    """A third-party writer (here: in this module, named as `tests.test_artifact_writer:RecordingWriter`)."""

    def __init__(self):
        self.opened, self.files = [], {}

    def open_run(self, split_key, model_key, run_id, cfg=None, out_dir=None, started_at=None):
        self.opened.append((split_key, model_key, run_id, started_at))
        writer = self

        class Run:
            def write(self, name, text):
                writer.files[name] = writer.files.get(name, "") + text

            def commit(self):
                return f"recorded://{split_key}/{model_key}/{run_id}"

            def abort(self):
                writer.files.clear()

        return Run()


def _evaluate(instance):
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    result = evaluate(load_config(), ["smoke/extra"], ["parrot"], instance=instance)
    assert result.success, result
    return result.partitions[0].run_id


def test_memory_writer_gets_every_file_and_nothing_is_written_locally(home, write_config, instance, monkeypatch):
    from dagster import AssetKey

    write_config(smoke_benchmark(limit=3) + MODELS + "artifacts: {writer: memory}\n")
    run_id = _evaluate(instance)
    mem = artifacts._WRITERS["memory"]
    files = mem.runs[("smoke/extra", "parrot", run_id)]
    assert set(files) == set(artifacts.FILES)
    assert [json.loads(line)["sample_id"] for line in files["samples.jsonl"].splitlines()] == ["s1", "s2", "s3"]
    assert json.loads(files["manifest.json"])["run_id"] == run_id
    assert files["errors.jsonl"] == ""
    assert not (home / "artifacts").exists()  # the local folder writer was not used
    meta = instance.get_latest_materialization_event(AssetKey("metrics")).asset_materialization.metadata
    assert meta["artifacts"].value == f"memory://smoke/extra/parrot/{run_id}"
    from tests.helpers.cli import cli_in_process

    r = cli_in_process(monkeypatch)("export", "--split", "smoke/extra", "--model", "parrot", "--out", str(home / "exported"))
    assert r.exit_code == 0, r.output  # a folder named on the command line is written there, memory writer or not
    assert (home / "exported" / "samples.jsonl").read_text() == files["samples.jsonl"]


def test_a_writer_named_by_module_attribute_and_a_bad_name(write_config):
    from evalpipe.core.errors import ConfigError
    from evalpipe.project import load_config

    write_config(smoke_benchmark(limit=3) + MODELS + "artifacts: {writer: 'tests.test_artifact_writer:RecordingWriter'}\n")
    w = artifacts.artifact_writer(load_config())
    assert type(w).__name__ == "RecordingWriter" and isinstance(w, artifacts.ArtifactWriter)
    assert artifacts.artifact_writer(load_config()) is w  # one instance per process: its state is kept
    write_config(smoke_benchmark(limit=3) + MODELS + "artifacts: {writer: s3}\n")
    with pytest.raises(ConfigError, match=r"unknown writer 's3'; use local, memory"):
        artifacts.artifact_writer(load_config())
    with pytest.raises(TypeError, match="no open_run"):
        artifacts.register_artifact_writer("broken", object())


def test_write_artifacts_through_a_given_writer_from_the_api(home, write_config, instance):
    """`write_artifacts(writer=)`: the Python route, same files as the folder writer writes."""
    from evalpipe.store.warehouse import Warehouse

    write_config(smoke_benchmark(limit=3) + MODELS)
    run_id = _evaluate(instance)
    w = RecordingWriter()
    where = artifacts.write_artifacts("smoke/extra", "parrot", Warehouse(home / "warehouse.duckdb"),
                                      run={"run_id": "again", "started_at": 1.0e9}, writer=w)
    assert where == "recorded://smoke/extra/parrot/again" and w.opened == [("smoke/extra", "parrot", "again", 1.0e9)]
    on_disk = home / "artifacts" / "smoke" / "extra" / "parrot" / run_id
    assert w.files["samples.jsonl"] == (on_disk / "samples.jsonl").read_text()


def test_timestamped_run_folders_and_old_ones_stay_readable(home, write_config, instance, monkeypatch):
    from tests.helpers.cli import cli_in_process

    write_config(smoke_benchmark(limit=3) + MODELS)
    old_id = _evaluate(instance)  # an old-style folder, named by the run id
    write_config(smoke_benchmark(limit=3) + MODELS + "artifacts: {folder_name: timestamp_run_id}\n")
    new_id = _evaluate(instance)
    part = home / "artifacts" / "smoke" / "extra" / "parrot"
    names = sorted(p.name for p in part.iterdir() if not p.name.startswith(".") and p.name != "latest")
    stamped = [n for n in names if n.endswith("_" + new_id)]
    assert len(stamped) == 1 and re.fullmatch(r"\d{8}T\d{6}Z_" + re.escape(new_id), stamped[0])
    assert old_id in names  # kept, and still listed and read
    assert (part / "latest").resolve() == part / stamped[0]
    assert artifacts.read_run_dir(part)["run_id"] == new_id
    assert [p.name for p in artifacts.run_folders("smoke/extra", "parrot")] == [old_id, stamped[0]]
    r = cli_in_process(monkeypatch)("runs", "--split", "smoke/extra", "--model", "parrot")
    assert r.exit_code == 0 and stamped[0] in r.output and old_id in r.output
