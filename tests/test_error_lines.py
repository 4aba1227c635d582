"""True one-line errors (issue 30 item 6b): a warehouse path that is a folder, a full disk under DAGSTER_HOME, a
results line that is not UTF-8 (file:line, the rest shown), and model text's terminal escape sequences printed as
escapes, never obeyed."""
import json
import os
import subprocess
import sys

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import REPO, smoke_benchmark

ESCAPES = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred\r\x9b\u202e"  # clear screen, window title, colour, CR, C1 CSI, bidi


def _record(sid, output, correct=True):
    return {"sample_id": sid, "prompt": [{"role": "user", "content": "q?"}], "target": "a", "status": "ok",
            "raw_output": output, "prediction": output, "scores": {"exact_match": {"score": float(correct),
                                                                                    "correct": correct}}}


def test_a_warehouse_path_that_is_a_folder_is_said_and_fails_the_run(home, write_config, monkeypatch, tmp_path):
    folder = tmp_path / "wh.duckdb"
    folder.mkdir()
    monkeypatch.setenv("EVALS_WAREHOUSE", str(folder))
    write_config(smoke_benchmark(limit=2) + "models:\n  echo: {runner: echo}\n")
    out = cli_in_process(monkeypatch)("run", "--no-progress", "--model", "echo")
    assert out.exit_code != 0, out.output
    assert f"the warehouse path {folder} is a folder; it must name a DuckDB file" in out.output
    assert "another process holds it open" not in out.output


@pytest.fixture
def full_home(tmp_path):
    """A DAGSTER_HOME on a 3 MB tmpfs, filled but for ~40 KB (skipped where tmpfs can't be mounted)."""
    mnt = tmp_path / "full_home"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root) to make a full disk")
    try:
        (mnt / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
        with open(mnt / "filler", "wb") as fh:
            fh.write(b"\0" * (3 * 1024 - 40) * 1024)
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_full_dagster_home_says_the_disk_is_full_and_which_file(full_home, tmp_path):
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(smoke_benchmark(limit=2) + "models:\n  echo: {runner: echo}\n")
    env = {**os.environ, "DAGSTER_HOME": str(full_home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(REPO)}
    env.pop("EVALS_WAREHOUSE", None)
    r = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", "--model", "echo"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: the disk holding {full_home}/") and " is full (" in last, r.stderr[-2000:]
    assert "free space on it or point DAGSTER_HOME at a disk with room" in last


def test_a_results_line_that_is_not_utf8_is_named_and_the_rest_shown(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    lines = [json.dumps(_record(f"s{i}", "a")).encode() for i in range(1, 4)]
    lines[1] = lines[1].replace(b'"a"', b'"caf\xe9"', 1)  # latin-1, not UTF-8, on line 2
    path.write_bytes(b"\n".join(lines) + b"\n")
    column = lines[1].index(b"\xe9") + 1
    r = cli_in_process(monkeypatch)("view", str(path))
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"error: {path}:2: not UTF-8 text (byte 0xe9 at column {column}); the line is "
                                     "skipped (re-save the file as UTF-8)"]
    assert "2 sample(s)" in r.stdout and "s3" in r.stdout


def test_view_prints_escape_sequences_from_model_text_as_escapes(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_record("s1", f"answer {ESCAPES} end", correct=False)) + "\n")
    cli = cli_in_process(monkeypatch)
    for args in ([], ["--detailed"]):
        r = cli("view", str(path), *args)
        assert r.exit_code == 0, r.output
        assert not any(c in r.stdout for c in "\x1b\x07\r\x9b\u202e"), repr(r.stdout)
        assert "\\x1b[2J" in r.stdout


def test_terminal_safe_keeps_newlines_tabs_and_text():
    from evalpipe.core.terminal_text import terminal_safe

    assert terminal_safe("a\tb\nc ü 日本") == "a\tb\nc ü 日本"
    assert terminal_safe(ESCAPES) == "\\x1b[2J\\x1b]0;pwned\\x07\\x1b[31mred\\x0d\\x9b\\u202e"


def test_view_caps_a_results_file(tmp_path, monkeypatch):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_record("s1", "a")) + "\n" + " " * (2 << 20) + "\n")
    r = cli_in_process(monkeypatch)("view", str(path), "--max-file-mb", "1")
    assert r.exit_code == 2 and "holds 2.0 MB, over the 1.0 MB size cap" in r.output and "--max-file-mb" in r.output
