"""Document 000 (the GAIA-first harness, ../shared/design_refs/000_*): its CLI commands and Python calls as the
document writes them, each one that docs/design_refs.md says works, under evalpipe's names for them (that table's
middle column: `python -m eval.cli run` is `evalpipe run`, `--executor` is `--model`, `--executor-option` is
`--runner-option`, `run_evaluation` is `evaluate`). Only names of data that must be local are adapted: the GAIA
split is the shipped GAIA-format sample, and the `agent1` executor is a model of the `echo` runner (`reply: target`,
a perfect agent, so every verdict is known)."""
import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.cli import cli_in_process

REPO = Path(__file__).parents[1]
GAIA_SAMPLE = REPO / "data" / "gaia_sample"
VALIDATION = pd.read_parquet(GAIA_SAMPLE / "2023" / "validation" / "metadata.parquet")
SECRET = "hf_doc000SecretTokenValue1234567890"

# configs/gaia_validation.yaml, in evalpipe's config: the GAIA split, an agent1 executor, run folders named
# <UTC timestamp>_<run_id> under the output root
CONFIG = """benchmarks:
  gaia:
    adapter: gaia
    splits:
      validation: {{}}
      validation_shuffle: {{hf_split: validation, shuffle: true}}  # what --benchmark-option shuffle=true asks, as a split of its own
    options: {{path: {sample}}}
    metrics: [gaia]
models:
  agent1: {{runner: echo, reply: target}}
default_models: [agent1]
artifacts: {{dir: {runs}, folder_name: timestamp_run_id}}
"""


@pytest.fixture
def cli(home, write_config, tmp_path, monkeypatch):
    write_config(CONFIG.format(sample=GAIA_SAMPLE, runs=tmp_path / "eval" / "runs"))
    return cli_in_process(monkeypatch)


def test_run_with_the_documents_overrides_then_summarize_the_run_dir(cli, tmp_path):
    # "3. Override common options from CLI", as written (--executor agent1 is --model agent1; --executor-option is
    # --runner-option, with an option the echo runner has), plus --run-id and --redact-pattern from EvalConfig
    # --benchmark-option shuffle=true would change what the split holds for every model: refused in one line,
    # before anything runs (docs/design_refs.md says so); the split declared with it is the way
    r = cli("--redact-pattern", "Mercury", "run",
            "--split", "validation",
            "--limit", "50",
            "--model", "agent1",
            "--timeout-s", "120",
            "--benchmark-option", "shuffle=true",
            "--runner-option", "reply=target",
            "--run-id", "doc000", "--no-progress")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "shuffle=True" in r.output and "validation_shuffle" in r.output
    assert not (tmp_path / "eval" / "runs").exists()
    r = cli("--redact-pattern", "Mercury", "run",
            "--split", "validation_shuffle",
            "--limit", "50",
            "--model", "agent1",
            "--timeout-s", "120",
            "--runner-option", "reply=target",
            "--run-id", "doc000", "--no-progress")
    assert r.exit_code == 0, r.output
    runs = sorted((tmp_path / "eval" / "runs").rglob("*_doc000"))
    assert len(runs) == 1, runs
    run_dir = runs[0]
    assert run_dir.name[:16].endswith("Z") and run_dir.name[8] == "T"  # <YYYYMMDDTHHMMSSZ>_<run_id>
    # the artifact contract: the six files, one samples line per sample (29: --limit 50 is more than there are)
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == sorted(["manifest.json", "samples.jsonl", "events.jsonl", "errors.jsonl", "summary.json",
                            "summary.md"])
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(VALIDATION) == 29
    assert all(s["scores"]["gaia"]["correct"] for s in samples)  # the perfect agent: every verdict right
    assert (run_dir / "errors.jsonl").read_text() == ""
    # shuffle: true reached the adapter: the order is not the file's
    assert [s["sample_id"] for s in samples] != list(VALIDATION["task_id"])
    # metadata kept (every non-prompt, non-answer, non-id column), the redacted pattern nowhere in the run folder
    assert {"Level", "file_name", "Annotator Metadata"} <= set(samples[0]["metadata"])
    assert not [p for p in run_dir.rglob("*") if p.is_file() and b"Mercury" in p.read_bytes()]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_id"] == "doc000" and manifest["duration_s"] >= 0 and "git" in json.dumps(manifest)

    # "4. Summarize an existing run directory"
    s = cli("summarize", "--run-dir", str(run_dir), "--json")
    assert s.exit_code == 0, s.output
    rows = json.loads(s.output[s.output.index("["):])
    gaia = [row for row in rows if row["metric"] == "gaia" and row.get("slice") in (None, "all", "")]
    assert gaia and gaia[0]["value"] == 1.0 and gaia[0]["n"] == 29, rows
