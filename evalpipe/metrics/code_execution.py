"""`code_execution`: run the generated code against the sample's tests in the sandbox (docs/sandbox.md).

The program is: the sample's `prompt` metadata (the function signature and docstring, HumanEval style; skip it
with `prepend_prompt: false`) and the code (the first fenced code block of the answer, else the whole answer).
The sandbox's harness runs it, then the sample's `test` metadata, then `check(<entry_point>)` when the sample
names an `entry_point`. It passes only when the harness reports (with a per-run nonce the code never sees)
that all of that returned: any exception (SystemExit included), an early exit (`sys.exit`, `os._exit`, an
exit in a hook), a signal, a limit or the timeout is a failure, with the cause in `reason`.

`mode`: `tests` (default): samples without `test` metadata are unscored. `runs_without_error` (as DSGym scores
data-science code): a sample without tests passes when its code runs to its end without an error; samples
with tests are still run against them. Files listed in the sample's `files` metadata (host paths) are copied
read-only into the work folder. `sandbox`: the backend (default: the config's top-level `sandbox:` key).

pass@k: draw several samples per task (the HumanEval adapter's `n_samples` option gives them ids
`<task>#<i>`); the metrics stage then adds rows `code_execution_pass@k` with the unbiased estimator of
Chen et al. (2021, evalpipe/metrics/pass_at_k.py) for each k in `pass_at_k` (default 1, 10, 100) that is at most
the samples per task.
"""
from __future__ import annotations

import asyncio
import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import CodeExecutionSettings
from evalpipe.core.config import EvalConfig
from evalpipe.sandbox import DEFAULT_DISK_MB, default_disk_mb, resolve_backend, run_tests
from evalpipe.core.types import Score

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)
_SETTINGS = {"timeout_s", "memory_mb", "disk_mb", "concurrency", "pass_at_k", "prepend_prompt", "mode", "sandbox"}
MODES = ("tests", "runs_without_error")


def extract_code(text: str | None) -> str:
    """The first fenced code block, else the text itself."""
    if not text:
        return ""
    m = _FENCE.search(text)
    return m.group(1) if m else text


@register_metric("code_execution")
class CodeExecution(Metric):
    """Settings: timeout_s (10), memory_mb (1024), disk_mb (the work folder's quota: the config's
    `sandbox_disk_mb`, else 256; 0 = none), concurrency (CPU count), pass_at_k ([1, 10, 100]), prepend_prompt
    (true), mode (tests | runs_without_error), sandbox (auto | bwrap | docker | process)."""

    name = "code_execution"
    option_schema = CodeExecutionSettings  # typed and ranged (metrics/settings.py), checked before any model call
    requires_target = False  # the tests are the ground truth

    takes_config = True  # `sandbox:` and `sandbox_disk_mb:` of the project: the defaults of its settings

    def __init__(self, config: EvalConfig | None = None, **settings: Any):
        unknown = set(settings) - _SETTINGS
        if unknown:
            raise ConfigError(f"code_execution: unknown setting(s) {sorted(unknown)}; known: {sorted(_SETTINGS)}")
        super().__init__(**settings)
        self.timeout_s = float(settings.get("timeout_s", 10.0))
        self.memory_mb = int(settings.get("memory_mb", 1024))
        disk = settings.get("disk_mb")
        if disk is not None and (isinstance(disk, bool) or not isinstance(disk, int) or disk < 0):
            raise ConfigError(f"code_execution: disk_mb must be a whole number of MB >= 0 (0: no quota), got {disk!r}")
        raw = config.raw if config is not None else {}
        self.disk_mb = default_disk_mb(raw.get("sandbox_disk_mb")) if disk is None else disk
        self.ks = [int(k) for k in settings.get("pass_at_k", [1, 10, 100])]
        self.mode = str(settings.get("mode", "tests"))
        if self.mode not in MODES:
            raise ConfigError(f"code_execution: mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        configured = raw.get("sandbox")
        self.backend = resolve_backend(settings.get("sandbox"), str(configured) if configured else None)  # fails now, before any rollout, if unusable

    def identity(self) -> dict[str, Any]:
        ident = {"metric": self.name, "timeout_s": self.timeout_s, "memory_mb": self.memory_mb,
                 "prepend_prompt": self.settings.get("prepend_prompt", True), "sandbox": self.backend}
        if self.mode != "tests":
            ident["mode"] = self.mode
        if self.disk_mb != DEFAULT_DISK_MB:  # the default stays out: fingerprints from before the quota hold
            ident["disk_mb"] = self.disk_mb
        return ident

    def parts(self, item: JudgeInput) -> tuple[str, str, str | None] | None:
        """(program, tests, entry_point), or None when the sample can't be scored in this mode."""
        test = item.metadata.get("test")
        if not test and self.mode != "runs_without_error":
            return None
        code = extract_code(item.prediction if item.prediction is not None else item.raw_output)
        prompt = item.metadata.get("prompt") if self.settings.get("prepend_prompt", True) else None
        program = "\n".join([prompt or "", code, ""]) if prompt else code
        return program, str(test or ""), (item.metadata.get("entry_point") or None) if test else None

    def program(self, item: JudgeInput) -> str | None:
        """The whole program as one text (for reading; the harness runs the parts separately)."""
        p = self.parts(item)
        if p is None:
            return None
        program, tests, entry = p
        return "\n".join([program, tests] + ([f"check({entry})"] if entry else []))

    def score(self, item: JudgeInput) -> Score:
        p = self.parts(item)
        if p is None:
            return Score.unscored("no tests for this sample")
        program, tests, entry = p
        files = item.metadata.get("files") or None
        prompt = item.metadata.get("prompt") if self.settings.get("prepend_prompt", True) else None
        r = run_tests(program, tests, entry_point=entry, setup=prompt if tests else None, timeout_s=self.timeout_s,
                      memory_mb=self.memory_mb, disk_mb=self.disk_mb, files=files, backend=self.backend)
        return Score(value=float(r.passed), correct=r.passed, reason=r.error or r.status,
                     details={"status": r.status, "error": r.error, "duration_s": round(r.duration_s, 3),
                              "isolation": r.isolation, "stderr_tail": r.stderr[-1000:] if not r.passed else "",
                              "stdout_head": r.stdout[:1000],
                              "mode": self.mode, "pass_at_k": self.ks})

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        workers = int(self.settings.get("concurrency") or os.cpu_count() or 2)
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:  # each run is a subprocess: threads suffice
            return list(await asyncio.gather(*(loop.run_in_executor(pool, self.score, i) for i in items)))


def sandbox_used(judgements: Any) -> str:
    """The sandbox backend(s) that ran this partition's code ("-" when no code ran): run metadata."""
    import json

    if judgements is None or not len(judgements) or "details" not in judgements:
        return "-"
    found = set()
    for raw in judgements["details"]:
        if isinstance(raw, str) and '"isolation"' in raw:
            try:
                iso = json.loads(raw).get("isolation")
            except (ValueError, AttributeError):
                continue
            if iso:
                found.add(str(iso))
    return ", ".join(sorted(found)) or "-"
