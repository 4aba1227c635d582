"""One try rule for every entry point (issue 30 item 2; evalpipe/project/tries.py): a limit, a `levels`/`max_n`
subset, sample ids, or a dataset that differs from the configured split of the same key is evaluated under a try
key, never over a configured partition or its shared `dataset` partition, and is never ranked. Each test runs the
real thing first, then the try, and checks that the real split's dataset rows and leaderboard are unchanged and
that the try reads back as a try."""
import asyncio
from pathlib import Path

import pytest

import evalpipe

REPO = Path(__file__).resolve().parents[1]
ROWS = [{"id": f"r{i}", "input": f"{i} + {i}", "target": str(2 * i)} for i in range(5)]


def _wh():
    from evalpipe.project import Project
    from evalpipe.store.warehouse import Warehouse

    return Warehouse(Project.from_file().warehouse)


def _dataset_rows(split: str) -> int:
    return int(_wh().query("SELECT count(*) AS n FROM datasets WHERE benchmark_split = ?", [split])["n"][0])


def _board(split: str) -> list[tuple[str, int]]:
    board = _wh().query("SELECT model, n FROM leaderboard WHERE benchmark_split = ? ORDER BY model", [split])
    return sorted(set(zip(board["model"], board["n"].astype(int))))


def doubler(sample) -> str:
    a = sample.question.split()[0]
    return str(2 * int(a))


def test_evaluate_records_with_a_limit_is_a_try(home):
    full = evalpipe.evaluate(agent=doubler, dataset=ROWS, name="x", metrics=["exact_match"])
    assert full.success and full.partitions == [("x/test", "doubler")]
    tried = evalpipe.evaluate(agent=doubler, dataset=ROWS, name="x", metrics=["exact_match"], limit=2)
    assert tried.success, tried.errors
    assert tried.partitions == [("x/test", "doubler@limit2")] and len(tried.samples) == 2
    assert _dataset_rows("x/test") == 5  # the split's dataset keeps every row
    assert _board("x/test") == [("doubler", 5)]  # the try is not ranked beside the full run
    assert set(tried.metrics["try"]) == {"limit"} and set(full.metrics["try"]) == {None}


def test_a_limit_inside_a_dataset_entry_is_the_same_try(home):
    entry = {"adapter": "records", "splits": ["test"]}
    evalpipe.evaluate(agent=doubler, dataset=ROWS, name="y", metrics=["exact_match"])
    from evalpipe.api.python import dataset_entry

    bench, entry = dataset_entry(ROWS, {}, REPO, None, "y")
    entry["options"]["limit"] = 3
    tried = evalpipe.evaluate(agent=doubler, dataset=entry, name="y", metrics=["exact_match"])
    assert tried.partitions == [("y/test", "doubler@limit3")]
    assert _dataset_rows("y/test") == 5 and _board("y/test") == [("doubler", 5)]


def run_task(task):
    return "FINAL ANSWER: 4"


def test_gaia_levels_and_max_n_are_a_try_on_a_split_of_their_own(home):
    full = asyncio.run(evalpipe.GAIA().run(run_task))
    assert full.success and full.partitions == [("gaia/validation", "run_task")]
    assert _dataset_rows("gaia/validation") == 29
    sub = asyncio.run(evalpipe.GAIA().run(run_task, level=[1, 2], max_n=3))
    assert sub.success, sub.errors
    [(split, model)] = sub.partitions
    assert split.startswith("gaia@subset-") and split.endswith("/validation") and model.startswith("run_task@subset-")
    assert len(sub.samples) == 6 and set(sub.metrics["try"]) == {"subset"}
    assert _dataset_rows("gaia/validation") == 29  # the shared dataset is untouched
    assert _board("gaia/validation") == [("run_task", 29)]
    assert not [m for m in _wh().query("SELECT model FROM leaderboard")["model"] if "@" in m]


def test_evaluator_with_a_registry_dataset_limit_is_a_try(home):
    from evalpipe.api.wrappers import DatasetRegistry, Evaluator

    daeval = DatasetRegistry.load("daeval", path=str(REPO / "data" / "daeval_sample"))
    full = Evaluator(dataset=daeval.load(split="validation")).evaluate(doubler_text)
    assert full.partitions == [("daeval/validation", "doubler_text")]
    assert _dataset_rows("daeval/validation") == 5
    board = _board("daeval/validation")
    assert {m for m, _ in board} == {"doubler_text"}
    tried = Evaluator(dataset=daeval.load(split="validation", limit=3)).evaluate(doubler_text)
    assert tried.partitions == [("daeval/validation", "doubler_text@limit3")] and len(tried.samples) == 3
    assert _dataset_rows("daeval/validation") == 5 and _board("daeval/validation") == board


def doubler_text(sample) -> str:
    return "@answer[1]"


def test_a_dataset_that_differs_from_the_configured_split_gets_its_own_split_key(home, tmp_path):
    """The test config's `gaia` reads data/gaia_sample; a GAIA folder elsewhere under the same name is a try."""
    import shutil

    evalpipe.evaluate(benchmarks=["gaia/validation"], models=["parrot"])
    assert _dataset_rows("gaia/validation") == 29
    other = tmp_path / "gaia_copy"
    shutil.copytree(REPO / "data" / "gaia_sample", other)
    res = asyncio.run(evalpipe.GAIA(path=other).run(run_task, name="gaia"))
    assert res.success, res.errors
    [(split, model)] = res.partitions
    assert split.startswith("gaia@subset-") and model.startswith("run_task@subset-")
    assert _dataset_rows("gaia/validation") == 29 and [m for m, _ in _board("gaia/validation")] == ["parrot"]


def test_evaluate_configured_refuses_a_subset_option_and_keeps_a_limit_apart(home):
    full = evalpipe.evaluate(benchmarks=["gaia/validation"], models=["parrot"])
    assert full.success
    with pytest.raises(evalpipe.ConfigError, match="levels"):
        evalpipe.evaluate(benchmarks=["gaia/validation"], models=["parrot"], benchmark_options={"levels": [1]})
    tried = evalpipe.evaluate(benchmarks=["gaia/validation"], models=["parrot"], limit=4)
    assert [p.model for p in tried.partitions] == ["parrot@limit4"] and set(tried.metrics["try"]) == {"limit"}
    assert _dataset_rows("gaia/validation") == 29 and _board("gaia/validation") == [("parrot", 29)]


def test_cli_sample_ids_try_leaves_the_split_and_board_alone(home, monkeypatch):
    from tests.helpers.cli import cli_in_process

    cli = cli_in_process(monkeypatch)
    r = cli("run", "--benchmark", "gaia", "--split", "validation", "--model", "parrot", "--no-progress")
    assert r.exit_code == 0, r.output
    ids = list(_wh().query("SELECT sample_id FROM datasets WHERE benchmark_split = 'gaia/validation' "
                           "ORDER BY sample_index LIMIT 2")["sample_id"])
    r = cli("run", "--benchmark", "gaia", "--split", "validation", "--model", "parrot", "--no-progress",
            *[a for i in ids for a in ("--sample-id", i)])
    assert r.exit_code == 0, r.output
    assert _dataset_rows("gaia/validation") == 29 and _board("gaia/validation") == [("parrot", 29)]
    tried = [m for m in _wh().query("SELECT DISTINCT model FROM metrics")["model"] if m.startswith("parrot@ids-")]
    assert len(tried) == 1
    from partitions import try_kind

    assert try_kind(tried[0]) == "ids"


def test_a_subset_key_reads_as_a_try(home):
    from evalpipe.core.run_marks import is_limited, is_try_run
    from partitions import try_kind

    assert is_limited("m@subset-0123456789ab") and is_try_run("m@subset-0123456789ab")
    assert try_kind("m@subset-0123456789ab") == "subset"
    assert not is_limited("m@subsetting")


def test_checkpoint_sensor_never_makes_a_try_key_of_a_checkpoint(tmp_path, write_config, instance, capfd):
    """A checkpoint folder named like a try (`step@limit2`) would be evaluated on 2 samples and never ranked: the
    sensor skips it with a line saying why."""
    from dagster import build_sensor_context

    from eval_assets.sensors import checkpoint_sensor
    from evalpipe.project import Project
    from tests.test_sensors import CONFIG, _apply, _hf_checkpoint

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    write_config(CONFIG.format(repo="{repo}", ckpts=ckpts, registry=tmp_path / "models.yaml"))
    _hf_checkpoint(ckpts / "step@limit2")
    _hf_checkpoint(ckpts / "step-200")

    def tick(cursor=None):
        with build_sensor_context(instance=instance, cursor=cursor) as ctx:
            return checkpoint_sensor(Project.from_file())(ctx)

    cursor = _apply(instance, tick())
    capfd.readouterr()
    r2 = tick(cursor)
    assert "step@limit2" in capfd.readouterr().err
    keys = [k for req in r2.dynamic_partitions_requests or [] if req.partitions_def_name == "model"
            for k in req.partition_keys]
    assert keys == ["step-200"]


def test_a_configured_model_key_that_reads_as_a_try_is_refused_by_validate(tmp_path):
    """A model named like a try (`m@limit3`) would be evaluated on 3 samples and never ranked: refused at file:line."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.project.schema import validate_file

    cfg = tmp_path / "evals.yaml"
    cfg.write_text("benchmarks:\n  b:\n    adapter: file\n    splits: {t: {path: x.jsonl}}\n"
                   "models:\n  m@limit3: {runner: echo}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"evals.yaml:\d+: .*'m@limit3' reads as a try"):
        validate_file(cfg)
