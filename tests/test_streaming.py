"""Bounded memory (issue 15, docs/scale.md): partitions are written and read batch by batch, and a whole run never
hands any stage more than one batch of samples. Real Dagster runs, real Parquet files, real SQLite journals."""
import json

import numpy as np
import pandas as pd
import pytest

import eval_assets.launch  # noqa: F401  (the partitions load from the test config: smoke/test is one of them)
from evalpipe.core.errors import WarehouseError
from evalpipe.store.warehouse import Warehouse

P = {"benchmark_split": "b/test", "model": "m"}


def _rollouts(ids, status="ok"):
    return pd.DataFrame({"sample_id": ids, "status": status, "prediction": [f"p-{i}" for i in ids]})


# ---- the partition writer and reader ----------------------------------------------------------------------------
def test_writer_appends_batches_and_puts_the_file_in_place_only_on_close(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", _rollouts(["old"]), P)
    with wh.writer("rollouts", P) as out:
        out.write(_rollouts(["a", "b"]))
        out.write(_rollouts(["c"]))
        # while the new version is being written, readers see the old one whole
        assert wh.read("rollouts", P)["sample_id"].tolist() == ["old"]
        assert len(list(wh.partition_file("rollouts", P).parent.glob(".*.tmp"))) == 1
    reader = wh.reader("rollouts", P)
    assert len(reader) == 3 and out.rows == 3
    assert [b["sample_id"].tolist() for b in reader.batches(2, ["sample_id"])] == [["a", "b"], ["c"]]
    first = next(reader.batches(2, ["sample_id", "prediction", "no_such_column"]))
    assert list(first.columns) == ["sample_id", "prediction", "no_such_column"] and first["no_such_column"].isna().all()
    assert not list(wh.root.rglob("*.tmp"))
    assert wh.query("select count(*) n from rollouts")["n"][0] == 3  # the DuckDB views see it


def test_writer_masks_the_cells_redact_frame_masks_and_keeps_every_other_value(tmp_path, monkeypatch):
    """The writer checks each text column in one scan and redacts only the cells that could hold a secret: the file
    holds exactly what `redact_frame` (every cell through the redactor) and the Python-object conversion give."""
    import pyarrow as pa

    from evalpipe.core.redact import redact_frame
    from evalpipe.core.schema import TABLES

    monkeypatch.setenv("MY_SERVICE_TOKEN", "another-plain-value-7")
    texts = ["plain", "key sk-proj-abcdefghijklmnop1234", '{"api_key": "zzzzzzzz"}', "password=hunter22", None,
             "env another-plain-value-7", "ünï ✓", "login(password='abc12345')", "https://u:pw1234@h/x", np.nan]
    n = len(texts)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "status": texts, "error": texts[::-1],
                       "raw_output": texts,  # model output: known secrets only, `password=` guesses kept
                       "latency_s": [0.5, np.nan] * (n // 2), "input_tokens": list(range(n)),
                       "output_tokens": pd.array([1, None] * (n // 2), dtype="Int64"), "attempts": [1.0] * n,
                       "cached": [True, None] * (n // 2)})
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", df, P)
    expected = redact_frame(df.assign(**P))
    schema = TABLES["rollouts"]
    want = pa.Table.from_arrays(
        [pa.array(expected[f.name].astype(object).where(expected[f.name].notna(), None).tolist(), type=f.type)
         if f.name in expected else pa.nulls(n, f.type) for f in schema], schema=schema)
    got = wh.reader("rollouts", P)
    assert got.to_pandas().equals(want.to_pandas())
    text = got.to_pandas()
    assert "sk-proj-abcdefghijklmnop1234" not in str(text.to_dict()) and "another-plain-value-7" not in str(text.to_dict())
    assert "login(password='abc12345')" in text["raw_output"].tolist()  # model output is scored as written


def test_an_error_while_writing_keeps_the_previous_partition(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", _rollouts(["old"]), P)
    with pytest.raises(RuntimeError, match="stage failed"):
        with wh.writer("rollouts", P) as out:
            out.write(_rollouts(["a", "b"]))
            raise RuntimeError("stage failed")
    assert wh.read("rollouts", P)["sample_id"].tolist() == ["old"]
    assert not list(wh.root.rglob("*.tmp"))
    with pytest.raises(WarehouseError, match="partition is model='m'"):  # rows of another partition: refused
        with wh.writer("rollouts", P) as out:
            out.write(_rollouts(["x"]).assign(model="other"))
    assert wh.read("rollouts", P)["sample_id"].tolist() == ["old"]


def test_an_empty_partition_reads_as_one_empty_batch_with_its_columns(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    with wh.writer("rollouts", P):
        pass
    batches = list(wh.reader("rollouts", P).batches(10, ["sample_id", "status"]))
    assert len(batches) == 1 and batches[0].empty and list(batches[0].columns) == ["sample_id", "status"]


def test_a_damaged_partition_file_is_named_with_how_to_fix_it(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("rollouts", _rollouts(["a"]), P)
    wh.partition_file("rollouts", P).write_bytes(b"PAR1 not really parquet")
    with pytest.raises(WarehouseError, match=r"damaged rollouts partition file .*part.parquet .*re-materialize it "
                                             r"\(evalpipe run --split b/test --model m\)"):
        wh.reader("rollouts", P)


def test_object_storage_writer_uploads_one_object_on_close(tmp_path):
    pytest.importorskip("fsspec")
    from evalpipe.store.objects import ObjectStore

    store = ObjectStore("memory://evalpipe-streaming-test/wh")
    wh = Warehouse(tmp_path / "warehouse.duckdb", store=store)
    with wh.writer("rollouts", P) as out:
        out.write(_rollouts(["a", "b"]))
        assert not wh.partition_file("rollouts", P).exists()  # nothing visible before close
        out.write(_rollouts(["c"]))
    assert str(out.path) == "memory://evalpipe-streaming-test/wh/rollouts/benchmark_split=b%2Ftest/model=m/part.parquet"
    assert [b["sample_id"].tolist() for b in wh.reader("rollouts", P).batches(2)] == [["a", "b"], ["c"]]
    with pytest.raises(RuntimeError):
        with wh.writer("rollouts", P) as out:
            out.write(_rollouts(["z"]))
            raise RuntimeError("boom")
    assert wh.read("rollouts", P)["sample_id"].tolist() == ["a", "b", "c"]
    store.fs.rm("/evalpipe-streaming-test", recursive=True)


def test_cursor_hands_out_rows_side_by_side_and_copes_with_another_order(tmp_path):
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    ids = [f"s{i}" for i in range(10)]
    wh.write("rollouts", _rollouts(ids), P)
    cur = wh.reader("rollouts", P).cursor(["prediction"], batch_rows=3)
    got = [cur.take(ids[lo:lo + 4])["sample_id"].tolist() for lo in range(0, 10, 4)]
    assert got == [ids[0:4], ids[4:8], ids[8:10]] and cur.in_order
    wh.write("rollouts", _rollouts(list(reversed(ids))), P)  # not in prompt order: found all the same
    cur = wh.reader("rollouts", P).cursor(["prediction"], batch_rows=3)
    first = cur.take(ids[0:4])
    assert sorted(first["sample_id"]) == ids[0:4] and not cur.in_order
    assert sorted(cur.take(ids[4:8])["sample_id"]) == ids[4:8]


# ---- kernels that must give the numbers they gave on whole partitions ---------------------------------------------
def test_chunked_bootstrap_draws_exactly_the_one_shot_resamples(monkeypatch):
    import importlib

    agg = importlib.import_module("evalpipe.metrics.aggregate")  # (the package exports a function of that name)
    values = np.random.default_rng(3).random(2001)
    rng = np.random.default_rng(11)  # what bootstrap_ci drew before: one (1000, n) index array
    stats = values[rng.integers(0, len(values), size=(agg.BOOTSTRAP_RESAMPLES, len(values)))].mean(axis=1)
    want = tuple(float(x) for x in np.quantile(stats, [0.025, 0.975]))
    monkeypatch.setattr(agg, "RESAMPLE_CHUNK", 7 * len(values))  # 7 resamples per draw (143 draws, the last short)
    assert agg.bootstrap_ci(values, 11) == want


def test_dataset_fingerprint_streamed_with_spills_equals_the_sorted_whole():
    from evalpipe.pipeline.fingerprints import dataset_sha256
    from evalpipe.pipeline.stages import DatasetSha
    from evalpipe.core.types import Sample

    samples = [Sample(id=f"id-{(i * 7919) % 1000}\t\"x\"", input=f"q{i}", target=str(i), metadata={"k": i})
               for i in range(1000)]
    sha = DatasetSha(spill_rows=64)  # 16 sorted runs on disk, merged
    for s in samples:
        sha.add(s)
    assert sha.hexdigest() == dataset_sha256(samples)


# ---- a whole run holds one batch at a time --------------------------------------------------------------------------
N, BATCH = 2000, 150


@pytest.fixture
def scale_config(tmp_path, write_config):
    data = tmp_path / "scale.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i:05d}", "question": f"What is {i} plus {i}?", "answer": str(2 * i),
                                        "category": "ab"[i % 2]}) + "\n" for i in range(N)))
    return write_config(f"""
stream_batch_rows: {BATCH}
benchmarks:
  smoke:
    adapter: file
    splits: {{test: {{path: {data}}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}, slice_by: [category]}}
    metrics: [exact_match]
models:
  echo: {{runner: echo, reply: target}}
artifacts: {{enabled: true}}
""")


def test_a_run_never_hands_a_stage_more_than_one_batch(scale_config, instance, home, monkeypatch):
    from eval_assets.launch import evaluate
    from evalpipe.store import artifacts
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.store.warehouse import PartitionReader

    seen: dict[str, list[int]] = {}

    def spy(name, fn, size):
        def wrapped(*a, **k):
            seen.setdefault(name, []).append(size(a, k))
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(pipeline, "_dataset_frame", spy("dataset", pipeline._dataset_frame, lambda a, k: len(a[2])))
    monkeypatch.setattr(pipeline, "build_prompts", spy("prompts", pipeline.build_prompts, lambda a, k: len(a[2])))
    monkeypatch.setattr(pipeline.RolloutSession, "run", spy("rollouts", pipeline.RolloutSession.run,
                                                             lambda a, k: len(a[1])))
    monkeypatch.setattr(pipeline, "judge", spy("judge", pipeline.judge, lambda a, k: max(len(a[1]), len(a[2]))))
    monkeypatch.setattr(artifacts, "stream_samples", spy("artifacts", artifacts.stream_samples,
                                                         lambda a, k: a[4]))  # its batch_rows
    whole = []  # nothing reads a whole per-sample partition (the metrics stage reads some columns, compactly)
    monkeypatch.setattr(PartitionReader, "to_pandas", spy("to_pandas", PartitionReader.to_pandas,
                                                          lambda a, k: (a[0].table, tuple(a[1] or ()))))
    cfg = load_config()
    result = evaluate(cfg, ["smoke/test"], ["echo"], instance=instance)
    assert result.success, result
    expected = [BATCH] * (N // BATCH) + [N % BATCH]
    for stage in ("dataset", "prompts", "rollouts", "judge"):
        assert seen[stage] == expected, (stage, seen[stage])
    assert seen["artifacts"] == [BATCH]
    whole = [t for t in seen.get("to_pandas", []) if t[0] in ("datasets", "prompts", "rollouts", "judgements")]
    assert all(cols for _, cols in whole), whole  # only chosen columns, never a whole per-sample table
    wh = Warehouse(home / "warehouse.duckdb")
    m = wh.query("select slice, value, n from metrics where metric = 'exact_match' order by slice")
    assert m.to_dict("records") == [{"slice": "all", "value": 1.0, "n": N}, {"slice": "category=a", "value": 1.0,
                                     "n": N // 2}, {"slice": "category=b", "value": 1.0, "n": N // 2}]
    order = wh.query("select sample_id from rollouts")["sample_id"].tolist()
    assert order == [f"s{i:05d}" for i in range(N)]  # prompt order kept through every batch
    folder = next((home / "artifacts").rglob("latest"))
    lines = (folder / "samples.jsonl").read_text().splitlines()
    assert len(lines) == N and json.loads(lines[-1])["scores"]["exact_match"]["score"] == 1.0
    # a second run is answered from the journal, batch by batch
    again = evaluate(cfg, ["smoke/test"], ["echo"], instance=instance)
    assert again.success
    assert wh.query("select count(*) n from rollouts where cached")["n"][0] == N


def test_rollout_fingerprints_are_the_canonical_ones(write_config, tmp_path):
    """rollout_requests builds the journal key's canonical JSON around the runner's, made once: the same values."""
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.core.fingerprint import fingerprint
    from evalpipe.runners import build_runner

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": f"é{i}\"", "question": f"q{i}", "answer": "a"}) + "\n" for i in range(3)))
    write_config(f"""
benchmarks:
  b: {{adapter: file, splits: {{test: {{path: {data}}}}}, options: {{columns: {{prompt: question, target: answer, id: id}}}}}}
models:
  m: {{runner: echo, reply: target, params: {{temperature: 0.5}}}}
""")
    cfg = load_config()
    split, model = cfg.split("b/test"), cfg.model("m")
    runner = build_runner(model)
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    got = [r.fingerprint for r in pipeline.rollout_requests(runner, prompts)]
    want = [fingerprint({"runner": runner.identity(), "prompt": p, "sample": s})
            for p, s in zip(prompts["prompt_fingerprint"], prompts["sample_id"])]
    assert got == want
