"""Document 003 (the GAIA lab, ../shared/design_refs/003_*): its Python calls as the document writes them, each one
that docs/design_refs.md says works. Only names of data that must be local are adapted (`data_dir=` the shipped
GAIA-format sample; the Hub download is the Hub client's, replaced here by a copy of that sample)."""
import asyncio
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalpipe import GAIA, ConfigError
from tests.helpers.cli import cli_in_process

REPO = Path(__file__).parents[1]
SAMPLE = REPO / "data" / "gaia_sample"
TOKEN = "hf_doc003SecretTokenValue1234567890"


@dataclass
class Task:  # the lab's types, as the test's own (evalpipe hands the runner a task with the same fields)
    task_id: str
    question: str


@dataclass
class Prediction:
    prediction: str
    messages: list | None = None


@dataclass
class Evaluation:
    is_correct: bool
    score: float


def evaluate_task(task, prediction) -> Evaluation:  # the lab's sample evaluator, as written
    is_correct = (task.answer or "").lower() in prediction.prediction.lower()
    return Evaluation(is_correct=is_correct, score=1 if is_correct else 0)


ANSWERS = {}


async def run_task(task) -> Prediction:  # knows the answer of the level-1 tasks
    return Prediction(prediction=ANSWERS.get(task.question, "I don't know") if task.metadata.get("Level") in (1, "1")
                      else "I don't know")


def _answers():
    import pandas as pd

    for p in SAMPLE.rglob("metadata.parquet"):
        for row in pd.read_parquet(p).to_dict("records"):
            ANSWERS[row["Question"]] = f"FINAL ANSWER: {row['Final answer']}"


_answers()


def _files_hold(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_the_constructor_arguments_and_run_as_written(home, tmp_path):
    runner = GAIA(evaluator=evaluate_task, data_dir=str(SAMPLE), hf_token=TOKEN)
    results = asyncio.run(runner.run(
        run_task,
        level=1,
        max_n=5,
        parallel=2,
        timeout=60
    ))
    assert results.success, results.errors
    # the official scorer and the lab's evaluator, both reported; the runner knows every level-1 answer
    assert results.score("gaia") == 1.0 and results.score("evaluate_task") == 1.0
    assert TOKEN not in repr(runner) and not _files_hold(home, TOKEN)


def test_run_out_is_the_file_evalpipe_view_shows_with_verdicts(home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = GAIA()
    results = asyncio.run(runner.run(
        run_task,
        level=[1, 2],
        max_n=10,
        parallel=3,
        timeout=120,
        out="results.jsonl"
    ))
    assert results.success, results.errors
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == len(results.samples) and all("gaia" in r["scores"] for r in lines)
    levels = {str(r["metadata"]["Level"]) for r in lines}
    assert levels == {"1", "2"}
    invoke = cli_in_process(monkeypatch)
    level1 = sum(str(r["metadata"]["Level"]) == "1" for r in lines)
    out = invoke("view", "results.jsonl", "--level", "1", "--json")
    assert out.exit_code == 0, out.output
    assert len(json.loads(out.output[out.output.index("["):])) == level1
    out = invoke("view", "results.jsonl", "--correct-only", "--json")
    right = sum(bool(r["scores"]["gaia"]["correct"]) for r in lines)
    assert 0 < right <= level1 and len(json.loads(out.output[out.output.index("["):])) == right
    out = invoke("view", "results.jsonl", "--metric", "gaia")
    assert out.exit_code == 0 and "available: none" not in out.output and "level=1" in out.output, out.output


def test_hf_token_goes_to_the_hub_client_only(home, tmp_path, monkeypatch):
    seen = {}

    def snapshot_download(repo_id, **kw):  # the Hub client: a copy of the shipped sample stands in for GAIA
        seen.update(kw, repo_id=repo_id)
        target = Path(kw["cache_dir"]) / "snapshot"
        if not target.exists():
            shutil.copytree(SAMPLE, target)
        return str(target)

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    data_dir = tmp_path / "gaia_cache"  # empty: the lab downloads into it
    results = asyncio.run(GAIA(data_dir=data_dir, hf_token=TOKEN).run(run_task, level=1, max_n=2))
    assert results.success, results.errors
    assert seen["token"] == TOKEN and seen["repo_id"] == "gaia-benchmark/GAIA" and seen["cache_dir"] == data_dir
    assert not _files_hold(home, TOKEN) and not _files_hold(data_dir, TOKEN)


def test_what_cannot_be_honoured_is_refused_when_built(home, tmp_path):
    with pytest.raises(ConfigError, match="EVALS_TRACING"):
        GAIA(telemetry_config=object())
    with pytest.raises(ConfigError, match="unknown option 'hf_tokn'"):
        GAIA(hf_tokn=TOKEN)
    with pytest.raises(ConfigError, match="path=.*data_dir=.*not both"):
        GAIA(path=SAMPLE, data_dir=SAMPLE)
    # offline, an empty data_dir can't be filled: one line, the token nowhere in it
    with pytest.raises(Exception) as err:
        asyncio.run(GAIA(data_dir=tmp_path / "empty", hf_token=TOKEN).run(run_task, level=1, max_n=1))
    assert "\n" not in str(err.value) and TOKEN not in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)
