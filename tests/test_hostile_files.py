"""Hostile files (issue 30 item 4): every file evalpipe reads is read under a size cap (evalpipe/core/file_caps.py,
docs/operations.md "Size caps on files read"). An archive's members are checked against the cap before anything
is inflated, reads are bounded whatever a header claims, and going over is one line naming the file (and member),
the cap and the option that raises it. The bombs are built here, small, against a small cap set by the option."""
import dataclasses
import gzip
import io
import json
import tracemalloc
import zipfile

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import tooluse_benchmark

MB = 1 << 20
CAP_MB = 1  # the cap the tests set through `max_file_mb`
BOMB_BYTES = 48 * MB  # what the bombs inflate to: enough that reading it shows in the peak, cheap to build


def _inspect_log(path):
    """A real two-sample Inspect log (written by inspect_ai itself)."""
    inspect_log = pytest.importorskip("inspect_ai.log")
    from inspect_ai.model import ModelOutput

    samples = [inspect_log.EvalSample(id=i, epoch=1, input=f"q{i}", target="a",
                                      output=ModelOutput.from_content("mockllm/model", "a")) for i in (1, 2)]
    inspect_log.write_eval_log(inspect_log.EvalLog(status="success", samples=samples, eval=inspect_log.EvalSpec(
        created="2026-01-01T00:00:00+00:00", task="task", dataset=inspect_log.EvalDataset(name="d", samples=2),
        model="mockllm/model", config=inspect_log.EvalConfig())), str(path))
    return path


def _bomb_log(tmp_path, inflated=BOMB_BYTES):
    """A valid Inspect log whose sample 2 is padded with whitespace (still valid JSON: the old reader accepted it
    and held all of it) so that the member inflates to `inflated` bytes; the file stays small."""
    good = _inspect_log(tmp_path / "good.eval")
    bomb = tmp_path / "bomb.eval"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "samples/2_epoch_1.json":
                with dst.open(info.filename, "w", force_zip64=True) as out:
                    out.write(data)
                    pad = b" " * MB
                    for _ in range(inflated // MB):
                        out.write(pad)
            else:
                dst.writestr(info.filename, data)
    assert bomb.stat().st_size < MB
    return bomb


def _peak(fn):
    """fn()'s result (or exception) and the peak of Python's allocations while it ran."""
    tracemalloc.start()
    try:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001  (the caller asserts on it)
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _one_line(exc):
    assert exc.__class__.__name__ == "FileTooLarge", repr(exc)
    msg = str(exc)
    assert "\n" not in msg
    return msg


def _split(tmp_path, options):
    from evalpipe.core.config import SplitConfig

    return SplitConfig(key="theirs/test", benchmark="theirs", split="test", adapter="inspect_log", options=options,
                       metrics=None, prompt_template=None, base_dir=tmp_path)


def test_the_inspect_log_adapter_refuses_a_zip_bomb_before_inflating_it(tmp_path):
    from evalpipe.benchmarks.inspect_log import InspectLogAdapter

    bomb = _bomb_log(tmp_path)
    adapter = InspectLogAdapter(_split(tmp_path, {"path": str(bomb), "max_file_mb": CAP_MB}))
    exc, peak = _peak(lambda: list(adapter.load()))
    msg = _one_line(exc)
    assert str(bomb) in msg and "member samples/2_epoch_1.json" in msg and "48 MB" in msg
    assert "1.0 MB size cap" in msg and "split option `max_file_mb` of theirs/test" in msg
    assert peak < 4 * MB, peak  # nothing inflated: the central directory said it all

    ok = InspectLogAdapter(_split(tmp_path, {"path": str(bomb), "max_file_mb": 64}))  # raised: read as before
    assert [s.id for s in ok.load()] == ["1", "2"]


def test_the_replay_runner_refuses_a_zip_bomb_with_one_line(tmp_path, home, write_config, monkeypatch):
    from evalpipe.core.config import ModelConfig
    from evalpipe.runners.replay import ReplayRunner

    bomb = _bomb_log(tmp_path)
    exc, peak = _peak(lambda: ReplayRunner(ModelConfig.from_dict("theirs", {"runner": "replay", "path": str(bomb),
                                                                            "max_file_mb": CAP_MB})))
    msg = _one_line(exc)
    assert "member samples/2_epoch_1.json" in msg and "option `max_file_mb` of model theirs" in msg
    assert peak < 4 * MB, peak

    # through `evalpipe run`: the line, a non-zero exit, before any model call
    write_config(tooluse_benchmark() + f"models:\n  theirs: {{runner: replay, path: {bomb}, max_file_mb: {CAP_MB}}}\n")
    out = cli_in_process(monkeypatch)("run", "--no-progress", "--model", "theirs")
    assert out.exit_code != 0 and "member samples/2_epoch_1.json inflates to 48 MB" in out.output, out.output


def test_a_member_whose_header_understates_its_size_cannot_get_past_the_cap(tmp_path):
    """A central directory that claims a small size: the bounded read stops at the claim (and the CRC fails), it
    never inflates the rest."""
    from evalpipe.core.errors import DataError
    from evalpipe.interop.inspect_log import read_samples
    from evalpipe.core.file_caps import FileCap

    bomb = _bomb_log(tmp_path)
    data = bytearray(bomb.read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("samples/2_epoch_1.json")
    # rewrite the member's zip64 uncompressed size (in its central directory extra field) to 1000 bytes
    real = info.file_size.to_bytes(8, "little")
    at = data.rfind(real)
    assert at > info.header_offset
    data[at:at + 8] = (1000).to_bytes(8, "little")
    liar = tmp_path / "liar.eval"
    liar.write_bytes(bytes(data))
    exc, peak = _peak(lambda: read_samples(liar, FileCap(CAP_MB * MB, "max_file_mb")))
    assert isinstance(exc, DataError) and str(liar) in str(exc), exc
    assert peak < 4 * MB, peak


def test_a_gzip_data_file_is_capped_by_what_it_inflates_to(tmp_path):
    from evalpipe.benchmarks.humaneval import read_problems
    from evalpipe.core.file_caps import FileCap

    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wb") as fh:
        row = {"task_id": "t", "prompt": "p", "canonical_solution": "", "test": "", "entry_point": "f"}
        fh.write(json.dumps(row).encode() + b"\n")
        fh.write(b" " * (8 * MB) + b"\n")
    exc, peak = _peak(lambda: read_problems(path, FileCap(CAP_MB * MB, "the split option `max_file_mb`")))
    msg = _one_line(exc)
    assert str(path) in msg and "inflates to more than the 1.0 MB size cap" in msg
    assert peak < 4 * MB, peak
    assert len(read_problems(path)) == 1  # the default cap: read as before


def test_a_device_named_as_a_data_file_stops_at_the_cap(tmp_path):
    """/dev/zero has no size to check: the bounded reader stops it."""
    from evalpipe.core.file_caps import FileCap, open_text

    def read():
        with open_text("/dev/zero", FileCap(CAP_MB * MB, "x")) as fh:
            return fh.readline()

    exc, peak = _peak(read)
    assert "/dev/zero holds more than the 1.0 MB size cap" in _one_line(exc)
    assert peak < 4 * MB, peak


def test_max_file_mb_must_be_a_positive_number(tmp_path):
    from evalpipe.benchmarks.inspect_log import InspectLogAdapter
    from evalpipe.core.errors import ConfigError

    bomb = _inspect_log(tmp_path / "x.eval")
    for bad in ("lots", 0, -1, True):
        with pytest.raises(ConfigError, match="max_file_mb must be a positive number of megabytes"):
            list(InspectLogAdapter(_split(tmp_path, {"path": str(bomb), "max_file_mb": bad})).load())


def _file_split(tmp_path, path, **options):
    from evalpipe.core.config import SplitConfig

    return SplitConfig(key="mine/test", benchmark="mine", split="test", adapter="file",
                       options={"path": str(path), "max_file_mb": CAP_MB, **options}, metrics=None,
                       prompt_template=None, base_dir=tmp_path)


def test_the_file_adapter_caps_a_json_document_and_a_jsonl_line(tmp_path):
    """A `.json` document is parsed whole: the cap bounds the file. A JSONL file streams (docs/scale.md), so any
    size of file is fine, but one line is held whole: the cap bounds a line."""
    from evalpipe.benchmarks.file import FileAdapter

    doc = tmp_path / "rows.json"
    doc.write_text(json.dumps([{"id": "1", "prompt": "p", "target": "t"}]) + " " * (2 * MB))
    exc, _ = _peak(lambda: list(FileAdapter(_file_split(tmp_path, doc)).load()))
    assert "rows.json holds 2.0 MB, over the 1.0 MB size cap" in _one_line(exc)
    assert "split option `max_file_mb` of mine/test" in str(exc)

    lines = tmp_path / "rows.jsonl"
    n = 40_000
    lines.write_text("".join(json.dumps({"id": str(i), "prompt": "p" * 60, "target": "t"}) + "\n" for i in range(n)))
    assert lines.stat().st_size > 3 * MB  # over the cap as a file: streamed, read whole
    assert len(list(FileAdapter(_file_split(tmp_path, lines)).load())) == n
    with open(lines, "a") as fh:
        fh.write(json.dumps({"id": "big", "prompt": "x" * (2 * MB), "target": "t"}) + "\n")
    exc, _ = _peak(lambda: list(FileAdapter(_file_split(tmp_path, lines)).load()))
    assert f"rows.jsonl line {n + 1} holds more than the 1.0 MB size cap" in _one_line(exc)


# ---- every other reader of a user-supplied file (issue 30 item 4, round two) -----------------------------------------
BIG = 2 * MB  # over CAP_MB as a file (or one line); a few ms to write


def _big_json(path, n=BIG):
    """A JSON object padded with whitespace to `n` bytes (valid: the old readers read all of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"id": "1"' + " " * n + "}\n")
    return path


def _any_split(tmp_path, adapter, **options):
    from evalpipe.core.config import SplitConfig

    return SplitConfig(key=f"{adapter}/test", benchmark=adapter, split="test", adapter=adapter,
                       options={"max_file_mb": CAP_MB, **options}, metrics=None, prompt_template=None,
                       base_dir=tmp_path)


def _adapter_load(tmp_path, adapter, **options):
    from evalpipe.benchmarks.base import get_adapter

    split = _any_split(tmp_path, adapter, **options)
    return lambda: list(get_adapter(adapter)(split).load())


def _qrdata_zip(tmp_path):
    root = tmp_path / "qr"
    root.mkdir()
    (root / "QRData.json").write_text(json.dumps([{"question": "q", "answer": "1", "data_files": ["t.csv"],
                                                   "meta_data": {"question_type": "numerical"}}]))
    with zipfile.ZipFile(root / "data.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("t.csv", b"0" * (8 * MB))  # inflates to 8 MB, a few KB on disk
    return _adapter_load(tmp_path, "qrdata", path=str(root)), "data.zip: member t.csv inflates to 8.0 MB"


def _qrdata_questions(tmp_path):
    root = tmp_path / "qr"
    root.mkdir()
    (root / "QRData.json").write_text("[]" + " " * BIG)
    return _adapter_load(tmp_path, "qrdata", path=str(root)), "QRData.json holds 2.0 MB"


def _bfcl(tmp_path):
    q = _big_json(tmp_path / "BFCL_v3_simple.json")
    return _adapter_load(tmp_path, "bfcl", path=str(q)), "BFCL_v3_simple.json holds 2.0 MB"


def _discoverybench(tmp_path):
    root = tmp_path / "db"
    _big_json(root / "real" / "test" / "ds" / "metadata_0.json")
    return _adapter_load(tmp_path, "discoverybench", path=str(root)), "metadata_0.json holds 2.0 MB"


def _discoverybench_key(tmp_path):
    root = tmp_path / "db"
    (root / "real" / "test").mkdir(parents=True)
    key = root / "key.csv"
    key.write_text("dataset,metadataid,query_id,gold_hypo\n" + " " * BIG)
    return (_adapter_load(tmp_path, "discoverybench", path=str(root), answer_key=str(key)),
            "key.csv holds 2.0 MB")


def _tool_integration(tmp_path):
    data = _big_json(tmp_path / "items.jsonl")
    return _adapter_load(tmp_path, "tool_integration", path=str(data)), "items.jsonl holds 2.0 MB"


def _gaia(tmp_path):
    meta = _big_json(tmp_path / "gaia" / "metadata.jsonl")
    return _adapter_load(tmp_path, "gaia", path=str(meta)), "metadata.jsonl line 1 holds more than the 1.0 MB"


def _daeval(tmp_path):
    _big_json(tmp_path / "da" / "da-dev-questions.jsonl")
    return (_adapter_load(tmp_path, "daeval", path=str(tmp_path / "da")),
            "da-dev-questions.jsonl line 1 holds more than the 1.0 MB")


def _template(tmp_path):
    from evalpipe.benchmarks.file import FileAdapter

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"id": "1", "prompt": "p", "target": "t"}) + "\n")
    (tmp_path / "big.j2").write_text("{{ prompt }}" + " " * BIG)
    split = dataclasses.replace(_file_split(tmp_path, rows), prompt_template="big.j2")
    return lambda: FileAdapter(split).template(), "big.j2 holds 2.0 MB"


def _lm_eval_yaml(tmp_path):
    from evalpipe.benchmarks.base import get_adapter

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mine.yaml").write_text("task: mine\n" + "#" * BIG + "\n")
    split = _any_split(tmp_path, "lm_eval", task="mine", include_path=str(tasks))
    return lambda: get_adapter("lm_eval")(split).source_version(), "mine.yaml holds 2.0 MB"


def _tools_fixtures(tmp_path):
    from evalpipe.tools.env import ToolEnv

    folder = tmp_path / "fixtures"
    _big_json(folder / "calls.jsonl")
    return (lambda: ToolEnv({"fixtures": str(folder)}, {"max_file_mb": CAP_MB}, where="mine/test"),
            "calls.jsonl holds 2.0 MB")


def _tools_allowlist(tmp_path):
    from evalpipe.tools.env import ToolEnv

    allow = tmp_path / "allow.txt"
    allow.write_text("search\n" + "#" * BIG)
    return (lambda: ToolEnv({"allowlist": str(allow)}, {"max_file_mb": CAP_MB}, where="mine/test"),
            "allow.txt holds 2.0 MB")


def _tools_schemas(tmp_path):
    from evalpipe.tools.env import read_schemas
    from evalpipe.core.file_caps import split_cap

    schemas = tmp_path / "schemas.yaml"
    schemas.write_text("[]\n" + "#" * BIG)
    return (lambda: read_schemas(str(schemas), tmp_path.joinpath, split_cap("mine/test", {"max_file_mb": CAP_MB})),
            "schemas.yaml holds 2.0 MB")


def _results_summary(tmp_path):
    from evalpipe.core.file_caps import FileCap
    from evalpipe.store.results_file import load_results

    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text(json.dumps({"sample_id": "1"}) + "\n")
    _big_json(run / "summary.json")
    return (lambda: load_results(run, FileCap(CAP_MB * MB, "`--max-file-mb`")), "summary.json holds 2.0 MB")


READERS = {"qrdata data.zip": _qrdata_zip, "qrdata questions": _qrdata_questions, "bfcl": _bfcl,
           "discoverybench metadata": _discoverybench, "discoverybench answer key": _discoverybench_key,
           "tool_integration dataset": _tool_integration, "gaia": _gaia, "daeval": _daeval,
           "prompt template": _template, "lm_eval task yaml": _lm_eval_yaml, "tools fixtures": _tools_fixtures,
           "tools allowlist": _tools_allowlist, "tools schemas": _tools_schemas,
           "results summary.json": _results_summary}


@pytest.mark.parametrize("reader", list(READERS))
def test_every_reader_refuses_a_file_over_the_cap_with_one_line(reader, tmp_path, home):
    read, expected = READERS[reader](tmp_path)
    exc, peak = _peak(read)
    msg = _one_line(exc)
    assert expected in msg and "size cap on files read" in msg and ("max_file_mb" in msg or "max-file-mb" in msg), msg
    assert peak < 6 * MB, peak  # (a streamed reader holds a chunk of about the cap besides the capped line)


def test_a_config_file_over_its_cap_is_one_line_before_it_is_read(tmp_path):
    """The config file itself: a sane cap (a path mistake, e.g. EVALS_CONFIG at a data file or a device)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.project.schema import validate_file

    big = tmp_path / "evals.yaml"
    with open(big, "wb") as fh:
        fh.truncate(40 * MB)  # sparse: costs nothing on disk
    exc, peak = _peak(lambda: validate_file(big))
    assert isinstance(exc, ConfigError) and "\n" not in str(exc), repr(exc)
    assert str(big) in str(exc) and "size cap" in str(exc) and "config file" in str(exc), str(exc)
    assert peak < 4 * MB, peak


def test_sql_prints_escape_sequences_from_the_warehouse_as_escapes(home, monkeypatch):
    """`evalpipe sql` shows model text from the warehouse: its table prints control sequences as escapes
    (core/terminal_text.py), `--json` as JSON escapes; `--csv` is data for a file and keeps the text exact, as
    `view --format csv` does (docs/operations.md)."""
    query = "select 'answer ' || chr(27) || '[2J' || chr(7) || chr(13) || chr(8238) || ' end' as raw_output"
    cli = cli_in_process(monkeypatch)
    for args in ([], ["--json"]):
        r = cli("sql", query, *args)
        assert r.exit_code == 0, r.output
        assert not any(c in r.stdout for c in "\x1b\x07\r\u202e"), (args, repr(r.stdout))
        assert ("\\x1b[2J" if not args else "\\u001b[2J") in r.stdout, (args, r.stdout)
    r = cli("sql", query, "--csv")
    assert r.exit_code == 0 and "answer \x07\r\u202e end" in r.stdout, repr(r.stdout)  # (click's test runner drops \x1b[..)
