"""The benchmark's task for Inspect AI (benchmarks/bench_light_run.py, bench_rollouts.py): the same JSONL file
(id, question, answer) that evalpipe reads, one user turn per sample, the same exact-match scoring.

    inspect eval benchmarks/peers/inspect_task.py@bench -T data=bench.jsonl --model openai-api/mock/mock-model \
        --model-base-url http://127.0.0.1:<port>/v1 --max-connections 100 --cache true
"""
from inspect_ai import Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.scorer import exact
from inspect_ai.solver import generate


@task
def bench(data: str) -> Task:
    return Task(dataset=json_dataset(data, FieldSpec(input="question", target="answer", id="id")),
                solver=generate(), scorer=exact())
