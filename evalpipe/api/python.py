"""The Python-first path of `evalpipe.evaluate`: an agent, a dataset and metrics given as Python objects become a
project built in memory (one benchmark entry for the dataset, one model entry for the agent, the metrics), run
through the same asset graph, Dagster instance and DuckDB warehouse as `evalpipe run`.

Functions live in this process's registries under their source fingerprints (evalpipe/core/callables.py): the
agent as `runner: function` (evalpipe/runners/function.py), each metric under its name with the setting
`source: <fingerprint>` (evalpipe/metrics/function.py), in-memory records as `adapter: records`
(evalpipe/benchmarks/records.py), tools in the tool registry. A re-run of unchanged functions on the same data
resumes from the journal; an edited function is a new identity, and its partitions show stale in Dagster.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Iterable

from evalpipe.api.decorators import AgentFunction, MetricFunction, ToolFunction
from evalpipe.core.errors import ConfigError
from evalpipe.core.keys import sanitize_key

DATA_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".tsv", ".parquet", ".pq")
SPLIT = "test"  # the one split of a dataset given in Python


def load_base_config(config: str | os.PathLike | None) -> tuple[dict[str, Any], Path]:
    """The raw dict of a config file (its benchmarks, models, judges to draw from) and the folder its relative paths
    resolve from; without a file, an empty config resolving from the working directory."""
    if config is None:
        return {}, Path.cwd()
    from evalpipe.project.schema import validate_file

    path = Path(config).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"config file {path} not found; pass config=<path to evals.yaml> or leave it out")
    return copy.deepcopy(validate_file(path)), path.parent


# ---- the dataset --------------------------------------------------------------------------------------------------
def dataset_entry(dataset: Any, base: dict[str, Any], base_dir: Path, columns: dict[str, Any] | None,
                  name: str | None) -> tuple[str, dict[str, Any]]:
    """(benchmark name, benchmark entry) for `dataset`: a benchmark of the base config, a data file, or records."""
    from evalpipe.benchmarks.records import columns_of, register_records, resolve_columns

    if isinstance(dataset, dict) and "adapter" in dataset:  # a benchmark entry given in Python, as in evals.yaml
        return name or sanitize_key(str(dataset["adapter"])), copy.deepcopy(dataset)
    if isinstance(dataset, (str, os.PathLike)):
        text = str(dataset)
        configured = base.get("benchmarks") or {}
        if text in configured:
            if columns:
                raise ConfigError(f"columns= applies to a list, a DataFrame or a data file; benchmark {text!r} "
                                  f"maps its columns in the config")
            return text, copy.deepcopy(configured[text])
        path = Path(text).expanduser()
        path = path if path.is_absolute() else (base_dir / path)
        if path.suffix.lower() in DATA_SUFFIXES or path.exists():
            if not path.is_file():
                raise ConfigError(f"dataset file {path} not found")
            from evalpipe.benchmarks.file import RowReader

            rows = RowReader(path.resolve())
            first = next(iter(rows), None)
            present = list(rows.columns) if first is not None else []
            mapping = resolve_columns(present, columns)
            return name or sanitize_key(path.stem), {
                "adapter": "file", "splits": {SPLIT: {"path": str(path.resolve())}},
                "options": {"columns": mapping}}
        known = ", ".join(sorted(configured)) or "none configured"
        raise ConfigError(f"dataset {text!r} is neither a benchmark of the config ({known}) nor a data file "
                          f"({', '.join(DATA_SUFFIXES)})")
    key = register_records(dataset)
    from evalpipe.benchmarks.records import RECORDS

    mapping = resolve_columns(columns_of(RECORDS[key]), columns)
    return name or f"records-{key[:8]}", {"adapter": "records", "splits": [SPLIT],
                                          "options": {"records": key, "columns": mapping}}


# ---- the agent ----------------------------------------------------------------------------------------------------
def model_entry(agent: Any, base: dict[str, Any], name: str | None) -> tuple[str, dict[str, Any]]:
    """(model key, model entry) for `agent`: a function, a Runner class or instance, or a model string (a model
    key of the base config, or a litellm model string like `openai/gpt-4o-mini`)."""
    from evalpipe.runners.base import Runner
    from evalpipe.runners.function import register_function, runner_class_entry

    if isinstance(agent, str):
        configured = base.get("models") or {}
        if agent in configured:
            return agent, copy.deepcopy(configured[agent])
        if "/" in agent:  # litellm's provider/model form
            return sanitize_key(name or agent), {"runner": "litellm", "model": agent}
        known = ", ".join(sorted(configured)) or "none configured"
        raise ConfigError(f"unknown model {agent!r} (configured: {known}); pass a function, a Runner, a litellm "
                          f"model string such as 'openai/gpt-4o-mini', or config=<file> that declares it")
    if isinstance(agent, Runner) or (isinstance(agent, type) and issubclass(agent, Runner)):
        cls = agent if isinstance(agent, type) else type(agent)
        key = sanitize_key(name or getattr(cls, "name", None) or cls.__name__)
        return key, runner_class_entry(agent, key)
    if isinstance(agent, AgentFunction):
        name, fn = name or agent.name, agent.fn
    elif callable(agent) and not isinstance(agent, type):
        from evalpipe.core.callables import callable_name

        name, fn = name or callable_name(agent), agent
    else:
        raise ConfigError(f"agent must be a function, a Runner or a model string; got {type(agent).__name__}")
    if name == "<lambda>":
        raise ConfigError("a lambda has no name to store results under; pass model_name='my_agent' or use def")
    key = sanitize_key(name)
    return key, {"runner": "function", "model": name, "options": {"function": register_function(fn)}}


# ---- metrics and tools --------------------------------------------------------------------------------------------
def metric_specs(metrics: Iterable[Any] | None) -> list[Any] | None:
    """Config entries for `metrics`: names (and `{name: ..., <settings>}` entries) as they are, functions and
    Metric classes or instances registered in this process. None: the dataset's default metrics."""
    if metrics is None:
        return None
    from evalpipe.metrics.base import Metric, get_metric, register_metric
    from evalpipe.metrics.function import register_function_metric

    if isinstance(metrics, (str, dict)) or callable(metrics) and not isinstance(metrics, type):
        metrics = [metrics]
    out: list[Any] = []
    for m in metrics:
        if isinstance(m, str):
            get_metric(m)  # an unknown name fails here, naming the metrics there are
            out.append(m)
        elif isinstance(m, dict):
            if "name" not in m:
                raise ConfigError(f"metric entry {m!r} needs 'name'")
            get_metric(str(m["name"]))
            out.append(dict(m))
        elif isinstance(m, MetricFunction):
            out.append(register_function_metric(m.fn, m.name, higher_is_better=m.higher_is_better,
                                                requires_target=m.requires_target))
        elif isinstance(m, type) and issubclass(m, Metric):
            _register_metric_class(m, register_metric, get_metric)
            out.append(m.name)
        elif isinstance(m, Metric):
            if _registered_as(m.name, type(m), get_metric):  # a registered class: its entry with the settings
                out.append({"name": m.name, **dict(getattr(m, "settings", None) or {})})
                continue
            _register_metric_class(type(m), register_metric, get_metric, instance=m)
            out.append(m.name)
        elif callable(m):
            out.append(register_function_metric(m))
        else:
            raise ConfigError(f"metric {m!r} must be a name, a function or a Metric; got {type(m).__name__}")
    if not out:
        raise ConfigError("metrics=[] evaluates nothing; give at least one metric, or leave metrics out for the "
                          "dataset's defaults")
    return out


def _registered_as(name: str, cls: type, get_metric: Any) -> bool:
    try:
        return get_metric(name) is cls
    except ConfigError:
        return False


_REGISTERED_HERE: set[str] = set()  # metric names this module registered (a redefined class may replace them)


def _register_metric_class(cls: type, register_metric: Any, get_metric: Any, instance: Any = None) -> None:
    """Register a Metric class (or one instance of it, used as it is) under the class's `name`; a name held by a
    built-in or plugin metric is refused."""
    name = getattr(cls, "name", "base")
    if name in ("base", "", None):
        raise ConfigError(f"Metric class {cls.__name__} needs a `name` class attribute (its row in the metrics table)")
    try:
        current = get_metric(name)
    except ConfigError:
        current = None
    if current is not None and current is not cls and name not in _REGISTERED_HERE:
        raise ConfigError(f"metric name {name!r} is taken by a built-in or plugin metric; give {cls.__name__} "
                          f"another `name`")
    if current is cls and instance is None:
        return  # already registered as it is (e.g. a built-in class)
    _REGISTERED_HERE.add(name)
    if instance is None:
        register_metric(name, cls, replace=True)
        return

    def factory(**settings: Any) -> Any:  # the instance as given: its settings are its own
        return instance
    factory.__module__ = cls.__module__  # the user's component, not a built-in one
    for attr in ("higher_is_better", "kind", "aggregates", "option_schema"):
        setattr(factory, attr, getattr(cls, attr, None))
    factory.aggregates = getattr(cls, "aggregates", None) or {}  # type: ignore[attr-defined]
    factory.kind = getattr(cls, "kind", "score")  # type: ignore[attr-defined]
    register_metric(name, factory, replace=True)


def tool_specs(tools: Iterable[Any] | None) -> list[str]:
    """Registered tool names for `tools` (functions, `@evalpipe.tool`s, or names of registered tools). Each function
    is registered as `<name>@<fingerprint>`: an edited tool changes the rollouts' identity."""
    from evalpipe.tools.base import get_tool, register_tool

    out = []
    for t in tools or []:
        if isinstance(t, str):
            get_tool(t)
            out.append(t)
            continue
        if not isinstance(t, ToolFunction):
            if not callable(t):
                raise ConfigError(f"tool {t!r} must be a function, an @evalpipe.tool or a registered tool name")
            t = ToolFunction(t)
        spec = f"{t.name}@{t.fingerprint}"
        register_tool(spec, lambda options, t=t: t.tool(), replace=True)
        out.append(spec)
    return out


# ---- the project --------------------------------------------------------------------------------------------------
def source_routes(metrics_by_source: Any) -> dict[str, list[Any]]:
    """`metrics_by_source=` as the split option: each source's metrics as `metric_specs` makes them (functions and
    Metric objects registered), an empty list kept empty (that source gets only the split's `metrics`)."""
    if not isinstance(metrics_by_source, dict) or not metrics_by_source:
        raise ConfigError(f"metrics_by_source= takes a non-empty dict {{source: [metric, ...]}} (\"*\": every other "
                          f"source), got {metrics_by_source!r}")
    return {str(source): metric_specs(specs) if specs else [] for source, specs in metrics_by_source.items()}


def callable_spec(fn: Any, label: str) -> str:
    """`package.module:function` naming `fn` (what a split option such as `calculate_metrics` holds; it is imported
    by name where the metrics are computed), or the string given. Nested functions and lambdas have no such name."""
    if isinstance(fn, str):
        return fn
    from evalpipe.core.registry import import_callable

    spec = f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', '')}"
    try:
        found = import_callable(spec, label) if callable(fn) and "<" not in spec else None
    except ConfigError:
        found = None
    if found is not fn:
        raise ConfigError(f"{label}= takes a function defined at the top level of a module (or its "
                          f"'package.module:function' name): {fn!r} can't be found by name")
    return spec


def build_raw_config(agent: Any, dataset: Any, metrics: Any, *, config: str | os.PathLike | None = None,
                     columns: dict[str, Any] | None = None, name: str | None = None, model_name: str | None = None,
                     tools: Iterable[Any] | None = None, prompt_template: str | None = None,
                     slice_by: list[str] | None = None, params: dict[str, Any] | None = None,
                     metrics_by_source: dict[str, Any] | None = None, route_by: str | None = None,
                     calculate_metrics: Any = None) -> tuple[dict[str, Any], Path, str, str]:
    """(raw config, base folder, benchmark name, model key) of one Python-API call: the base config's judges and
    settings, with exactly one benchmark (the dataset) and one model (the agent). `metrics_by_source`, `route_by`
    and `calculate_metrics` are the dataset's split options (docs/metrics.md)."""
    base, base_dir = load_base_config(config)
    bench, entry = dataset_entry(dataset, base, base_dir, columns, name)
    specs = metric_specs(metrics)
    if specs is not None:
        entry["metrics"] = specs
    if prompt_template is not None:
        entry["prompt_template"] = prompt_template
    if slice_by is not None:
        entry.setdefault("options", {})["slice_by"] = list(slice_by)
    if metrics_by_source is not None:
        entry.setdefault("options", {})["metrics_by_source"] = source_routes(metrics_by_source)
    if route_by is not None:
        entry.setdefault("options", {})["route_by"] = str(route_by)
    if calculate_metrics is not None:
        entry.setdefault("options", {})["calculate_metrics"] = callable_spec(calculate_metrics, "calculate_metrics")
    live = tool_specs(tools)
    if live:
        entry["tools"] = {**(entry.get("tools") or {}), "live": [*((entry.get("tools") or {}).get("live") or []),
                                                                  *live], "mode": "live"}
    key, model = model_entry(agent, base, model_name)
    if params:
        model["params"] = {**(model.get("params") or {}), **params}
    raw = {k: v for k, v in base.items() if k not in ("benchmarks", "models", "default_models", "default_benchmarks")}
    raw.update({"benchmarks": {bench: entry}, "models": {key: model}, "default_models": [key],
                "default_benchmarks": [bench]})
    return raw, base_dir, bench, key
