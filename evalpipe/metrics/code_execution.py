"""`code_execution`: run the generated code against the sample's tests in the sandbox (evalpipe/sandbox.py).

The program is: the sample's `prompt` metadata (the function signature and docstring, HumanEval style; skip it
with `prepend_prompt: false`), the code (the first fenced code block of the answer, else the whole answer),
the sample's `test` metadata, then `check(<entry_point>)` when the sample names an `entry_point`. It passes when
it exits normally within the time limit. Samples without `test` metadata are unscored.

pass@k: draw several samples per task (the HumanEval adapter's `n_samples` option gives them ids
`<task>#<i>`); the metrics stage then adds rows `code_execution_pass@k` with the unbiased estimator of
Chen et al. (2021) for each k in `pass_at_k` (default 1, 10, 100) that is at most the samples per task.
"""
from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from evalpipe.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.sandbox import run_python
from evalpipe.types import Score

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)
_SETTINGS = {"timeout_s", "memory_mb", "concurrency", "pass_at_k", "prepend_prompt"}


def extract_code(text: str | None) -> str:
    """The first fenced code block, else the text itself."""
    if not text:
        return ""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k), as a stable product."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def task_of(sample_id: str) -> str:
    """Samples of one task are named `<task>#<i>`."""
    return sample_id.split("#", 1)[0]


@register_metric("code_execution")
class CodeExecution(Metric):
    """Settings: timeout_s (10), memory_mb (1024), concurrency (CPU count), pass_at_k ([1, 10, 100]),
    prepend_prompt (true)."""

    name = "code_execution"
    requires_target = False  # the tests are the ground truth

    def __init__(self, **settings: Any):
        unknown = set(settings) - _SETTINGS
        if unknown:
            raise ConfigError(f"code_execution: unknown setting(s) {sorted(unknown)}; known: {sorted(_SETTINGS)}")
        super().__init__(**settings)
        self.timeout_s = float(settings.get("timeout_s", 10.0))
        self.memory_mb = int(settings.get("memory_mb", 1024))
        self.ks = [int(k) for k in settings.get("pass_at_k", [1, 10, 100])]

    def identity(self) -> dict[str, Any]:
        return {"metric": self.name, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                "prepend_prompt": self.settings.get("prepend_prompt", True)}

    def program(self, item: JudgeInput) -> str | None:
        test = item.metadata.get("test")
        if not test:
            return None
        code = extract_code(item.prediction if item.prediction is not None else item.raw_output)
        prompt = item.metadata.get("prompt") if self.settings.get("prepend_prompt", True) else None
        entry = item.metadata.get("entry_point")
        parts = [prompt or "", code, "", str(test)]
        if entry:
            parts.append(f"\ncheck({entry})\n")
        return "\n".join(parts)

    def score(self, item: JudgeInput) -> Score:
        program = self.program(item)
        if program is None:
            return Score.unscored("no tests for this sample")
        r = run_python(program, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        return Score(value=float(r.passed), correct=r.passed, reason=r.error or r.status,
                     details={"status": r.status, "error": r.error, "duration_s": round(r.duration_s, 3),
                              "isolation": r.isolation, "stderr_tail": r.stderr[-1000:] if not r.passed else "",
                              "pass_at_k": self.ks})

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        workers = int(self.settings.get("concurrency") or os.cpu_count() or 2)
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # each run is a subprocess: threads suffice
            return list(await asyncio.gather(*(loop.run_in_executor(pool, self.score, i) for i in items)))
