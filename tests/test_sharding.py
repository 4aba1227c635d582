"""Stable-hash sharding (evalpipe/repro/sharding.py): membership, `evalpipe run --num-shards/--shard-index` merging into
one partition, and a partition's rollouts as N processes inside Dagster."""
import hashlib
import json
import random

import pytest
from click.testing import CliRunner

from evalpipe.project import load_config
from evalpipe.repro.sharding import merge_frames, shard_of
from evalpipe.store.warehouse import Warehouse

ROWS = [{"question": f"Capital number {i}?", "answer": f"city{i}", "category": "geo" if i % 2 else "math"}
        for i in range(40)]  # no id column: ids come from each row's content


def test_shard_is_sha256_first_8_bytes_little_endian_mod_n():
    for sid in ["a", "q17", "ünï", "x" * 100]:
        expected = int.from_bytes(hashlib.sha256(sid.encode()).digest()[:8], "little") % 7
        assert shard_of(sid, 7) == expected
    assert shard_of("a", 1) == 0


def _config(write_config, path, extra=""):
    return write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {path}}}
    options:
      columns: {{prompt: question, target: answer}}
      slice_by: [category]
    metrics: [exact_match]
models:
  perfect: {{runner: echo, reply: target{extra}}}
  parrot: {{runner: echo}}
default_models: [perfect]
""")


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_membership_is_identical_after_shuffling_the_dataset(tmp_path, write_config):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.pipeline.stages import build_dataset

    data = tmp_path / "d.jsonl"
    _write(data, ROWS)
    _config(write_config, data)
    split = load_config().split("smoke/extra")
    ids = [s.id for s in adapter_for(split).load()]
    assert len(set(ids)) == 40 and all(len(i) == 16 for i in ids)  # content-hash ids, not row numbers

    def members(rows, n=4):
        _write(data, rows)
        out = {}
        for i in range(n):
            opts = {**split.options, "num_shards": n, "shard_index": i}
            import dataclasses

            df = build_dataset(dataclasses.replace(split, options=opts))
            out[i] = set(df["sample_id"])
        return out

    before = members(ROWS)
    shuffled = list(ROWS)
    random.Random(7).shuffle(shuffled)
    after = members(shuffled)
    assert before == after
    assert set().union(*before.values()) == set(ids) and sum(len(v) for v in before.values()) == 40
    assert all(before[i] for i in range(4))  # every shard holds something at N=4, 40 samples


def test_merge_frames_refuses_duplicates():
    import pandas as pd

    a = pd.DataFrame({"sample_id": ["b", "a"], "v": [1, 2]})
    b = pd.DataFrame({"sample_id": ["c"], "v": [3]})
    assert merge_frames([a, b])["sample_id"].tolist() == ["a", "b", "c"]
    with pytest.raises(Exception, match="duplicated"):
        merge_frames([a, a])


@pytest.fixture
def cli(home):
    from evalpipe.cli.main import main

    def invoke(*args):
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_cli_shards_merge_into_the_partition_equal_to_one_pass(tmp_path, write_config, cli, home):
    data = tmp_path / "d.jsonl"
    _write(data, ROWS[:12])
    _config(write_config, data)
    one = tmp_path / "one"
    # one pass, in a separate home, for reference
    import os

    os.environ["DAGSTER_HOME"], saved = str(one), os.environ["DAGSTER_HOME"]
    one.mkdir()
    (one / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    try:
        assert cli("run", "--split", "smoke/extra", "--model", "parrot", "--no-progress").exit_code == 0
    finally:
        os.environ["DAGSTER_HOME"] = saved
    base = Warehouse(one / "warehouse.duckdb")

    r0 = cli("run", "--split", "smoke/extra", "--model", "parrot", "--no-progress", "--num-shards", "3", "--shard-index", "0")
    assert r0.exit_code == 0, r0.output
    assert "not done yet" in r0.output
    main = Warehouse(home / "warehouse.duckdb")
    assert main.query("select count(*) n from rollouts")["n"][0] == 0  # nothing merged yet
    for i in (2, 1):
        r = cli("run", "--split", "smoke/extra", "--model", "parrot", "--no-progress", "--num-shards", "3",
                "--shard-index", str(i))
        assert r.exit_code == 0, r.output
    assert "merged 3 shards into the partition" in r.output
    q = "select sample_id, status, prediction from rollouts order by sample_id"
    assert main.query(q).to_dict("records") == base.query(q).to_dict("records")
    q = "select metric, slice, value, n from metrics where slice <> 'usage' order by metric, slice"
    assert main.query(q).to_dict("records") == base.query(q).to_dict("records")
    assert main.query("select count(*) n from leaderboard")["n"][0] == 1
    # an out-of-range shard index is a usage error
    bad = cli("run", "--split", "smoke/extra", "--num-shards", "3", "--shard-index", "3")
    assert bad.exit_code == 2


def test_rollouts_as_parallel_shard_processes_inside_dagster(tmp_path, write_config, instance, home):
    from eval_assets.launch import evaluate

    data = tmp_path / "d.jsonl"
    _write(data, ROWS[:10])
    _config(write_config, data, ", rollout_shards: 2")
    r = evaluate(load_config(), ["smoke/extra"], ["perfect"], instance=instance)
    assert r.success, r
    wh = Warehouse(home / "warehouse.duckdb")
    rows = wh.query("select sample_id, status, prediction, cached from rollouts")
    assert len(rows) == 10 and set(rows["status"]) == {"ok"} and not rows["cached"].any()
    assert wh.query("select value from metrics where slice = 'all' and metric = 'exact_match'")["value"][0] == 1.0
    # the shard processes wrote the partition's one journal: a second run takes everything from it
    r = evaluate(load_config(), ["smoke/extra"], ["perfect"], instance=instance)
    assert wh.query("select count(*) n from rollouts where cached")["n"][0] == 10
