"""`adapter: inspect_log`: the samples of an Inspect AI eval log as a benchmark split (docs/interop.md).

    benchmarks:
      their_task:
        adapter: inspect_log
        splits: {test: {path: logs/2026-01-01_their-task_abc.eval}}   # relative to the config file's folder
        metrics: [exact_match]

Each sample of the log's first epoch is a sample here: its id, its input (the text, or the chat messages Inspect
sent), its target and choices, its metadata. With `runner: replay` over the same log the Inspect run's outputs
are scored by our metrics, and compared and ranked beside our models on this split.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.core.errors import ConfigError
from evalpipe.core.file_caps import OPTION, split_cap
from evalpipe.core.types import Sample


@register_adapter("inspect_log")
class InspectLogAdapter(Adapter):
    """Samples (id, input, target) read from an Inspect AI `.eval` log."""

    name = "inspect_log"
    # max_file_mb: the size cap on each log (evalpipe/core/file_caps.py); inspect_task / inspect_model: which logs
    # of a folder (an `inspect eval-set` log dir) when it holds more than one task or model
    option_schema = {"path", "inspect_task", "inspect_model", OPTION}

    def _read(self) -> list[dict[str, Any]]:
        from evalpipe.interop.inspect_log import read_samples

        return read_samples(self._path(), split_cap(self.split.key, self.options), self.options.get("inspect_task"),
                            self.options.get("inspect_model"))

    def _path(self) -> Path:
        spec = self.options.get("path")
        if not spec:
            raise ConfigError(f"{self.split.key}: the inspect_log adapter needs 'path' (an Inspect `.eval` log, or a folder of logs)")
        return self.split.resolve(str(spec))

    def metrics(self) -> list[Any]:
        """The split's `metrics:` (default exact_match) and, beside them, `inspect_scores` (the log's own scorers'
        values, evalpipe/metrics/inspect_scores.py) when the log's samples were scored."""
        configured = super().metrics()
        scored = any("inspect_scores" in row["metadata"] for row in self._read())
        if scored and "inspect_scores" not in configured:
            return ["inspect_scores", *configured]
        return configured

    def load(self) -> Iterator[Sample]:
        for row in self._read():
            messages = row["input"] if isinstance(row["input"], list) else None
            text = row["input"] if messages is None else next(
                (m["content"] for m in reversed(messages) if m["role"] == "user"), "")
            yield Sample(id=row["id"], input=text, target=row["target"] or None, metadata=row["metadata"],
                         choices=row["choices"], messages=messages)

    def source_version(self) -> str | None:
        path = self._path()
        return files_version(sorted(path.rglob("*.eval")) if path.is_dir() else [path])
