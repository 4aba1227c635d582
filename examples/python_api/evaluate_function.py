"""Evaluate a Python function on a list of five dicts with a Python metric: no config file, no Dagster code
location to write. The results land where `evalpipe run`'s do ($DAGSTER_HOME: the warehouse, the Dagster instance),
so `evalpipe view --web` and `dagster dev` show them.

    python examples/python_api/evaluate_function.py      # again: resumes from the journal, no agent calls

`EVALPIPE_EXAMPLE_CALLS=<file>` appends one line per agent call to that file (the tests count them).
"""
import os

import evalpipe

QUESTIONS = [
    {"id": "q1", "input": "2 + 2", "target": "4", "level": 1},
    {"id": "q2", "input": "3 * 7", "target": "21", "level": 1},
    {"id": "q3", "input": "10 - 4", "target": "6", "level": 1},
    {"id": "q4", "input": "2 ** 10", "target": "1024", "level": 2},
    {"id": "q5", "input": "7 / 2", "target": "3", "level": 2},  # the calculator says 3.5
]


def note_call(question: str) -> None:
    path = os.environ.get("EVALPIPE_EXAMPLE_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(question + "\n")


@evalpipe.agent
def calculator(question: str) -> str:
    note_call(question)
    value = eval(question, {"__builtins__": {}})  # the questions above are arithmetic only
    return str(int(value)) if float(value).is_integer() else str(value)


@evalpipe.metric
def same_number(prediction: str, target: str) -> bool:
    return float(prediction) == float(target)


if __name__ == "__main__":
    results = evalpipe.evaluate(agent=calculator, dataset=QUESTIONS, metrics=[same_number], name="arithmetic",
                                slice_by=["level"])
    print(results)
    print(results.metrics[["metric", "slice", "value", "n", "ci_low", "ci_high"]].to_string(index=False))
    print("partitions:", results.partition_keys)
    print("viewer:", results.viewer_url)
