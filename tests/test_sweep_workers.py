"""[sweeps] `evalpipe run`'s batches in worker processes (eval_assets/sweep_workers.py; docs/scale.md "Sweeps"): the
results equal one process's, a failing partition keeps its batch-mates, progress arrives per sample, SIGTERM and
kill -9 leave no worker behind and a re-run repeats nothing; what a worker can't load again stays in this process."""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

from benchmarks.mock_server import MockLLM, serve_in_thread
from eval_assets import sweep_workers
from eval_assets.batch import BATCH_JOB
from eval_assets.launch import evaluate
from eval_assets.sweep_workers import even_batches, worker_spec
from evalpipe.store.warehouse import Warehouse
from tests.helpers.configs import SMOKE_JSONL
from tests.helpers.kill9 import REPO, journaled

SPLIT = "smoke/test"
ECHO = {f"echo{i}": {"runner": "echo", "reply": "target" if i % 2 else "input"} for i in range(5)}
BROKEN = {"broken": {"runner": "echo", "reply": "script", "script": [{"sample_id": "nope", "turns": ["x"]}]}}


def _config(models: dict, data=SMOKE_JSONL, **top) -> dict:
    return {"benchmarks": {"smoke": {"adapter": "file", "metrics": ["exact_match"], "splits": {"test": {"path": str(data)}},
                                     "options": {"columns": {"prompt": "question", "target": "answer", "id": "id"}}}},
            "models": models, **top}


def _scores(warehouse) -> list:
    m = Warehouse(warehouse).query("SELECT model, metric, value, n FROM metrics WHERE slice = 'all' ORDER BY model, metric")
    return [tuple(r) for r in m.itertuples(index=False)]


@pytest.mark.slow
def test_a_sweep_of_several_batches_runs_in_workers_and_equals_one_process(write_config, home, tmp_path, monkeypatch):
    from dagster import DagsterInstance

    from evalpipe.project import Project

    calls = []
    real = sweep_workers.run_in_workers
    monkeypatch.setattr(sweep_workers, "run_in_workers", lambda *a, **k: (calls.append(a[2]), real(*a, **k))[1])
    models = {**ECHO, **BROKEN}
    write_config(yaml.safe_dump(_config(models, sweep_batch_partitions=2, sweep_processes=2)))
    samples: dict = {}
    project = Project.from_file()
    r = evaluate(project, [SPLIT], list(models), on_sample=lambda s, m, d, t, *e: samples.setdefault(m, []).append((d, t)))
    assert calls == [2], "the batches went to two worker processes"
    ok = {p.model: p.success for p in r.partitions}
    assert ok == {**{m: True for m in ECHO}, "broken": False}
    assert r.partitions[-1].error.startswith("rollouts: every one of the 8 sample(s) failed")
    with DagsterInstance.get() as inst:
        runs = [x for x in inst.get_runs() if x.job_name == BATCH_JOB]
    # 6 partitions of at most 2 per run, as many runs per worker: 2, 2, 1, 1
    assert len(runs) == 4 and {p.run_id for p in r.partitions} == {x.run_id for x in runs}
    # each sample's progress reached the caller from the workers, up to the last one
    assert set(samples) == set(models) and all(v[-1] == (8, 8) for v in samples.values())
    in_workers = _scores(project.warehouse)

    other = tmp_path / "one_process"
    other.mkdir()
    (other / "dagster.yaml").write_text((home / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(other))
    single = Project.from_dict(_config(models, sweep_batch_partitions=2, sweep_processes=1), home=other)
    calls.clear()
    r1 = evaluate(single, [SPLIT], list(models))
    assert calls == [] and [p.success for p in r1.partitions] == [p.success for p in r.partitions]
    assert _scores(single.warehouse) == in_workers and len(in_workers) == len(ECHO)


def test_what_a_worker_cannot_load_again_stays_in_this_process(write_config, home, project_from, tmp_path):
    from dagster import DagsterInstance

    from evalpipe.project import Project
    from resources import ModelRunnerResource

    path = write_config(yaml.safe_dump(_config({**ECHO, "here": {"runner": "local", "model": "x.gguf"}})))
    project = Project.from_file()
    spec = worker_spec(project, {"model_runner": ModelRunnerResource(concurrency=3)}, None, {"t": "1"}, None, ["echo0"])
    assert spec is not None and spec.config_path == str(path)
    assert sweep_workers._rebuilt(spec.resources)["model_runner"].concurrency == 3
    assert worker_spec(project_from(_config(ECHO)), None, None, None, None, ["echo0"]) is None  # built in memory
    assert worker_spec(project, None, None, None, None, ["echo0", "here"]) is None  # a model loaded per process
    assert worker_spec(project, {"x": lambda: 1}, None, None, None, ["echo0"]) is None  # doesn't pickle
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "dagster.yaml").write_text((home / "dagster.yaml").read_text())
    with DagsterInstance.from_config(str(other)) as inst:
        assert worker_spec(project, None, inst, None, None, ["echo0"]) is None  # another home's instance
    time.sleep(0.01)
    path.write_text(path.read_text().replace("echo4", "echo44"))  # the file changed since the project was read
    assert worker_spec(project, None, None, None, None, ["echo0"]) is None


def test_even_batches_keep_the_size_cap_and_give_each_worker_as_much():
    keys = list(range(400))
    parts = even_batches(keys, 64, 2)
    assert [len(p) for p in parts] == [50] * 8 and sum(parts, []) == keys
    assert [len(p) for p in even_batches(list(range(65)), 64, 2)] == [33, 32]
    assert [len(p) for p in even_batches(list(range(3)), 2, 4)] == [1, 1, 1]
    assert all(len(p) <= 64 for p in even_batches(list(range(1000)), 64, 3))


def _sweep_cli(tmp_path, home, url, n_models: int, samples: int) -> tuple[dict, list, list]:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": f"question {i}", "answer": "x"}) + "\n"
                            for i in range(samples)))
    models = {f"m{i}": {"runner": "litellm", "model": f"hosted_vllm/mock-{i}", "api_base": url,
                        "params": {"max_tokens": 8}, "concurrency": 2} for i in range(n_models)}
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(yaml.safe_dump(_config(models, data, sweep_batch_partitions=2, sweep_processes=2)))
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg)}
    args = [sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", *(a for m in models for a in ("--model", m))]
    from evalpipe.pipeline.stages import journal_path

    journals = [journal_path("rollouts", SPLIT, m) for m in models]
    return env, args, journals


def _workers_of(pid: int) -> list:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if "spawn_main" in " ".join(p.cmdline())]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_stopping_evalpipe_run_stops_its_workers_and_a_rerun_repeats_nothing(tmp_path, home, how):
    with serve_in_thread(MockLLM(latency=0.5)) as (mock, url):
        # 8 partitions in 4 runs of 2, 2 workers: stopped while the first two run, the last two never start
        env, args, journals = _sweep_cli(tmp_path, home, url, n_models=8, samples=12)
        child = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while sum(len(journaled(j)) for j in journals) < 8:
            assert child.poll() is None, child.stdout.read().decode()[-3000:]
            assert time.time() < deadline, "no progress"
            time.sleep(0.05)
        workers = _workers_of(child.pid)
        assert len(workers) == 2, "the batches run in worker processes"
        child.send_signal(getattr(signal, how))
        child.wait(timeout=60)
        assert child.returncode != 0
        gone, alive = psutil.wait_procs(workers, timeout=60)
        assert not alive, f"workers left running after {how}: {alive}"
        done_before = sum(len(journaled(j)) for j in journals)
        assert done_before <= 48, "stopped midway: no run started after the signal"
        sent_before = mock.requests
        again = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert mock.requests - sent_before == 96 - done_before  # nothing repeated, nothing lost
    wh = Warehouse(home / "warehouse.duckdb")
    for i in range(8):
        df = wh.read("rollouts", {"benchmark_split": SPLIT, "model": f"m{i}"})
        assert len(df) == 12 and df["sample_id"].is_unique and (df["status"] == "ok").all()


# ---- turns: a batch's partitions compute one at a time, their model calls overlap (evalpipe/core/turns.py) --------
def test_a_thread_computes_only_in_its_turn_and_gives_it_up_while_waiting():
    import threading

    from evalpipe.core.turns import Turns, waiting

    turns, order = Turns(1), []
    a_in, a_waits, b_done = threading.Event(), threading.Event(), threading.Event()

    def a() -> None:
        with turns.turn():
            a_in.set()
            order.append("a computes")
            assert not b_done.wait(0.3)  # b can't compute meanwhile
            with waiting():
                a_waits.set()
                assert b_done.wait(5)  # b computes while a waits
            order.append("a back")

    def b() -> None:
        a_in.wait(5)
        with turns.turn():
            order.append("b computes")
        b_done.set()
    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert order == ["a computes", "b computes", "a back"]
    with waiting():  # no turn held: nothing to give up
        with waiting():
            pass


@pytest.mark.slow
def test_a_batch_keeps_every_models_requests_in_flight_while_partitions_take_turns(project_from, instance):
    # 1 s per request, 8 samples 2 at a time: each partition's requests span 4 s, longer than the others' turns
    # take under load, so all 8 partitions' requests overlap unless a turn is held through a model call
    with serve_in_thread(MockLLM(latency=1.0)) as (mock, url):
        models = {f"m{i}": {"runner": "litellm", "model": f"hosted_vllm/mock-{i}", "api_base": url,
                            "params": {"max_tokens": 8}, "concurrency": 2} for i in range(8)}
        project = project_from(_config(models))
        r = evaluate(project, [SPLIT], list(models), instance=instance)
        times = sorted(mock.times)
    assert r.success and len(times) == 64
    # in flight when each request arrived: those that arrived within the latency before it (none has answered yet)
    peak = max(sum(1 for u in times[:i + 1] if t - u < 1.0) for i, t in enumerate(times))
    assert peak >= 12, f"{peak} of 16 allowed in flight: the partitions' model calls did not overlap"


@pytest.mark.slow
def test_partitions_asking_a_judge_the_same_question_do_not_wait_on_each_others_turns(project_from, instance):
    """Two partitions of a batch with the same answers ask the judge the same questions: the second waits for the
    first's call (the judge client sends each question once) and must give its turn up meanwhile, or the first,
    whose call is done, waits for that turn to finish (CI hung here once)."""
    import asyncio
    import threading

    from evalpipe.core.types import Generation
    from evalpipe.runners import Runner, register_runner

    class SlowJudge(Runner):
        name = "slow_judge"

        async def generate(self, request):
            await asyncio.sleep(1.5)  # still answering when the other partition asks the same question
            return Generation(text="VERDICT: correct")

    register_runner("slow_judge", SlowJudge, replace=True)
    cfg = _config({"a": {"runner": "echo", "reply": "target"}, "b": {"runner": "echo", "reply": "target"}})
    cfg["benchmarks"]["smoke"]["metrics"] = [{"name": "llm_judge", "judge": "j"}]
    cfg["judges"] = {"j": {"runner": "slow_judge", "model": "j"}}
    project = project_from(cfg)
    got: list = []
    worker = threading.Thread(target=lambda: got.append(evaluate(project, [SPLIT], ["a", "b"], instance=instance)),
                              daemon=True)
    worker.start()
    worker.join(120)
    assert got, "the batch's two partitions waited on each other"
    assert got[0].success, got[0].partitions
