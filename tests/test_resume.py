"""Rollouts resume: a run killed with SIGKILL and run again calls the model exactly for the samples that were not
finished; fingerprints re-run exactly what a change affects. Real processes, real HTTP (loopback), real SQLite."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from evalpipe.pipeline import stages as pipeline
from evalpipe.project import load_config
from evalpipe.runners import RunSettings, build_runner

ROOT = Path(__file__).resolve().parents[1]


def make_config(tmp_path, url, n=40, temperature=0.0, edit=None):
    data = tmp_path / "data.jsonl"
    rows = [{"id": f"q{i}", "question": f"question {i}", "answer": f"answer: question {i}"} for i in range(n)]
    if edit:
        rows[edit[0]]["question"] = edit[1]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(f"""
benchmarks:
  bench:
    adapter: file
    splits: {{test: {{path: {data}}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
models:
  m:
    runner: litellm
    model: hosted_vllm/mock
    api_base: {url}
    params: {{temperature: {temperature}, max_tokens: 8}}
""")
    return cfg


def rollouts(cfg_path, journal, concurrency=4):
    cfg = load_config(cfg_path)
    split, model = cfg.split("bench/test"), cfg.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    return pipeline.run_rollouts(split, model, prompts, build_runner(model),
                                 RunSettings(concurrency=concurrency, timeout_s=10), journal_file=journal)


CHILD = """
import sys
sys.path.insert(0, {root!r})
from tests.test_resume import rollouts
rollouts({cfg!r}, {journal!r}, concurrency=2)
"""


def journaled(journal: Path) -> set[str]:
    if not journal.exists():
        return set()
    con = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
    try:
        return {r[0] for r in con.execute("SELECT sample_id FROM done")}
    except sqlite3.OperationalError:  # table not created yet
        return set()
    finally:
        con.close()


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_calling_the_model_only_for_missing_samples(tmp_path, home):
    with serve_in_thread(MockLLM(latency=0.1)) as (mock, url):
        cfg = make_config(tmp_path, url, n=40)
        journal = tmp_path / "journal.sqlite"
        child = subprocess.Popen([sys.executable, "-c", CHILD.format(root=str(ROOT), cfg=str(cfg), journal=str(journal))],
                                 env={**os.environ, "DAGSTER_HOME": str(home)})
        deadline = time.time() + 60
        while len(journaled(journal)) < 10:
            assert child.poll() is None, "the run ended before it could be killed"
            assert time.time() < deadline, "the run made no progress"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        done_before = journaled(journal)
        first = dict(mock.counts)
        assert 10 <= len(done_before) < 40, "killed midway"

        df = rollouts(cfg, journal)

        second = {p: mock.counts[p] - first.get(p, 0) for p in mock.counts}
    assert len(df) == 40 and df["sample_id"].is_unique and (df["status"] == "ok").all()
    assert list(df["raw_output"]) == [f"answer: question {i}" for i in range(40)]
    for i in range(40):
        prompt = f"question {i}"
        if f"q{i}" in done_before:
            assert second.get(prompt, 0) == 0, f"{prompt} was finished before the kill but was sent again"
            assert df.loc[df["sample_id"] == f"q{i}", "cached"].item()
        else:
            assert second.get(prompt, 0) == 1, f"{prompt} was not finished and should be sent exactly once"
    assert set(df.loc[~df["cached"], "sample_id"]) == {f"q{i}" for i in range(40)} - done_before
    assert len(journaled(journal)) == 40
    con = sqlite3.connect(journal)
    assert con.execute("SELECT count(*), count(DISTINCT sample_id) FROM done").fetchone() == (40, 40)
    con.close()


def test_fingerprints_rerun_exactly_what_changed(tmp_path, home):
    with serve_in_thread(MockLLM()) as (mock, url):
        journal = tmp_path / "journal.sqlite"
        df = rollouts(make_config(tmp_path, url, n=6), journal)
        assert mock.requests == 6 and not df["cached"].any()

        df = rollouts(make_config(tmp_path, url, n=6), journal)  # nothing changed: nothing is sent
        assert mock.requests == 6 and df["cached"].all()

        df = rollouts(make_config(tmp_path, url, n=6, temperature=0.7), journal)  # decoding changed: all re-run
        assert mock.requests == 12 and not df["cached"].any()

        df = rollouts(make_config(tmp_path, url, n=6, temperature=0.7, edit=(3, "a new question")), journal)
        assert mock.requests == 13 and mock.counts["a new question"] == 1  # only the changed prompt re-ran
        assert list(df.loc[~df["cached"], "sample_id"]) == ["q3"]
        assert df.loc[df["sample_id"] == "q3", "raw_output"].item() == "answer: a new question"
