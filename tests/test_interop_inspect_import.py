"""`evalpipe import inspect LOG_OR_DIR...` (evalpipe/cli/import_logs.py): Inspect logs written by inspect_ai's own
writer streamed into the warehouse, read back with `evalpipe sql` and the Python API as inspect_ai reads them."""
import json
import shutil

import pytest

from tests.helpers.cli import cli_in_process
from tests.test_interop_inspect import _scored_log, _tool_log

inspect_log = pytest.importorskip("inspect_ai.log")


def _sql(cli, query):
    r = cli("sql", "--json", query)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _eval_set(root):
    """An `inspect eval-set` log dir: two tasks' logs, and the set's own JSON files (not logs)."""
    root.mkdir()
    _tool_log(root / "2026-01-01T00-00-00_agentic_a1.eval")
    _scored_log(root / "2026-01-01T00-00-01_t_b2.eval")
    (root / "logs.json").write_text("{}")
    (root / "eval-set.json").write_text("{}")
    return root


def test_a_folder_of_logs_is_imported_and_read_with_sql_as_inspect_reads_it(home, monkeypatch, tmp_path):
    logs = _eval_set(tmp_path / "logs")
    cli = cli_in_process(monkeypatch)
    r = cli("import", "inspect", str(logs))
    assert r.exit_code == 0, r.output
    assert "2 of 2 logs imported" in r.output
    for f in sorted(logs.glob("*.eval")):  # every sample, as inspect_ai's own reader reads it
        theirs = inspect_log.read_eval_log(str(f))
        rows = _sql(cli, f"SELECT id, epoch, target, output FROM inspect_samples WHERE log = '{f.name}' ORDER BY id")
        assert [(x["id"], x["epoch"], x["output"]) for x in rows] == \
            [(str(s.id), s.epoch, s.output.completion) for s in theirs.samples]
    targets = {x["id"]: x["target"] for x in _sql(cli, "SELECT id, target FROM inspect_samples WHERE log LIKE '%_t_%'")}
    assert json.loads(targets["3"]) == ["red", "blue"] and targets["1"] == "4"  # a list target stays a list
    acc = _sql(cli, "SELECT log, avg(value) AS acc, count(*) AS n FROM inspect_scores GROUP BY log ORDER BY log")
    assert [(x["acc"], x["n"]) for x in acc] == [(0.5, 2), (0.5, 4)]

    # the Python API reads the same tables
    from evalpipe.store.warehouse import Warehouse

    df = Warehouse(home / "warehouse.duckdb").query("SELECT count(*) AS n FROM inspect_samples")
    assert int(df["n"][0]) == 6

    # again, one log by file: its rows are replaced, nothing twice
    r = cli("import", "inspect", str(logs / "2026-01-01T00-00-01_t_b2.eval"))
    assert r.exit_code == 0, r.output
    assert _sql(cli, "SELECT count(*) AS n FROM inspect_samples")[0]["n"] == 6
    assert _sql(cli, "SELECT count(*) AS n FROM inspect_scores")[0]["n"] == 6


def test_a_bad_log_is_one_line_and_the_others_still_import(home, monkeypatch, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    good = logs / "good.eval"
    _tool_log(good)
    cut = logs / "cut.eval"  # a copy cut short: no central directory
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    (logs / "junk.eval").write_text("not a zip")
    cli = cli_in_process(monkeypatch)
    r = cli("import", "inspect", str(logs))
    assert r.exit_code == 1, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all("not a readable Inspect eval log" in e for e in errors), r.output
    assert any(str(cut) in e for e in errors) and any(str(logs / "junk.eval") in e for e in errors)
    assert "1 of 3 logs imported" in r.output and "2 failed" in r.output
    assert _sql(cli, "SELECT count(*) AS n FROM inspect_samples")[0]["n"] == 2

    # a log over the size cap: refused before anything is inflated, with how to raise the cap
    r = cli("import", "inspect", "--max-file-mb", "0.001", str(good))
    assert r.exit_code == 1 and "--max-file-mb" in r.output, r.output

    # a re-import that fails half way leaves the previous import whole
    shutil.copy(cut, good)
    r = cli("import", "inspect", str(good))
    assert r.exit_code == 1
    assert _sql(cli, "SELECT count(*) AS n FROM inspect_samples WHERE log = 'good.eval'")[0]["n"] == 2

    # not a log at all: a one-line usage error
    (tmp_path / "log.json").write_text("{}")
    r = cli("import", "inspect", str(tmp_path / "log.json"))
    assert r.exit_code == 2 and "inspect log convert --to eval" in r.output


def test_a_damaged_sample_member_names_the_member(home, monkeypatch, tmp_path):
    import zipfile

    src = tmp_path / "src.eval"
    _tool_log(src)
    bad = tmp_path / "bad.eval"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info, b"{not json" if info.filename.startswith("samples/2") else data)
    r = cli_in_process(monkeypatch)("import", "inspect", str(bad))
    assert r.exit_code == 1 and "member samples/2_epoch_1.json is not JSON" in r.output, r.output


def test_secrets_in_a_log_are_masked_in_the_warehouse(home, monkeypatch, tmp_path):
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score

    from tests.helpers.secrets import all_text

    key = "sk-proj-PLANTEDinspect0123456789"
    log = tmp_path / "leaky.eval"
    write_eval_log(EvalLog(status="success", eval=EvalSpec(
        created="2026-01-01T00:00:00+00:00", task="t", dataset=EvalDataset(name="t", samples=1), model="m",
        config=EvalConfig()), samples=[EvalSample(
            id=1, epoch=1, input=f"use the key {key} and MYCODE-4242", target="4",
            output=ModelOutput.from_content("m", f"my key is {key}"), scores={"m": Score(value="C", answer=key)})]),
        str(log), format="eval")
    r = cli_in_process(monkeypatch)("--redact-pattern", r"MYCODE-\d+", "import", "inspect", str(log))
    assert r.exit_code == 0, r.output
    found = {p: t for p, t in all_text(home / "warehouse").items() if key in t or "MYCODE-4242" in t}
    assert not found, list(found)


def test_progress_lines_for_a_long_log(home, monkeypatch, tmp_path):
    from evalpipe.cli import import_logs

    monkeypatch.setattr(import_logs, "PROGRESS_EVERY_S", 0.0)
    _tool_log(tmp_path / "a.eval")
    r = cli_in_process(monkeypatch)("import", "inspect", "--batch-rows", "1", str(tmp_path / "a.eval"))
    assert r.exit_code == 0, r.output
    assert "  a.eval: 1/2 samples" in r.output and "a.eval: 2 samples imported" in r.output


def test_the_import_command_never_imports_dagster(home, tmp_path):
    from tests.test_reads_without_dagster import _probe

    _tool_log(tmp_path / "a.eval")
    found, out = _probe(home, "import", "inspect", str(tmp_path / "a.eval"))
    assert "2 samples imported" in out and found["DAGSTER"] == [], out
