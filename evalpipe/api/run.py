"""`evaluate_python`: one Python-API evaluation, from the in-memory project (evalpipe/api/python.py) to `Results`.

No side effects on the process: no environment variable is written, no working directory changed, no logging
configured; Dagster's preview/beta/deprecation notices raised during the call are dropped for the call only.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Iterator

from evalpipe.api.python import build_raw_config
from evalpipe.api.config_run import EvalResult
from evalpipe.api.instance import project_instance
from evalpipe.api.results import Results, read_results
from evalpipe.core.errors import ConfigError

PYTHON_OPTION_NAMES = ("config", "columns", "name", "model_name", "tools", "prompt_template", "slice_by", "params",
                       "limit", "concurrency", "timeout_s", "instance", "warehouse", "run_id",
                       "reload_datasets", "epochs", "epochs_reducer", "sample_ids", "output_path",
                       "metrics_by_source", "route_by", "calculate_metrics")
_PROJECT_OPTIONS = ("config", "columns", "name", "model_name", "tools", "prompt_template", "slice_by", "params",
                    "metrics_by_source", "route_by", "calculate_metrics")


# Modules whose warnings are Dagster's about our code location, never the user's: Dagster itself, and our asset
# and resource modules, which warn about nothing of their own (Dagster attributes the notices of the APIs they call,
# e.g. `context.run_id`'s deprecation, to them)
DAGSTER_SIDE = r"(dagster|dagster_[a-z_]+|eval_assets|resources)(\.|$)"


@contextlib.contextmanager
def quiet_dagster() -> Iterator[None]:
    """Dagster's preview/beta/superseded/deprecation notices are about our code location, not the user's: hidden
    during the call (the process's own warning filters are restored after it). The user's own warnings, and those of
    other libraries, still show."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=DAGSTER_SIDE)
        try:
            from dagster._utils.warnings import BetaWarning, PreviewWarning, SupersessionWarning

            for category in (BetaWarning, PreviewWarning, SupersessionWarning):
                warnings.simplefilter("ignore", category)
        except ImportError:  # another Dagster version: the module filter above still holds
            pass
        yield


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(PYTHON_OPTION_NAMES))
    if unknown:
        from evalpipe.project.schema import did_you_mean

        hint = did_you_mean(unknown[0], PYTHON_OPTION_NAMES)
        raise ConfigError(f"evaluate() got unknown option {unknown[0]!r}{hint}")


def build_project(agent: Any, dataset: Any, metrics: Any = None, **options: Any) -> tuple[Any, list[str], str]:
    """(project, split keys, model key) of one call, nothing run."""
    from evalpipe.project import Project

    _check_options(options)
    raw, base_dir, bench, model_key = build_raw_config(agent, dataset, metrics,
                                                       **{k: options[k] for k in _PROJECT_OPTIONS if k in options})
    model = raw["models"][model_key]
    from evalpipe.repro.run_request import RunOptions

    # [epochs] epochs/epochs_reducer: options of this in-memory split; sample_ids, limit, levels/max_n, or a dataset
    # other than the configured split of its key: a try (evalpipe/project/tries.py), never the configured partitions
    rp = RunOptions.from_kwargs({k: options.get(k) for k in ("epochs", "epochs_reducer", "sample_ids")})
    bench, tried = python_dataset_try(raw, base_dir, bench, options.get("config"), options.get("limit"), rp.sample_ids)
    raw["benchmarks"][bench].setdefault("options", {}).update(rp.split_options())
    for k in ("concurrency", "timeout_s"):  # run settings the model entry carries (runner option names)
        if options.get(k) is not None:
            model.setdefault("options", {})[k] = options[k]
    # the home is $DAGSTER_HOME's (journals, caches and registries below the API still find it there)
    project = Project.from_dict(raw, base_dir=base_dir, warehouse=options.get("warehouse"))
    splits = sorted(k for k, s in project.config.splits.items() if s.benchmark == bench)
    from evalpipe.repro.run_request import check_judge_keys

    check_judge_keys(project.config, splits)  # a judge's missing API key: before the rollouts are paid for
    if tried.sample_ids:
        from evalpipe.core.run_marks import save_selection

        save_selection(tried.sample_ids)  # every process of the run reads the ids back from the key
    return project, splits, tried.model_key(model_key)


def python_dataset_try(raw: dict[str, Any], base_dir: Any, bench: str, config: Any, limit: Any,
                       sample_ids: list[str]) -> tuple[str, Any]:
    """The try rule (evalpipe/project/tries.py) for the one benchmark of a Python call, against the splits its
    `config=` file and the environment's config file declare: `raw` gets the benchmark under the name it runs as;
    returns (that name, the `Try`)."""
    from evalpipe.core.config import config_path
    from evalpipe.project.loader import config_from_dict, load_config
    from evalpipe.project.tries import configured_splits, python_try

    configs = []
    for path in ([config] if config is not None else []) + [config_path()]:
        try:
            configs.append(load_config(path) if path is not None and os.path.isfile(path) else None)
        except ConfigError:  # the environment's file is broken: it declares nothing this call could overwrite
            if path is config:
                raise
    rest = {k: v for k, v in raw.items() if k not in ("benchmarks", "default_benchmarks")}

    def build_splits(name: str, entry: dict[str, Any]) -> list[Any]:
        cfg = config_from_dict({**rest, "benchmarks": {name: entry}, "default_benchmarks": [name]}, base_dir)
        return [s for s in cfg.splits.values() if s.benchmark == name]

    name, entry, tried = python_try(bench, raw["benchmarks"][bench], build_splits, configured_splits(*configs),
                                    limit, sample_ids)
    raw["benchmarks"], raw["default_benchmarks"] = {name: entry}, [name]
    return name, tried


def evaluate_python(agent: Any, dataset: Any, metrics: Any = None, **options: Any) -> Results:
    """Evaluate `agent` on `dataset` with `metrics` through the Dagster assets; returns `Results`.

    agent: a function (sync or async; `@evalpipe.agent` optional), a Runner class or instance, or a model string
      (a model key of `config`, or a litellm string such as `openai/gpt-4o-mini`).
    dataset: a list of dicts, a DataFrame, a .jsonl/.csv/.json/.parquet path, a benchmark name of `config`, or a
      benchmark entry dict (`{"adapter": "gaia", "options": {...}}`).
    metrics: names, functions (`@evalpipe.metric` optional) or Metric classes/instances; None: the dataset's own.
    Options: `columns` ({prompt|target|id|system|choices|messages|tools: column}; target=None: no ground truth),
      `name` (the benchmark name; default records-<hash> / the file's stem), `model_name` (the model key; default
      the function's name), `config` (a config file to take benchmarks, models and judges from), `tools`,
      `prompt_template`, `slice_by`, `params` (decoding params), `limit`, `epochs` and `epochs_reducer`
      (docs/metrics.md#epochs-and-sample-selection), `sample_ids` (a try under `<model>@ids-<h>`), `concurrency`,
      `timeout_s`, `run_id`, `reload_datasets`, `warehouse` / `instance` (default: $DAGSTER_HOME's),
      `output_path` (the run's portable results file, docs/interop.md), `metrics_by_source` ({source: [metric, ...]},
      `"*"` for the rest) with `route_by` (the metadata field, default `source`), `calculate_metrics` (a function of
      the judgements returning extra metrics rows; docs/metrics.md)."""
    with quiet_dagster():
        project, splits, model_key = build_project(agent, dataset, metrics, **options)
        return read_results(_launch(project, splits, model_key, options))


def _launch(project: Any, splits: list[str], model_key: str, options: dict[str, Any]) -> EvalResult:
    from eval_assets.launch import evaluate as launch_evaluate
    from evalpipe.api.config_run import EvalResult, PartitionOutcome
    from evalpipe.store.artifacts import LATEST, artifacts_root, partition_dir
    from evalpipe.store.warehouse import Warehouse

    tags = {"evalpipe/run_id": str(options["run_id"])} if options.get("run_id") else None
    instance = project_instance(project, options.get("instance"))
    result = launch_evaluate(project, splits, [model_key], instance=instance, tags=tags,
                             reload_datasets=bool(options.get("reload_datasets")))
    outcomes = []
    for p in result.partitions:
        d = partition_dir(artifacts_root(project.config), p.benchmark_split, p.model) / LATEST
        outcomes.append(PartitionOutcome(p.benchmark_split, p.model, p.success, p.error, p.run_id,
                                         d.resolve() if p.success and d.exists() else None))
    wh = Warehouse(project.warehouse)
    from evalpipe.api.config_run import report_tracking

    report_tracking(project.config, wh, instance, result.partitions)  # [interop] failed partitions in MLflow
    if options.get("output_path"):  # the same results file as evaluate(benchmarks=..., output_path=...)
        from evalpipe.repro.run_request import RunOptions

        RunOptions.from_kwargs({"output_path": options["output_path"], "run_id": options.get("run_id")}) \
            .write_results_file(outcomes, wh, project.config, "evalpipe.evaluate()")
    keys = {(p.benchmark_split, p.model) for p in outcomes}
    metrics = wh.query("SELECT * FROM metrics WHERE model = ? ORDER BY benchmark_split, metric, slice", [model_key])
    metrics = metrics[[(s, m) in keys for s, m in zip(metrics["benchmark_split"], metrics["model"])]]
    from partitions import try_kind

    metrics = metrics.assign(**{"try": metrics["model"].map(try_kind) if "model" in metrics else None})  # limit, ids, subset; None: a real result
    return EvalResult(partitions=outcomes, metrics=metrics.reset_index(drop=True),
                      leaderboard=wh.read_table("leaderboard"), warehouse=wh)


def stale_status(agent: Any, dataset: Any, metrics: Any = None, **options: Any) -> dict[str, dict[str, str]]:
    """What Dagster shows for this call's partitions, before running it: {partition key: {asset: FRESH | STALE |
    MISSING}} for `dataset` (its split's partition), `prompts`, `rollouts`, `judgements`, `metrics` and
    `leaderboard`. A change makes its asset and every asset after it STALE: an edited agent `rollouts`,
    `judgements`, `metrics` and `leaderboard`; an edited metric `judgements`, `metrics` and `leaderboard`.
    Nothing is run; the call's metric settings are observed (one event when they changed) so the UI shows the same."""
    with quiet_dagster():
        project, splits, model_key = build_project(agent, dataset, metrics, **options)
        from dagster import AssetKey, MultiPartitionKey, partition_loading_context
        from dagster._utils.test.data_versions import get_stale_status_resolver

        from eval_assets.assets import record_metric_settings
        from eval_assets.launch import CHAIN, project_graph

        instance = project_instance(project, options.get("instance"))
        assets = [a for a in project_graph(project) if hasattr(a, "specs_by_key")]
        out: dict[str, dict[str, str]] = {}
        with partition_loading_context(dynamic_partitions_store=instance):
            record_metric_settings(project, instance, splits)
            resolver = get_stale_status_resolver(instance, assets)
            board = resolver.get_status(AssetKey("leaderboard")).value
            for split in splits:
                key = MultiPartitionKey({"benchmark_split": split, "model": model_key})
                known = (split in instance.get_dynamic_partitions("benchmark_split")
                         and model_key in instance.get_dynamic_partitions("model"))
                if not known:
                    out[str(key)] = dict.fromkeys(["dataset", *CHAIN, "leaderboard"], "MISSING")
                    continue
                own = {"dataset": resolver.get_status(AssetKey("dataset"), split).value,
                       **{asset: resolver.get_status(AssetKey(asset), key).value for asset in CHAIN}}
                # the leaderboard reads every metrics partition: this one's included
                out[str(key)] = downstream_stale({**own, "leaderboard": board})
        return out


def downstream_stale(statuses: dict[str, str]) -> dict[str, str]:
    """Statuses in graph order with staleness carried downstream. Dagster's resolver marks an asset stale only
    for its own causes (a new code version, an input whose data version changed since it was materialized), so
    until `judgements` is materialized again, `metrics` after a stale `judgements` reads FRESH there; it is not:
    it will change when what it reads is brought up to date. A MISSING asset stays MISSING."""
    out, upstream = {}, False
    for asset, status in statuses.items():
        if upstream and status == "FRESH":
            status = "STALE"
        upstream = upstream or status == "STALE"
        out[asset] = status
    return out
