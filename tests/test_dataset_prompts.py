"""The dataset and prompts stages' kernels (evalpipe/pipeline/stages.py) give the values the row-by-row construction gave:
the frames column by column, the JSON encoded one call per batch, the stored JSON read back (issue 15)."""
import hashlib
import json

import pandas as pd
import pytest

from evalpipe.core import jsontext

from evalpipe.pipeline import stages as pipeline
from evalpipe.benchmarks import adapter_for
from evalpipe.core.config import SplitConfig
from evalpipe.core.fingerprint import canonical_json, fingerprint
from evalpipe.pipeline.fingerprints import dataset_sha256

ODD = ["naïve ✓", "日本語", "🙂", "tab\t", 'quote"', "back\\slash", "new\nline", "\u2028", "", "\x00", "}, {"]
VALUES = [None, 1, -2.5, 1e16, float("nan"), True, "", *ODD, [], {}, [1, [2, {"a": None}]],
          {"z": 1, "a": {"\x00": [ODD]}, "m": [{"k": "v"}, {"\x00": 1}]}, {1: "int key"}, ("tuple", 2)]


@pytest.mark.parametrize("encode", [jsontext.ENCODER.encode, canonical_json], ids=["_json", "canonical_json"])
def test_encode_each_gives_each_value_its_own_text(encode):
    assert pipeline._encode_each(encode, VALUES) == [encode(v) for v in VALUES]
    # a value whose text holds the wrappers' cut: every value encoded alone, the same texts
    tricky = [{"a": 1}, [{"b": 2}, {"\x00": 3}], "x"]
    assert pipeline._encode_each(encode, tricky) == [encode(v) for v in tricky]
    assert pipeline._json_each([None, {"a": 1}, None, []]) == [None, '{"a": 1}', None, "[]"]


def test_loads_column_reads_what_loads_reads():
    texts = [json.dumps(v) for v in VALUES if v is not None] + [" [1] ", "{\"a\": 1}\n", None, "", 3]
    got = pipeline._loads_column(texts, dict)
    want = [pipeline._loads(t, {}) for t in texts]
    assert json.dumps(got) == json.dumps(want)  # (NaN != NaN: compared as text)
    empties = pipeline._loads_column([None, None], list)
    assert empties == [[], []] and empties[0] is not empties[1]  # a fresh default each
    for bad in ["[1", "\ufeff[1]", "1 2", "  "]:
        with pytest.raises(json.JSONDecodeError):
            pipeline._loads(bad, None)
        with pytest.raises(json.JSONDecodeError):
            pipeline._loads_column(["[]", bad], list)


@pytest.fixture
def split_with_everything(tmp_path):
    rows = []
    for i in range(60):
        row = {"id": f"s{i}-{ODD[i % len(ODD)]}", "q": f"{ODD[i % 7]} q{i}", "cat": "ab"[i % 2]}
        if i % 3:
            row["a"] = ODD[i % len(ODD)] if i % 4 else i
        if i % 5 == 0:
            row["sys"] = "Be brief ✓"
        row["opts"] = [ODD[(i + k) % len(ODD)] for k in range(i % 4)]
        if i % 2:
            row["deep"] = {"z": [1.5, None, {"\x00": ODD[:3]}], "a": i}
        rows.append(row)
    p = tmp_path / "d.jsonl"
    # (raw U+2028 would split a JSONL line, as it always did: those rows are written escaped)
    lines = [json.dumps(r, ensure_ascii=i % 2 == 0 or "\u2028" in json.dumps(r, ensure_ascii=False))
             for i, r in enumerate(rows)]
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return SplitConfig(key="e/test", benchmark="e", split="test", adapter="file",
                       options={"path": str(p), "columns": {"prompt": "q", "target": "a", "id": "id", "system": "sys",
                                                            "choices": "opts"}, "slice_by": ["cat"]},
                       metrics=None, prompt_template=None, base_dir=tmp_path)


def test_frames_are_the_row_by_row_frames(split_with_everything):
    split = split_with_everything
    adapter = adapter_for(split)
    samples = list(adapter.load())
    j = pipeline._json
    rows = [{"benchmark_split": split.key, "sample_id": s.id, "sample_index": i, "input": s.input, "target": s.target,
             "choices": j(s.choices), "system": s.system, "files": j(s.files), "metadata": j(s.metadata),
             "slices": j(adapter.slices(s)), "messages": j(s.messages), "tools": j(s.tools)}
            for i, s in enumerate(samples)]
    dataset = pipeline.build_dataset(split)
    pd.testing.assert_frame_equal(dataset, pd.DataFrame(rows, columns=pipeline.DATASET_COLUMNS))
    assert dataset.attrs["dataset_sha256"] == dataset_sha256(samples)

    prompts = pipeline.build_prompts(split, "m", dataset)
    want = []
    for s, d in zip(pipeline.samples_from_frame(dataset), rows):
        messages = adapter.build_messages(s)
        want.append({"benchmark_split": split.key, "model": "m", "sample_id": s.id, "sample_index": d["sample_index"],
                     "messages": j(messages), "prompt_text": pipeline.render_messages(messages), "target": s.target,
                     "files": d["files"], "metadata": d["metadata"], "slices": d["slices"],
                     "prompt_fingerprint": fingerprint({"messages": messages, "files": s.files}), "tools": None})
    pd.testing.assert_frame_equal(prompts, pd.DataFrame(want))
    assert pipeline.build_prompts(split, "m", dataset.iloc[:0]).empty
    empty = pipeline._dataset_frame(split, adapter, [], [])
    pd.testing.assert_frame_equal(empty, pd.DataFrame([], columns=pipeline.DATASET_COLUMNS))


def test_dataset_fingerprint_of_values_json_cannot_encode(tmp_path):
    """Records are encoded a block at a time and spilled as text: a value JSON encodes through default=str (a
    datetime, a set of one) counts as before."""
    import datetime

    from evalpipe.core.types import Sample

    samples = [Sample(id=f"{(i * 37) % 5000:05d}", input="q", metadata={"t": datetime.date(2020, 1, 1 + i % 28),
                                                                         "s": {i}, "b": b"x"})
               for i in range(5000)]
    sha = pipeline.DatasetSha(spill_rows=700)
    for s in samples:
        sha.add(s)
    want = hashlib.sha256(canonical_json(sorted((
        {"id": s.id, "input": s.input, "target": None, "choices": None, "system": None, "files": [],
         "metadata": s.metadata, "tools": None, "messages": None} for s in samples), key=lambda r: r["id"]))
        .encode("utf-8")).hexdigest()
    assert sha.hexdigest() == want == dataset_sha256(samples)
