"""The generic `file` adapter: each file type, the column mapping, templates, and every bad input."""
import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import ConfigError, DataError

ROWS = [
    {"qid": "q1", "question": "Capital of France?", "answer": "Paris", "topic": "geo", "sys": "Be brief.",
     "opts": ["Paris", "Rome"]},
    {"qid": "q2", "question": "2 + 2?", "answer": "4", "topic": "math", "sys": "Be exact.", "opts": ["3", "4"]},
]
MAPPING = {"prompt": "question", "target": "answer", "id": "qid", "system": "sys", "choices": "opts"}


def split(path, columns=None, prompt_template=None, base_dir=None, metrics=None, **options) -> SplitConfig:
    opts = {"path": str(path), **({"columns": columns} if columns is not None else {}), **options}
    return SplitConfig(key="mine/test", benchmark="mine", split="test", adapter="file", options=opts,
                       metrics=metrics, prompt_template=prompt_template,
                       base_dir=Path(base_dir or Path(path).parent))


def load(path, columns=MAPPING, **kw):
    return list(adapter_for(split(path, columns, **kw)).load())


def write(tmp_path: Path, kind: str, rows=ROWS) -> Path:
    p = tmp_path / f"data.{kind}"
    if kind == "jsonl":
        p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif kind == "json":
        p.write_text(json.dumps(rows), encoding="utf-8")
    elif kind in ("csv", "tsv"):
        df = pd.DataFrame([{**r, "opts": json.dumps(r["opts"])} for r in rows])
        df.to_csv(p, index=False, sep="," if kind == "csv" else "\t")
    elif kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), p)
    return p


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "tsv", "parquet"])
def test_each_file_type_gives_the_same_samples(tmp_path, kind):
    samples = load(write(tmp_path, kind))
    assert [(s.id, s.input, s.target, s.system, s.choices) for s in samples] == [
        ("q1", "Capital of France?", "Paris", "Be brief.", ["Paris", "Rome"]),
        ("q2", "2 + 2?", "4", "Be exact.", ["3", "4"]),
    ]
    assert [s.metadata for s in samples] == [{"topic": "geo"}, {"topic": "math"}]


def test_defaults_content_hash_ids_and_numbers_as_text(tmp_path):
    # no id column: the id is the stable hash of the row's canonical JSON (not its position: see test_sharding.py)
    import hashlib

    p = tmp_path / "d.jsonl"
    p.write_text('{"prompt": "a?", "target": 4}\n\n{"prompt": "b?", "target": null}\n', encoding="utf-8")
    samples = load(p, columns=None)
    ids = [hashlib.sha256(t.encode()).hexdigest()[:16] for t in ('{"prompt":"a?","target":4}', '{"prompt":"b?","target":null}')]
    assert [(s.id, s.input, s.target) for s in samples] == [(ids[0], "a?", "4"), (ids[1], "b?", None)]


def test_choices_from_several_columns_and_no_target(tmp_path):
    p = tmp_path / "mc.csv"
    p.write_text("q,A,B,C\nPick one,x,y,z\n", encoding="utf-8")
    (s,) = load(p, columns={"prompt": "q", "target": None, "choices": ["A", "B", "C"]})
    assert s.choices == ["x", "y", "z"] and s.target is None and s.metadata == {}


def test_metrics_and_slices_come_from_the_config(tmp_path):
    ad = adapter_for(split(write(tmp_path, "jsonl"), MAPPING, metrics=["exact_match", {"name": "gaia"}],
                           slice_by=["topic"]))
    assert ad.metrics() == ["exact_match", {"name": "gaia"}]
    assert [ad.slices(s) for s in ad.load()] == [{"topic": "geo"}, {"topic": "math"}]
    assert adapter_for(split(write(tmp_path, "jsonl"), MAPPING)).metrics() == ["exact_match"]


# ---- templates ----------------------------------------------------------------------------------------------------
def test_jinja_template_file(tmp_path):
    (tmp_path / "qa.j2").write_text("[{{ topic }}] {{ prompt }}\n{{ choices_text }}\n", encoding="utf-8")
    samples = load(write(tmp_path, "jsonl"), prompt_template="qa.j2")
    assert samples[0].input == "[geo] Capital of France?\nA. Paris\nB. Rome"


def test_string_template_file_and_inline_forms(tmp_path):
    (tmp_path / "qa.tmpl").write_text("Q ($qid): $prompt\n", encoding="utf-8")
    assert load(write(tmp_path, "csv"), prompt_template="qa.tmpl")[1].input == "Q (q2): 2 + 2?"
    assert load(write(tmp_path, "csv"), prompt_template="Topic $topic. $question")[0].input == "Topic geo. Capital of France?"
    inline = load(write(tmp_path, "csv"), prompt_template="{% for c in choices %}{{ loop.index }}={{ c }} {% endfor %}")
    assert inline[0].input == "1=Paris 2=Rome "  # only final newlines are dropped


def test_the_ground_truth_is_not_a_template_variable(tmp_path):
    with pytest.raises(DataError, match=r"data.jsonl line 1: template inline: 'answer' is undefined"):
        load(write(tmp_path, "jsonl"), prompt_template="{{ prompt }} (answer: {{ answer }})")
    with pytest.raises(DataError, match=r"line 1: template inline: no variable \$answer"):
        load(write(tmp_path, "jsonl"), prompt_template="$prompt $answer")


def test_template_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="prompt template file .*missing.j2 not found"):
        load(write(tmp_path, "jsonl"), prompt_template="missing.j2")
    (tmp_path / "bad.j2").write_text("{{ prompt ", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.j2 line 1: invalid Jinja2"):
        load(write(tmp_path, "jsonl"), prompt_template="bad.j2")


# ---- bad inputs: one line naming the file, the row and the problem ---------------------------------------------
def one_line_error(path, exc=DataError, **kw) -> str:
    with pytest.raises(exc) as err:
        load(path, **kw)
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


def test_missing_file(tmp_path):
    msg = one_line_error(tmp_path / "nope.jsonl")
    assert msg.startswith(str(tmp_path / "nope.jsonl")) and "file not found" in msg and "'path'" in msg


def test_a_folder_is_not_a_file(tmp_path):
    (tmp_path / "d.csv").mkdir()
    assert "is a folder" in one_line_error(tmp_path / "d.csv")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file(tmp_path):
    p = write(tmp_path, "jsonl")
    p.chmod(0)
    try:
        assert "cannot read the file" in one_line_error(p)
    finally:
        p.chmod(0o644)


@pytest.mark.parametrize("kind,content,problem", [
    ("jsonl", b"", "the file is empty"),
    ("csv", b"   \n", "the file is empty"),
    ("csv", b"question,answer\n", "the file has no rows"),
    ("jsonl", b"\n\n", "the file is empty"),
    ("json", b"[]", "the file has no rows"),
    ("parquet", b"PAR1 not really parquet", "not a readable Parquet file"),
    ("jsonl", b'{"question": "a"}\n{"question": \n', "line 2: not valid JSON"),
    ("jsonl", b'{"question": "a"}\n["a list"]\n', "line 2: expected a JSON object per line"),
    ("csv", b'question,answer\n"a,1\n', "not valid CSV"),
])
def test_unreadable_or_empty_files(tmp_path, kind, content, problem):
    p = tmp_path / f"bad.{kind}"
    p.write_bytes(content)
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer"})
    assert msg.startswith(str(p)) and problem in msg


def test_empty_parquet_table(tmp_path):
    p = tmp_path / "e.parquet"
    pq.write_table(pa.table({"question": pa.array([], pa.string()), "answer": pa.array([], pa.string())}), p)
    assert "the file has no rows" in one_line_error(p, columns={"prompt": "question", "target": "answer"})


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
@pytest.mark.parametrize("role,column", [("prompt", "query"), ("target", "gold"), ("id", "uid"), ("system", "sp"),
                                         ("choices", "options")])
def test_missing_mapped_column_lists_the_columns(tmp_path, kind, role, column):
    msg = one_line_error(write(tmp_path, kind), columns={**MAPPING, role: column})
    assert f"column {column!r} (mapped as {role}) not found" in msg
    assert "'qid', 'question', 'answer', 'topic', 'sys', 'opts'" in msg


def test_unmapped_default_target_must_exist_or_be_switched_off(tmp_path):
    msg = one_line_error(write(tmp_path, "jsonl"), columns={"prompt": "question"})
    assert "column 'target' (mapped as target) not found" in msg and "target: null" in msg


def test_unknown_mapping_key(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown keys \['answer'\] under 'columns'"):
        load(write(tmp_path, "jsonl"), columns={"prompt": "question", "answer": "answer"})


@pytest.mark.parametrize("kind,where", [("jsonl", "line 3"), ("csv", "row 3"), ("parquet", "row 3")])
def test_duplicate_ids_name_both_rows(tmp_path, kind, where):
    rows = ROWS + [{**ROWS[0], "question": "again"}]
    msg = one_line_error(write(tmp_path, kind, rows))
    assert f"{where}: duplicate id 'q1' (first at {where[:-1]}1)" in msg


def test_non_utf8_text_names_line_and_byte(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes('{"question": "ok", "answer": "1"}\n{"question": "caf\xe9", "answer": "2"}\n'.encode("latin-1"))
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer"})
    assert msg == f"{p} line 2: not UTF-8 text (byte 0xe9 at column 18); re-save the file as UTF-8"
    c = tmp_path / "latin1.csv"
    c.write_bytes("question,answer\nna\xefve,1\n".encode("latin-1"))
    assert "line 2: not UTF-8 text (byte 0xef" in one_line_error(c, columns={"prompt": "question", "target": "answer"})


def test_non_utf8_bytes_in_a_parquet_column(tmp_path):
    p = tmp_path / "bin.parquet"
    pq.write_table(pa.table({"question": pa.array([b"fine", b"caf\xe9"], pa.binary()), "answer": ["1", "2"]}), p)
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer"})
    assert msg.startswith(f"{p} row 2 column 'question': not UTF-8 text (byte 0xe9")


def test_a_utf8_bom_is_fine(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeffquestion,answer\nnaïve?,ja\n".encode("utf-8"))
    (s,) = load(p, columns={"prompt": "question", "target": "answer"})
    assert (s.input, s.target) == ("naïve?", "ja")


def test_empty_prompt_cell(tmp_path):
    p = tmp_path / "e.csv"
    p.write_text("question,answer\nfine,1\n,2\n", encoding="utf-8")
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer"})
    assert msg == f"{p} row 2: column 'question' (the prompt) is empty"


def test_choices_that_are_not_a_list(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("question,answer,opts\nq,1,a or b\n", encoding="utf-8")
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer", "choices": "opts"})
    assert "row 1: column 'opts' (choices) must hold a list" in msg


def test_unknown_suffix_and_format_override(tmp_path):
    p = tmp_path / "data.txt"
    p.write_text('{"question": "q", "answer": "a"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot tell the format"):
        load(p, columns={"prompt": "question", "target": "answer"})
    (s,) = load(p, columns={"prompt": "question", "target": "answer"}, format="jsonl")
    assert s.target == "a"


def test_hf_uri_offline_fails_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(DataError) as err:
        load("hf://datasets/someone/some-data/test.jsonl", base_dir=tmp_path, cache=None)
    msg = str(err.value)
    assert "\n" not in msg and "someone/some-data" in msg and "HF_HUB_OFFLINE" in msg and "'test.jsonl'" in msg
    with pytest.raises(DataError, match="expected hf://datasets/<owner>/<name>"):
        load("hf://datasets/only-a-name", base_dir=tmp_path)


@pytest.mark.slow
def test_a_bad_file_writes_nothing_to_the_warehouse(instance, home, write_config, tmp_path):
    """The dataset asset fails as a whole: no partition file, the run's error is the one-line message."""
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    bad = tmp_path / "dup.jsonl"
    bad.write_text('{"id": "a", "q": "x", "a": "1"}\n{"id": "a", "q": "y", "a": "2"}\n', encoding="utf-8")
    write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      test: {{path: {bad}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
models:
  perfect: {{runner: echo, reply: target}}
""")
    result = evaluate(load_config(), ["smoke/test"], ["perfect"], instance=instance)
    assert not result.success
    assert f"{bad} line 2: duplicate id 'a' (first at line 1); ids must be unique" in result.partitions[0].error
    assert not list((home / "warehouse").glob("datasets/benchmark_split=*/**/*.parquet"))
    assert not list((home / "warehouse").glob("rollouts/benchmark_split=*/**/*.parquet"))


# ---- streaming: the file is read as the samples are taken (docs/scale.md) -------------------------------------
def test_load_yields_samples_before_the_rest_of_the_file_is_read(tmp_path):
    p = tmp_path / "big.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "question": f"q{i}", "answer": str(i)}) + "\n"
                         for i in range(50)) + "{not json\n", encoding="utf-8")
    samples = adapter_for(split(p, {"prompt": "question", "target": "answer", "id": "id"})).load()
    assert next(samples).id == "r0"  # the bad last line is not read yet
    with pytest.raises(DataError, match=r"big.jsonl line 51: not valid JSON"):
        list(samples)


def test_load_holds_about_one_chunk_of_the_file(tmp_path, monkeypatch):
    import tracemalloc

    from evalpipe.benchmarks import file as file_adapter

    monkeypatch.setattr(file_adapter, "TEXT_CHUNK_BYTES", 1 << 14)
    p = tmp_path / "many.jsonl"
    p.write_text("".join(json.dumps({"id": f"r{i}", "question": "x" * 200, "answer": str(i), "n": i}) + "\n"
                         for i in range(20_000)), encoding="utf-8")  # ~5 MB of text
    ad = adapter_for(split(p, {"prompt": "question", "target": "answer", "id": "id"}))
    tracemalloc.start()
    try:
        n = sum(1 for _ in ad.load())
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        kept = list(ad.load())
        _, whole = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == len(kept) == 20_000
    assert streamed < whole / 4, (streamed, whole)  # what is left: the ids seen so far (duplicates name both rows)


@pytest.mark.parametrize("kind", ["jsonl", "json", "csv", "tsv", "parquet"])
def test_chunk_boundaries_change_nothing(tmp_path, monkeypatch, kind):
    from evalpipe.benchmarks import file as file_adapter

    rows = [{**ROWS[i % 2], "qid": f"q{i}", "question": f"{'naïve ✓ ' * (i % 5)}q{i}\nsecond line"}
            for i in range(40)]
    p = write(tmp_path, kind, rows)
    if kind == "jsonl":  # CRLF line ends, blank lines and a BOM on top
        text = p.read_text(encoding="utf-8").replace("\n", "\r\n\r\n")
        p.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    whole = [(s.id, s.input, s.target, s.system, s.choices, s.metadata) for s in load(p)]
    monkeypatch.setattr(file_adapter, "TEXT_CHUNK_BYTES", 7)
    monkeypatch.setattr(file_adapter, "ROWS_PER_CHUNK", 3)
    assert [(s.id, s.input, s.target, s.system, s.choices, s.metadata) for s in load(p)] == whole
    assert len(whole) == 40


def test_bad_bytes_are_found_on_their_line_across_chunks(tmp_path, monkeypatch):
    from evalpipe.benchmarks import file as file_adapter

    monkeypatch.setattr(file_adapter, "TEXT_CHUNK_BYTES", 16)
    p = tmp_path / "latin1.jsonl"
    good = "".join(json.dumps({"question": f"q{i}", "answer": "1"}) + "\n" for i in range(9))
    p.write_bytes(good.encode() + '{"question": "caf\xe9", "answer": "2"}\n'.encode("latin-1"))
    msg = one_line_error(p, columns={"prompt": "question", "target": "answer"})
    assert msg == f"{p} line 10: not UTF-8 text (byte 0xe9 at column 18); re-save the file as UTF-8"


# The whole file used to be read before any row was mapped: the problem reported is still the one that comes first
# that way (a problem of the file anywhere, then a mapped column missing from every row, then the first bad row).
def test_a_problem_of_the_file_further_on_comes_before_a_bad_row(tmp_path):
    p = tmp_path / "two.jsonl"
    p.write_text(json.dumps({"id": "a", "question": "", "answer": "1"}) + "\n"
                 + "".join(json.dumps({"id": f"r{i}", "question": "q", "answer": "1"}) + "\n" for i in range(30))
                 + "{broken\n", encoding="utf-8")
    assert "two.jsonl line 32: not valid JSON" in one_line_error(p, columns={"prompt": "question", "target": "answer"})
    c = tmp_path / "two.csv"
    c.write_bytes(b"question,answer\n,1\n" + b"q,1\n" * 30 + b"q\xff,1\n")
    assert "two.csv line 33: not UTF-8 text" in one_line_error(c, columns={"prompt": "question", "target": "answer"})


def test_jsonl_columns_are_every_row_keys(tmp_path):
    p = tmp_path / "keys.jsonl"
    p.write_text(json.dumps({"question": "a", "answer": "1"}) + "\n"
                 + json.dumps({"question": "b", "answer": "2", "sys": "Be brief.", "id": "x"}) + "\n", encoding="utf-8")
    # a mapped column that only later rows have is a column of the file (rows without it: null)
    samples = load(p, columns={"prompt": "question", "target": "answer", "system": "sys", "id": None})
    assert [s.system for s in samples] == [None, "Be brief."]
    # ... a typo is a missing column, named with every column found, even though the first row's prompt is empty
    msg = one_line_error(p, columns={"prompt": "questoin", "target": "answer"})
    assert "column 'questoin' (mapped as prompt) not found; columns found: 'question', 'answer', 'sys', 'id'" in msg
    # the default id column exists (row 2): the first row, without one, has an empty id
    assert one_line_error(p, columns={"prompt": "question", "target": "answer"}) == \
        f"{p} line 1: column 'id' (the id) is empty"
