"""Benchmark adapters: how a benchmark's samples are loaded, prompted, answered and sliced."""
from __future__ import annotations

import os
from typing import Any, Callable, Iterable

from evalpipe.core.config import SplitConfig
from evalpipe.core.file_caps import DEFAULT_CAP, FileCap, read_text
from evalpipe.benchmarks.routing import SourceRouter
from evalpipe.core.registry import Registry, import_callable
from evalpipe.core.types import Sample


class Adapter:
    """Base adapter. Subclasses implement `load`; the rest has sensible defaults.

    An adapter is built per benchmark split from its `SplitConfig` (options, prompt template, metrics).
    """

    name = "base"
    default_metrics: list[Any] = ["exact_match"]

    def __init__(self, split: SplitConfig):
        self.split = split
        self.options = dict(split.options)

    def load(self) -> Iterable[Sample]:
        raise NotImplementedError

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        """Chat messages for one sample. The default sends the input as the user turn; chat messages the dataset
        gives natively (`Sample.messages`) are sent as they are."""
        if sample.messages:
            return [dict(m) for m in sample.messages]
        messages = []
        if sample.system:
            messages.append({"role": "system", "content": sample.system})
        messages.append({"role": "user", "content": sample.input})
        return messages

    def extract_answer(self, output: str | None) -> str | None:
        """The answer part of a raw model output, before scoring. The raw output is kept separately."""
        return output.strip() if isinstance(output, str) else output

    def slices(self, sample: Sample) -> dict[str, str]:
        """Sample attributes to report metrics by (besides `all`), e.g. {"level": "1"}."""
        keys = self.options.get("slice_by") or []
        return {k: str(sample.metadata[k]) for k in keys if sample.metadata.get(k) is not None}

    def metrics(self) -> list[Any]:
        router = SourceRouter.of(self.split.key, self.options)
        if router is not None:  # [routing] the split's `metrics:` for every sample, plus each source's own
            return router.metrics(list(self.split.metrics or []))
        return list(self.split.metrics) if self.split.metrics is not None else list(self.default_metrics)

    def calculate_metrics(self, judgements: Any) -> list[dict[str, Any]]:
        """Extra rows of the split's `metrics` table, computed from its per-sample judgements (design_refs 001's
        per-benchmark `calculate_metrics`; docs/metrics.md "Per-benchmark summary rows"): a frame with one row per
        sample and metric (`sample_id`, `metric`, `status`, `score`, `target`, `slices`, `details`; epochs already
        reduced). Each row is a dict with at least `metric` and `value`. An adapter overrides this; the split option
        `calculate_metrics: package.module:function` names such a function for any adapter. Default: none."""
        spec = self.options.get("calculate_metrics")
        if not spec:
            return []
        return import_callable(str(spec), f"{self.split.key}: calculate_metrics {spec!r}")(judgements)

    def source_version(self) -> str | None:
        """A cheap token that changes whenever what `load` reads changes (e.g. the files' size and mtime), or
        None when the adapter can't tell without loading. With a token, `evalpipe run` skips re-materializing
        an unchanged split's `dataset` (eval_assets/launch.py); None: it is loaded again on every run."""
        return None


def files_version(paths: Iterable[Any]) -> str:
    """Size and modification time of each file (`missing` for an absent one): a `source_version` token."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            out.append(f"{p}:missing")
    return "|".join(out)


_ADAPTERS: Registry[Adapter] = Registry("benchmark adapter")


def read_json_array(path: Any, what: str = "questions", cap: FileCap = DEFAULT_CAP) -> list[Any]:
    """A JSON file holding one array (QRData's and DSGym's question files), read under `cap`, or a one-line
    DataError naming the file and what is wrong with it."""
    import json

    from evalpipe.core.errors import DataError

    try:
        items = json.loads(read_text(path, cap))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path} line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(items, list):
        raise DataError(f"{path}: expected a JSON array of {what}")
    return items


def register_adapter(name: str, factory: Callable[[SplitConfig], Adapter] | None = None, *, replace: bool = False):
    """Register an adapter factory (a class or a function taking a SplitConfig). Also usable as a decorator."""
    return _ADAPTERS.register(name, factory, replace=replace)


def get_adapter(name: str) -> Callable[[SplitConfig], Adapter]:
    return _ADAPTERS.get(name)


def list_adapters() -> list[str]:
    return _ADAPTERS.names()


def adapter_for(split: SplitConfig) -> Adapter:
    return get_adapter(split.adapter)(split)


def dataset_header(split: SplitConfig | None) -> dict[str, Any] | None:
    """The split's dataset header (docs/reproducibility.md) for the run manifest; None when the split has none, its
    adapter reads none, or it cannot be read now (the manifest is written anyway)."""
    if split is None:
        return None
    try:
        adapter = adapter_for(split)
        return adapter.header() if hasattr(adapter, "header") else None
    except Exception:
        return None
