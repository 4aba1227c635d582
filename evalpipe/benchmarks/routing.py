"""Metric routing per sample by its source (design_refs 001: processers chosen per sample by `source`).

A split option `metrics_by_source: {<source>: [metric, ...], "*": [...]}` judges each sample only with the metrics
of its source: the value of the metadata field `route_by` (default `source`). `"*"` covers every source not named.
Metrics under the split's `metrics:` judge every sample besides; the adapter's default metrics are not used. A
metric named for some sources only has no judgement row at all for the others (not an `unscored` one), so its
`n` counts only the samples routed to it. A sample whose source is not named (and no `"*"`) fails the `prompts`
stage, before any model call, naming the sample and the source.
"""
from __future__ import annotations

from typing import Any, Iterable

from evalpipe.core.errors import DataError

ANY_SOURCE = "*"
DEFAULT_ROUTE_BY = "source"


def spec_name(spec: Any) -> str:
    """The metric name of a config entry (`"exact_match"` or `{name: exact_match, ...}`)."""
    return str(spec.get("name") if isinstance(spec, dict) else spec)


class SourceRouter:
    """The routes of one split; `None` from `of(split)` when the split routes nothing."""

    def __init__(self, split_key: str, routes: dict[str, list[Any]], route_by: str):
        self.split_key, self.routes, self.route_by = split_key, routes, route_by
        self.sources_of_metric: dict[str, set[str]] = {}
        for source, specs in routes.items():
            for spec in specs or []:
                self.sources_of_metric.setdefault(spec_name(spec), set()).add(str(source))

    @classmethod
    def of(cls, split_key: str, options: dict[str, Any]) -> "SourceRouter | None":
        routes = options.get("metrics_by_source")
        if not routes:
            return None
        return cls(split_key, {str(k): list(v or []) for k, v in dict(routes).items()},
                   str(options.get("route_by") or DEFAULT_ROUTE_BY))

    def metrics(self, shared: list[Any]) -> list[Any]:
        """`shared` (the split's `metrics:`, judging every sample) then each routed metric once, in the order the
        routes name them (the first entry of a name is its settings)."""
        out, seen = list(shared), {spec_name(s) for s in shared}
        for specs in self.routes.values():
            for spec in specs or []:
                if spec_name(spec) not in seen:
                    seen.add(spec_name(spec))
                    out.append(spec)
        return out

    def source(self, metadata: Any) -> str | None:
        value = metadata.get(self.route_by) if isinstance(metadata, dict) else None
        return None if value is None else str(value)

    def route(self, source: str | None) -> str | None:
        """The routes' key for a sample of `source`: itself, else `*`; None when neither is named."""
        if source is not None and source in self.routes:
            return source
        return ANY_SOURCE if ANY_SOURCE in self.routes else None

    def judges(self, metric: str, source: str | None) -> bool:
        """Whether `metric` judges a sample of `source`: a metric no route names judges every sample."""
        sources = self.sources_of_metric.get(metric)
        return sources is None or self.route(source) in sources

    def expected_samples(self, ids: Iterable[str], metadata: Iterable[Any]) -> dict[str, set[str]]:
        """Per routed metric, the sample ids it judges (for the samples_accounted check); metrics no route names
        judge every sample and are left out."""
        sources = [(sid, self.source(meta)) for sid, meta in zip(ids, metadata)]
        return {m: {sid for sid, src in sources if self.judges(m, src)} for m in self.sources_of_metric}

    def check(self, ids: Iterable[str], metadata: Iterable[Any]) -> None:
        """DataError for the first sample no route covers (one line: the sample, its source, the fix)."""
        for sid, meta in zip(ids, metadata):
            source = self.source(meta)
            if self.route(source) is None:
                named = ", ".join(k for k in self.routes)
                what = f"source {source!r}" if source is not None else f"no {self.route_by!r} field"
                raise DataError(f"{self.split_key}: sample {sid} has {what}, which metrics_by_source does not name "
                                f"(it names {named}); add it, or a \"*\" entry for every other source")
