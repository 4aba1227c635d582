"""`evalpipe forget` and the `forget_model` job: a model key and everything it left go, the other models' stay."""
import hashlib
from pathlib import Path

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

# `perfect` is in the config; `parrot` is a discovered model (as the checkpoint sensor registers one), so it is not
# in the config file and can be forgotten without --force
CONFIG = smoke_benchmark({"extra": 3, "other": 2}) + """models:
  perfect: {runner: echo, reply: target}
default_models: [perfect]
"""
KEPT = ("storage", "history", "schedules", ".evalpipe-instance.lock")  # the instance's own: change with any command


def _files(home: Path) -> dict[str, str]:
    """Every file under the home but Dagster's databases (and the DuckDB view file), with its content's hash."""
    out = {}
    for f in sorted(home.rglob("*")):
        rel = f.relative_to(home)
        if f.is_file() and rel.parts[0] not in KEPT and not rel.name.startswith("warehouse.duckdb"):
            out[str(rel)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def _of(files: dict[str, str], model: str) -> dict[str, str]:
    return {k: v for k, v in files.items() if f"model={model}" in k or f"/{model}" in k or k.startswith(f"models/{model}")}


@pytest.fixture
def evaluated(home, write_config, monkeypatch):
    """perfect and parrot, each run on smoke/extra and smoke/other with the echo runner: (cli, project, instance)."""
    from eval_assets.launch import get_instance
    from evalpipe.core.config import ModelConfig
    from evalpipe.project import Project
    from evalpipe.store.models_registry import register_model

    write_config(CONFIG)
    register_model(ModelConfig(key="parrot", runner="echo"))
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--model", "perfect", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    project = Project.from_file()
    return cli, project, get_instance(project)


@pytest.mark.slow
def test_forget_removes_every_place_of_one_model_and_nothing_of_the_other(evaluated, home):
    from eval_assets.factory import build_definitions
    from evalpipe.store import partition_lock
    from evalpipe.store.warehouse import Warehouse

    cli, project, instance = evaluated
    wh = Warehouse(project.warehouse)
    before = _files(home)
    parrot = _of(before, "parrot")
    # each place holds parrot's: warehouse partitions of 2 splits, 2 journals, 2 artifact folders, its registry entry
    assert sum("model=parrot" in k for k in parrot) >= 10 and "models/parrot.json" in parrot
    assert {k for k in parrot if k.startswith("journal/")} == {"journal/rollouts/smoke%2Fextra/parrot.sqlite",
                                                              "journal/rollouts/smoke%2Fother/parrot.sqlite"}
    assert any(k.startswith("artifacts/smoke/other/parrot/") for k in parrot)

    # the dry run lists exactly what would go, and removes nothing
    r = cli("forget", "parrot", "--dry-run")
    assert r.exit_code == 0, r.output
    assert "warehouse rows: prompts 5, rollouts 5, fingerprints 2, judgements 5, metrics" in r.output
    assert "partition key: parrot" in r.output and "models/parrot.json" in r.output
    assert str(home / "journal/rollouts/smoke%2Fother/parrot.sqlite") in r.output
    assert str(home / "artifacts/smoke/extra/parrot") + " (1 run(s))" in r.output
    assert "dry run: nothing removed" in r.output
    assert _files(home) == before and set(instance.get_dynamic_partitions("model")) == {"perfect", "parrot"}

    # refused in one line, exit 2: an unknown key, an unknown split, a key of the config file (without --force)
    r = cli("forget", "nobody", "--yes")
    assert r.exit_code == 2 and "unknown model key(s) nobody" in r.output and "known: parrot, perfect" in r.output
    assert cli("forget", "parrot", "--split", "smoke/nope", "--yes").exit_code == 2
    r = cli("forget", "perfect", "--yes")
    assert r.exit_code == 2 and "--force" in r.output
    # refused while a run holds one of its partitions (exit 1): forgetting under it would leave half of it
    with partition_lock.hold("rollouts", {"benchmark_split": "smoke/extra", "model": "parrot"}, run_id="abc123"):
        r = cli("forget", "parrot", "--yes")
    assert r.exit_code == 1 and "rollouts of smoke/extra|parrot is running in run abc123" in r.output
    # asked for confirmation and not given it (no answer): nothing goes
    r = cli("forget", "parrot")
    assert r.exit_code == 1 and "It cannot be undone [y/N]" in r.output and "Aborted" in r.output
    assert _files(home) == before

    # from the UI: the forget_model job, narrowed to one split (dry run by default, then for real)
    job = build_definitions(project).get_job_def("forget_model")
    config = {"ops": {"forget_model_op": {"config": {"model": "parrot", "splits": ["smoke/other"]}}}}
    assert job.execute_in_process(run_config=config, instance=instance).success
    assert _files(home) == before
    config["ops"]["forget_model_op"]["config"]["dry_run"] = False
    assert job.execute_in_process(run_config=config, instance=instance).success
    after = _files(home)
    assert not [k for k in _of(after, "parrot") if "other" in k]  # smoke/other's rows, journal, artifacts: gone
    assert {k: v for k, v in parrot.items() if "other" not in k} == _of(after, "parrot")  # smoke/extra's stay
    assert "parrot" in instance.get_dynamic_partitions("model")  # narrowed: the key stays

    # the rest, from the command line
    r = cli("forget", "parrot", "--yes")
    assert r.exit_code == 0 and "forgotten: parrot" in r.output, r.output
    after = _files(home)
    assert _of(after, "parrot") == {}
    assert not any("parrot" in k for k in after)
    assert instance.get_dynamic_partitions("model") == ["perfect"]
    for table in ("prompts", "rollouts", "tool_calls", "fingerprints", "judgements", "metrics", "leaderboard"):
        assert set(wh.query(f"SELECT DISTINCT model FROM {table}")["model"]) <= {"perfect"}, table
    # perfect's files are byte for byte what they were; the leaderboard was rebuilt without parrot
    assert _of(after, "perfect") == _of(before, "perfect") and len(_of(before, "perfect")) >= 10
    assert {k: v for k, v in after.items() if k.startswith("warehouse/datasets/")} == \
        {k: v for k, v in before.items() if k.startswith("warehouse/datasets/")}
    board = wh.read_table("leaderboard")
    assert set(board["model"]) == {"perfect"} and set(board["rank"]) == {1}
    assert not (home / "artifacts/smoke").exists() or not list((home / "artifacts/smoke").glob("*/parrot"))
    # a forgotten key is unknown from then on
    assert cli("forget", "parrot", "--yes").exit_code == 2


def test_registry_entry_stays_while_another_try_of_the_model_remains(tmp_path):
    """`adhoc:x` serves `adhoc:x@limit5` too: forgetting one key keeps the entry until no key of that model is left."""
    from evalpipe.core.config import ModelConfig
    from evalpipe.store.forget import plan_forget
    from evalpipe.store.models_registry import registry_file
    from evalpipe.store.warehouse import Warehouse

    class Instance:  # the two calls forget makes of a Dagster instance
        def __init__(self, keys):
            self.keys = list(keys)

        def get_dynamic_partitions(self, name):
            return list(self.keys) if name == "model" else []

    home = tmp_path / "home"
    entry = registry_file("adhoc:x", home)
    entry.parent.mkdir(parents=True)
    entry.write_text(str(ModelConfig(key="adhoc:x")))
    wh = Warehouse(home / "warehouse.duckdb", store=False)

    def plan(keys, forget):
        return plan_forget(forget, home=home, warehouse=wh, artifacts_root=home / "artifacts", instance=Instance(keys))

    assert plan(["adhoc:x", "adhoc:x@limit5"], ["adhoc:x"])[0].registry is None
    assert [p.registry for p in plan(["adhoc:x", "adhoc:x@limit5"], ["adhoc:x", "adhoc:x@limit5"])] == [entry, entry]
    [p] = plan(["adhoc:x@limit5"], ["adhoc:x@limit5"])
    assert p.registry == entry and p.partition_key and p.found
    [p] = plan(["adhoc:x", "other"], ["other"])
    assert p.registry is None and p.partition_key
