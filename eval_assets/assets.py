"""The asset graph: dataset -> prompts -> rollouts -> judgements -> metrics -> leaderboard.

Thin on purpose: each asset resolves its partition to config entries and calls a plain function in
`evalpipe.pipeline.stages`, then records metadata for the UI.
"""

import pandas as pd
import hashlib
import warnings
from pathlib import Path

from dagster import BetaWarning
from dagster import (AssetExecutionContext, AssetIn, AssetKey, AutomationCondition, DataVersion, DataVersionsByPartition,
                     MetadataValue, Output, asset, observable_source_asset)

from evalpipe.benchmarks import dataset_header
from evalpipe.pipeline import fingerprints
from evalpipe.pipeline.fingerprints import judging_version, split_judging_version
from evalpipe.pipeline.tracking import log_metrics_to_mlflow

from evalpipe.store import partition_lock

from evalpipe.pipeline import stages as pipeline

from evalpipe.pipeline import sample_progress

from evalpipe.pipeline import tracing
from evalpipe.pipeline.prompt_wrappers import wrapper_for
from evalpipe.project.redaction import worker_init_for  # rollout_shards workers: the plugins and the secrets
from evalpipe.store.artifacts import artifacts_enabled, write_artifacts
from evalpipe.project import Project
from evalpipe.core.errors import RunFailed
from evalpipe.store.ratelimit import run_budget, spend_scope, stopped_rows
from evalpipe.core.schema import TABLES
from evalpipe.core.fingerprint import canonical_json, fingerprint
from evalpipe.metrics import judgements_version
from evalpipe.metrics.aggregate import AGGREGATE_COLUMNS, USAGE_COLUMNS, compact_judgements
from evalpipe.metrics.code_execution import sandbox_used
from evalpipe.runners.function import functions_version
from evalpipe.core.redact import redact
from evalpipe.core.run_marks import limit_of
from evalpipe.store.warehouse import DEFAULT_BATCH_ROWS, PartitionReader
from partitions import BENCHMARK_SPLIT, benchmark_split_partitions, eval_partitions, mark_try_run, partition_dims
from resources import EvalConfigResource, JudgeResource, ModelRunnerResource, ToolsResource, WarehouseResource

GROUP = "evaluation"
# `Output(data_version=...)` is a Dagster beta parameter we rely on on purpose: no notice in every run's log
warnings.filterwarnings("ignore", category=BetaWarning, message=".*data_version.*")
# [versions] Each asset's code version: bump an entry when its stage's code would write different rows for the same
# inputs (Dagster then shows every partition of it stale). `judgements` adds the project's judging version and
# `rollouts` its Python agents' source fingerprints (judgements_asset, rollouts_asset).
CODE_VERSIONS = {"dataset": "1", "prompts": "1", "rollouts": "1", "judgements": "1", "metrics": "1",
                 "leaderboard": "1"}
from evalpipe.core.run_marks import RUN_ID_TAG  # noqa: E402  [reproducibility] `evalpipe run --run-id`
IO = "warehouse_io_manager"


# [scale] Each asset streams its partition (docs/scale.md): it reads its inputs as `PartitionReader`s batch by batch,
# runs the stage's kernel in evalpipe/pipeline/stages.py on one batch at a time, appends the result to a `PartitionWriter`
# (renamed into place when complete) and returns the reader of what it wrote (the IO manager writes nothing again).
def _batch_rows(cfg) -> int:
    return int(cfg.raw.get("stream_batch_rows") or DEFAULT_BATCH_ROWS)


def _configured_sandbox(cfg) -> str | None:
    """The project's `sandbox:` (tool sessions use it when the split and $EVALS_SANDBOX name none)."""
    value = cfg.raw.get("sandbox")
    return str(value) if value else None


class _Counts:
    """Per-batch tallies for an asset's metadata, and the first rows for its preview."""

    def __init__(self) -> None:
        self.rows = 0
        self.sums: dict[str, float] = {}
        self.head: pd.DataFrame | None = None

    def add(self, df: pd.DataFrame, **sums: float) -> None:
        self.rows += len(df)
        for k, v in sums.items():
            self.sums[k] = self.sums.get(k, 0) + v
        if self.head is None or (len(self.head) < 30 and len(df)):
            self.head = df.head(30) if self.head is None or not len(self.head) else self.head


def _short_text(values: list) -> bool:
    """Whether shortening these cells would change nothing: text of at most 80 characters, or None (so the
    column's mapped copy would be the column itself, dtype included)."""
    return all(v is None or (type(v) is str and len(v) <= 80) for v in values)


def _preview(df: pd.DataFrame, columns: list[str], n: int = 10) -> MetadataValue:
    cols = [c for c in columns if c in df.columns]
    short = df[cols].head(n)
    copied = False
    for c in cols:
        # [sweeps] only the columns with something to shorten are copied and mapped (most previews have none)
        if short[c].dtype == object and not _short_text(short[c].tolist()):
            if not copied:
                short, copied = short.copy(), True
            short[c] = short[c].map(lambda v: (str(v)[:80] + "...") if isinstance(v, str) and len(v) > 80 else v)
    # Previews show prompts and outputs: redacted, since asset metadata is stored in Dagster's own database.
    return MetadataValue.md(redact(short.to_markdown(index=False)) if len(short) else "_empty_")


# ---- [reproducibility] fingerprints (evalpipe/pipeline/fingerprints.py, docs/reproducibility.md) -------------------------
# ---- [versions] content-based data versions (docs/reproducibility.md "Data versions") ------------------------------
# Every asset returns a data version computed from what it wrote (or from the fingerprints already computed), never
# from the run: a re-run that changes nothing gives the same version, so nothing downstream shows stale; a change
# shows exactly the downstream partitions that read the changed one.
class ContentVersion:
    """A hash over a partition's frames, fed batch by batch in write order (only `columns`, where given)."""

    def __init__(self, columns: list[str] | None = None, **fixed) -> None:
        self.columns = columns
        self.sha = hashlib.sha256(canonical_json(fixed).encode())

    def add(self, df: pd.DataFrame) -> None:
        cols = [c for c in (self.columns or sorted(df.columns)) if c in df.columns]
        self.sha.update(canonical_json(cols).encode())
        if len(df):
            # as text, so that object columns (JSON strings, lists, None) hash alike in every process. [sweeps] Not
            # categorized first: every cell is a str (no nulls), for which pandas hashes each value alike either way
            # (categorizing only saves work on many repeats; on a small batch it cost ~2/3 of the call)
            self.sha.update(pd.util.hash_pandas_object(df[cols].astype(str), index=False,
                                                       categorize=False).values.tobytes())

    def version(self) -> DataVersion:
        return DataVersion(self.sha.hexdigest()[:16])


def frame_version(df: pd.DataFrame, columns: list[str] | None = None, **fixed) -> DataVersion:
    v = ContentVersion(columns, **fixed)
    v.add(df)
    return v.version()


def _dataset_fingerprint_metadata(df: pd.DataFrame) -> dict:
    header = df.attrs.get("header")
    shard = df.attrs.get("shard")
    meta = {"dataset_sha256": MetadataValue.text(str(df.attrs.get("dataset_sha256")))}
    if header:
        meta["dataset_header"] = MetadataValue.json(header)
    if shard:
        meta["shard"] = MetadataValue.text(f"{shard[1]} of {shard[0]}")
    return meta


def _dataset_sha(context: AssetExecutionContext, split) -> str | None:
    """dataset_sha256 as the split's latest `dataset` materialization recorded it; else computed again."""
    from dagster import AssetKey, AssetRecordsFilter

    try:
        recs = context.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=AssetKey("dataset"), asset_partitions=[split.key]), limit=1).records
        value = recs[0].asset_materialization.metadata.get("dataset_sha256") if recs else None
        if value is not None and value.value not in (None, "None"):
            return str(value.value)
    except Exception:  # an instance without the event: compute it
        pass
    from evalpipe.benchmarks import adapter_for

    return fingerprints.dataset_sha256(adapter_for(split).load())


def _record_fingerprints(wh, dims: dict, fps: dict, params: dict | None = None) -> dict:
    before = fingerprints.previous(wh, dims["benchmark_split"], dims["model"])
    changed = fingerprints.changes(before, fps)
    fingerprints.record(wh, dims["benchmark_split"], dims["model"], fps, params)
    meta = {f"fp_{k}": MetadataValue.text(str(v)) for k, v in fps.items()}
    meta["fingerprints_changed"] = MetadataValue.md(
        ("**fingerprints changed since the last materialization:**\n" + "\n".join(f"- {c}" for c in changed))
        if changed else ("_unchanged_" if before else "_first materialization_"))
    return meta


@asset(partitions_def=benchmark_split_partitions, io_manager_key=IO, group_name=GROUP,
       code_version=CODE_VERSIONS["dataset"], description="The benchmark split's samples, loaded by its adapter.")
def dataset(context: AssetExecutionContext, eval_config: EvalConfigResource,
            warehouse: WarehouseResource) -> Output[PartitionReader]:
    if "limit" in (eval_config.split_options or {}):  # every model key reads this partition: it holds the whole split
        from evalpipe.core.errors import ConfigError

        raise ConfigError(f"eval_config.split_options.limit: a run-time limit would shrink the dataset partition "
                          f"that every model key of {context.partition_key} reads; evaluate the model key "
                          f"<model>@limit<N> instead (evalpipe run --limit N), or set `limit:` on the split in the "
                          f"config file (it then defines the split)")
    from evalpipe.project.schema import dataset_shaping, dataset_shaping_error

    for k in dataset_shaping(eval_config.split_options or {}):  # every model key reads this partition too
        from evalpipe.core.errors import ConfigError

        raise ConfigError(dataset_shaping_error(k, eval_config.split_options[k], context.partition_key,
                                                "eval_config.split_options"))
    cfg = eval_config.get()
    split = cfg.split(context.partition_key)
    wh, part, attrs, n = warehouse.get(), {"benchmark_split": split.key}, {}, _Counts()
    content = ContentVersion()  # the rows as written: the split's `limit`, shard, slices and template included
    with wh.writer("datasets", part) as out:
        for df in pipeline.dataset_batches(split, _batch_rows(cfg), attrs):
            out.write(df)
            content.add(df)
            n.add(df, with_ground_truth=int(df["target"].notna().sum()))
    for name, want, got in attrs.get("fingerprint_mismatches") or []:  # fail_on_fingerprint_mismatch: false
        context.log.warning(f"fingerprint mismatch (ignored): {name} header {want} != loaded {got}")
    summary = pd.DataFrame()
    summary.attrs.update(attrs)
    context.add_output_metadata({
        **_dataset_fingerprint_metadata(summary),  # [reproducibility] dataset_sha256, header, shard
        "rows": n.rows, "adapter": split.adapter, "with_ground_truth": int(n.sums.get("with_ground_truth", 0)),
        "preview": _preview(n.head, ["sample_id", "input", "target"]),
    })
    return Output(wh.reader("datasets", part), data_version=content.version())


# [sweeps] how a ranged run of the chain (a backfill's batch) is evaluated: eval_assets/batch.py puts its function
# here when imported (the Definitions and the launcher import it; this module can't import it: it reads the checks)
RANGED_RUNS: dict = {}


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP, code_version=CODE_VERSIONS["prompts"],
       ins={"dataset": AssetIn()}, output_required=False,
       description="The chat messages sent to the model for each sample.")
def prompts(context: AssetExecutionContext, eval_config: EvalConfigResource, model_runner: ModelRunnerResource,
            judge: JudgeResource, tools: ToolsResource, warehouse: WarehouseResource, dataset: PartitionReader):
    if context.has_partition_key_range and len(context.partition_keys) > 1:
        # [sweeps] a backfill's run of many partitions (BackfillPolicy below): each partition's whole chain is run
        # and recorded on its own (eval_assets/batch.py); nothing yielded, so the range's later steps are skipped
        RANGED_RUNS["evaluate"](context, {"eval_config": eval_config, "model_runner": model_runner, "judge": judge,
                                          "tools": tools, "warehouse": warehouse})
        return
    yield _prompts(context, eval_config, model_runner, warehouse, dataset)


def _prompts(context: AssetExecutionContext, eval_config: EvalConfigResource, model_runner: ModelRunnerResource,
             warehouse: WarehouseResource, dataset: PartitionReader) -> Output[PartitionReader]:
    dims = partition_dims(context.partition_key)
    mark_try_run(context)  # [ui] a throw-away key's run is tagged evals/try=<kind> (partitions/__init__.py)
    cfg = eval_config.get()
    model = cfg.model(dims["model"])  # fail early, with a clear message, for a model nobody configured
    split = cfg.split(dims["benchmark_split"])
    # [reproducibility] the prompt wrapper of the model (or --prompt-wrapper), else of the benchmark
    wrapper = wrapper_for(split, model_runner.model_config_for(model))
    wh, n = warehouse.get(), _Counts()
    limit = limit_of(dims["model"])  # a `<model>@limit<N>` key: the first N samples (build_prompts), from the key
    from evalpipe.core.run_marks import selection_of

    wanted, found = selection_of(dims["model"]), set()  # a `<model>@ids-<h>` key: these samples (build_prompts)
    # the messages as built (the prompt wrapper, template and limit included; the partition's own keys left out)
    content = ContentVersion([c for c in TABLES["prompts"].names if c not in ("benchmark_split", "model")],
                             prompt_wrapper_sha256=wrapper.sha256 if wrapper is not None else None)
    with wh.writer("prompts", dims) as out:
        for batch in dataset.batches(_batch_rows(cfg)):
            if limit is not None and len(batch) and int(batch["sample_index"].iloc[0]) >= limit:
                break  # (the partition is in load order: no later batch has a sample below N)
            df = pipeline.build_prompts(split, dims["model"], batch, wrapper=wrapper)
            out.write(df)
            content.add(df)
            n.add(df)
            if wanted is not None and len(df):
                found.update(df["sample_id"].astype(str))
        # [epochs] a --sample-id try naming ids the split lacks (a shard holds only its part: not checked there)
        if wanted is not None and not split.options.get("num_shards") and not set(wanted) <= found:
            from evalpipe.core.errors import ConfigError

            missing = sorted(set(wanted) - found)
            raise ConfigError(f"--sample-id {missing[0]!r}: no such sample in {dims['benchmark_split']} "
                              f"({len(missing)} of {len(wanted)} id(s) missing); give ids as in the split's data")
    context.add_output_metadata({"rows": n.rows, "preview": _preview(n.head, ["sample_id", "prompt_text"]),
                                 **({"limit": limit} if limit is not None else {})})
    return Output(wh.reader("prompts", dims), data_version=content.version())


ROLLOUT_VERSION_COLUMNS = ["sample_id", "fingerprint", "status", "error", "prediction", "finish_reason", "turns",
                           "tool_calls", "stop_reason"]


class _ToolCalls:
    """[tools] The partition's `tool_calls` rows, written beside `rollouts` batch by batch; counts for the UI
    (docs/tools.md). The table's partition file is written only when some sample made a conversation, or when a
    previous run's file must not linger."""

    def __init__(self, wh, dims: dict):
        self.wh, self.dims = wh, dims
        self.out = None
        self.calls = self.misses = self.not_allowed = self.invalid = 0
        self.stops: dict[str, int] = {}

    def add(self, df: pd.DataFrame) -> None:
        calls = pipeline.tool_calls_frame(df)
        if not len(calls) and not df["stop_reason"].notna().any():
            return
        if self.out is None:
            self.out = self.wh.writer("tool_calls", self.dims)
        self.out.write(calls)
        err = calls["error"] if len(calls) else pd.Series(dtype=object)
        self.calls += len(calls)
        self.misses += int((err == "fixture_miss").sum())
        self.not_allowed += int((err == "tool_not_allowed").sum())
        self.invalid += int((calls["arguments_valid"] == False).sum()) if len(calls) else 0  # noqa: E712
        for k, v in df["stop_reason"].dropna().value_counts().items():
            self.stops[str(k)] = self.stops.get(str(k), 0) + int(v)

    def abort(self) -> None:
        if self.out is not None:
            self.out.abort()

    def close(self, registry_sha: str | None) -> dict:
        if self.out is None:
            if self.wh.partition_file("tool_calls", self.dims).exists():  # a previous run's calls must not linger
                self.wh.write("tool_calls", pd.DataFrame(columns=["benchmark_split", "model", "sample_id"]), self.dims)
            return {}
        self.out.close()
        meta = {"tool_calls": self.calls, "fixture_misses": self.misses, "tools_not_allowed": self.not_allowed,
                "invalid_tool_args": self.invalid, "stop_reasons": MetadataValue.json(self.stops)}
        if registry_sha:
            meta["tool_registry_sha256"] = MetadataValue.text(registry_sha)
        return meta


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP, code_version=CODE_VERSIONS["rollouts"],
       pool="model_calls",  # [scale] a limit on this Dagster pool caps rollouts steps across runs (docs/deployment.md)
       description="Each sample run through the model: prediction, raw output, usage, cost, latency, errors.")
def rollouts(context: AssetExecutionContext, eval_config: EvalConfigResource, model_runner: ModelRunnerResource,
             warehouse: WarehouseResource, tools: ToolsResource, prompts: PartitionReader) -> Output[PartitionReader]:
    dims = partition_dims(context.partition_key)
    cfg = eval_config.get()
    split, model = cfg.split(dims["benchmark_split"]), cfg.model(dims["model"])
    step = max(1, len(prompts) // 10)
    key = context.partition_key  # (a property that parses the run's tags: not once per sample)

    report = sample_progress.reporter(key)  # at most every 50 ms, and the last sample

    def progress(done: int, total: int, errors: int | None = None) -> None:
        # [scale] per-sample progress, in-process caller; [viewer/CLI] with the failed samples so far
        report(done, total, errors)
        if done == total or done % step == 0:
            context.log.info(f"rollouts {dims['benchmark_split']} x {dims['model']}: {done}/{total}")

    # one writer per partition: a second run of it waits, then takes every sample from the journal (partition_lock.py)
    with tracing.scope(context.run.run_id, "rollouts", cfg, **dims), \
            partition_lock.hold("rollouts", dims, context.run.run_id, context.log.warning):  # (tracing: no-op unless on)
        runner = model_runner.runner_for(model)  # built inside the scope so tracing can wrap it
        # [reproducibility] fingerprints checked against the dataset header before any model call
        fps, _ = fingerprints.compute_for_partition(split, model_runner.model_config_for(model), runner,
                                                    _dataset_sha(context, split), context.log.warning)
        wh, n = warehouse.get(), _Counts()
        calls = _ToolCalls(wh, dims)  # [tools] the tool_calls table, same partition
        # the partition's fingerprints (dataset, wrapper, runner settings, model, tools) and what each sample
        # answered; not latency or cost, which differ between two runs that answer alike
        content = ContentVersion(ROLLOUT_VERSION_COLUMNS, **fps)
        budget = run_budget(cfg.raw, context.run.run_id, context.run.tags, str(cfg.path))  # [spend] budget: (docs/spend.md)
        try:
            with spend_scope(budget), wh.writer("rollouts", dims) as out, pipeline.RolloutSession(
                    split, model_runner.model_config_for(model), runner, model_runner.settings(model, cfg.raw.get("rate_limits")), progress,
                    tools_mode=tools.mode_override(), total=len(prompts),
                    worker_init=worker_init_for(eval_config.project),
                    configured_sandbox=_configured_sandbox(cfg)) as session:
                first_error = None
                for batch in prompts.batches(_batch_rows(cfg)):
                    df = session.run(batch)
                    out.write(df)
                    content.add(df)
                    calls.add(df)
                    ok = df["status"] == "ok"
                    if first_error is None and not ok.all():
                        bad = df[~ok].iloc[0]
                        text = " ".join(str(bad.get("error") or bad["status"]).split())  # one line
                        first_error = f"sample {bad['sample_id']}: {text[:500]}"
                    n.add(df, ok=int(ok.sum()), errors=int((~ok).sum()), from_journal=int(df["cached"].sum()),
                          input_tokens=int(pd.to_numeric(df["input_tokens"]).fillna(0).sum()),
                          output_tokens=int(pd.to_numeric(df["output_tokens"]).fillna(0).sum()),
                          cost_usd=float(pd.to_numeric(df["cost"]).fillna(0).sum()),
                          stopped_by_budget=stopped_rows(df["error"]) if budget is not None else 0)
                if n.sums.get("stopped_by_budget"):  # [spend] unfinished: failed (never ranked), resumable
                    raise RunFailed(f"stopped by budget: {int(n.sums['stopped_by_budget'])} of {n.rows} sample(s) not "
                                    f"sent ({budget.stopped()}); the others are journaled: raise `budget:` and run "
                                    f"again to finish ({budget.line()})")
                if n.rows and not n.sums.get("ok"):
                    # nothing was measured: a partition of errors is a failed one, not a score of 0 (issue 20);
                    # raised inside the writer, so a previous good partition stays as it was
                    raise RunFailed(f"every one of the {n.rows} sample(s) failed, nothing was measured; first "
                                    f"error, {redact(str(first_error))}")
        except BaseException:
            calls.abort()
            raise
    fp_meta = _record_fingerprints(wh, dims, fps, model_runner.model_config_for(model).params)  # [tool report] decoding
    tool_meta = calls.close(session.tool_registry_sha256)
    context.add_output_metadata({
        **fp_meta, **tool_meta, "rows": n.rows,
        **{k: int(n.sums.get(k, 0)) for k in ("ok", "errors", "from_journal", "input_tokens", "output_tokens")},
        "cost_usd": float(n.sums.get("cost_usd", 0.0)),
        **({"budget": MetadataValue.json(budget.status())} if budget is not None else {}),  # [spend] spend vs caps
        "preview": _preview(n.head, ["sample_id", "status", "prediction", "error"]),
    })
    return Output(wh.reader("rollouts", dims), data_version=content.version())


# ---- [versions] a split's metric settings, per partition (issue 30: staleness at the grain of the change) -------------
# A Dagster code version is one per asset: a metric edited for one benchmark, given to `judgements` as its code
# version, marked every split's judgements stale. What differs per split (its metrics, their settings, its judges:
# fingerprints.split_judging_version) is instead the data version of this observable asset, one per split;
# `judgements` and `metrics` depend on it, so only the partitions of the splits whose settings changed show stale.
METRIC_SETTINGS = AssetKey("metric_settings")


def metric_settings_versions(cfg, splits=None) -> dict[str, str]:
    """{split key: its metric settings' version} for `splits` (default: every split of the config)."""
    return {k: split_judging_version(cfg, k) for k in sorted(cfg.splits if splits is None else splits)
            if k in cfg.splits}


with warnings.catch_warnings():  # observable source assets are a Dagster beta feature we rely on on purpose
    warnings.simplefilter("ignore", BetaWarning)

    # its own group: a source in the `evaluation` group turns the group page's "Materialize all" into a menu that
    # also observes, and a backfill of the chain would try to observe it per partition
    @observable_source_asset(name=METRIC_SETTINGS.path[-1], partitions_def=benchmark_split_partitions,
                             group_name="sources", required_resource_keys={"eval_config"},
                             description="Each benchmark split's metrics, their settings and judges, as a version: "
                                         "observed by every `evalpipe run` and `stale_status()`, or with Observe "
                                         "here after the config changed (docs/reproducibility.md).")
    def _metric_settings_source(context) -> DataVersionsByPartition:
        known = set(context.instance.get_dynamic_partitions(BENCHMARK_SPLIT))
        versions = metric_settings_versions(context.resources.eval_config.get())
        return DataVersionsByPartition({k: v for k, v in versions.items() if k in known})


def _as_assets_definition(source):
    from dagster._core.definitions.external_asset import create_external_asset_from_source_asset

    return create_external_asset_from_source_asset(source)


metric_settings = _as_assets_definition(_metric_settings_source)  # (graph helpers expect AssetsDefinitions)


def record_metric_settings(project: Project, instance, splits=None) -> dict[str, str]:
    """Observe the project's metric settings on `instance` for `splits` (default: all of the config's) that are
    partitions already: one observation per split whose version changed since the last one (none when nothing
    changed). Called before a run materializes judgements, so that they record the settings they were judged
    with, and before the stale status is read. Returns the versions."""
    from dagster import AssetObservation, AssetRecordsFilter
    from dagster._core.definitions.data_version import DATA_VERSION_TAG

    known = set(instance.get_dynamic_partitions(BENCHMARK_SPLIT))
    versions = {k: v for k, v in metric_settings_versions(project.config, splits).items() if k in known}
    for split, version in versions.items():
        last = instance.fetch_observations(AssetRecordsFilter(asset_key=METRIC_SETTINGS, asset_partitions=[split]),
                                           limit=1).records
        if last and last[0].asset_observation.tags.get(DATA_VERSION_TAG) == version:
            continue
        instance.report_runless_asset_event(AssetObservation(asset_key=METRIC_SETTINGS, partition=split,
                                                             tags={DATA_VERSION_TAG: version}))
    return versions


def judgements(context: AssetExecutionContext, eval_config: EvalConfigResource, judge: JudgeResource,
               warehouse: WarehouseResource, prompts: PartitionReader,
               rollouts: PartitionReader) -> Output[PartitionReader]:
    dims = partition_dims(context.partition_key)
    cfg = eval_config.get()
    split = cfg.split(dims["benchmark_split"])
    wh, n, versions, sandboxes, tally = warehouse.get(), _Counts(), [], set(), pipeline.VerdictTally()
    # rollouts side by side with the prompts (same sample order; only the columns judging reads)
    paired = rollouts.cursor(pipeline.JUDGE_ROLLOUT_COLUMNS, _batch_rows(cfg))
    budget = run_budget(cfg.raw, context.run.run_id, context.run.tags, str(cfg.path))  # [spend] judges count too
    with tracing.scope(context.run.run_id, "judgements", cfg, **dims), spend_scope(budget), \
            partition_lock.hold("judgements", dims, context.run.run_id, context.log.warning), \
            wh.writer("judgements", dims) as out:  # one writer per partition: judge calls made once
        for batch in prompts.batches(_batch_rows(cfg), pipeline.JUDGE_PROMPT_COLUMNS):
            df = pipeline.judge(split, batch, paired.take(batch["sample_id"]), metric_settings=judge.metric_settings(),
                                metrics=judge.metrics, config=cfg)
            out.write(df)
            tally.add(df)
            status = df["status"] if len(df) else pd.Series(dtype=object)
            n.add(df, scored=int((status == "scored").sum()), unscored=int((status == "unscored").sum()),
                  parse_errors=int((status == "parse_error").sum()))
            versions.append(judgements_version(df))
            sandboxes.update(x for x in sandbox_used(df).split(", ") if x != "-")
        tally.check(redact)  # inside the writer: a metric that measured nothing fails the partition, the old one stays
    context.add_output_metadata({
        "rows": n.rows, **{k: int(n.sums.get(k, 0)) for k in ("scored", "unscored", "parse_errors")},
        # the code sandbox backend(s) that really ran (docs/sandbox.md)
        "sandbox": ", ".join(sorted(sandboxes)) or "-",
        "preview": _preview(n.head, ["sample_id", "metric", "score", "prediction", "target"]),
    })
    # the data version is the verdicts' content (hashed batch by batch, in order): `metrics` goes stale only when a
    # verdict actually changed
    version = versions[0] if len(versions) == 1 else fingerprint(versions, 16)
    return Output(wh.reader("judgements", dims), data_version=DataVersion(version))


def judgements_asset(project: Project):
    """The `judgements` asset of a project: its code version is the metric code's version (every split alike);
    what a split's verdicts depend on in the config (its metrics, their settings, its judges) is the data version
    of its `metric_settings` partition, so an edit shows only that split's judgements stale. Re-materializing
    reads rollouts from the warehouse (no model calls)."""
    return asset(name="judgements", partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP,
                 description="Per-sample verdicts of each metric on each rollout.", deps=[metric_settings],
                 code_version=f'{CODE_VERSIONS["judgements"]}-{judging_version(project.config)}')(judgements)


_STARTED: dict[str, float] = {}  # run id -> its start time, once it has one (it never changes then)


def _run_started(instance, run_id: str) -> float | None:
    """When the run started, as its run record says: read once per run ([sweeps] a batch run's partitions all ask)."""
    if run_id in _STARTED:
        return _STARTED[run_id]
    record = instance.get_run_record_by_id(run_id)
    started = record.start_time if record is not None else None
    if started is not None:
        while len(_STARTED) >= 64:  # (a long-lived process: the latest runs only)
            _STARTED.pop(next(iter(_STARTED)))
        _STARTED[run_id] = started
    return started


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP, code_version=CODE_VERSIONS["metrics"],
       deps=[metric_settings],  # a metric's settings also decide its aggregate (agreement, ...): stale with them
       description="Each metric per slice: value, n, standard error, bootstrap 95% CI.")
def metrics(context: AssetExecutionContext, eval_config: EvalConfigResource, warehouse: WarehouseResource,
            judgements: PartitionReader, rollouts: PartitionReader) -> Output[pd.DataFrame]:
    dims = partition_dims(context.partition_key)
    mark_try_run(context)  # [ui] also when the UI re-materializes metrics alone
    rows = _batch_rows(eval_config.get())
    # only the columns aggregation reads, held compactly (~150 bytes per judgement; docs/scale.md)
    verdicts = compact_judgements(judgements.batches(rows, AGGREGATE_COLUMNS))
    usage = rollouts.to_pandas(USAGE_COLUMNS)  # a few numbers per sample for the latency/token/cost rows
    df = pipeline.compute_metrics(dims["benchmark_split"], dims["model"], verdicts, rollouts=usage,
                                  split=eval_config.get().split(dims["benchmark_split"]))
    del verdicts, usage
    overall = df[df["slice"] == "all"] if len(df) else df
    meta: dict = {"rows": len(df), "preview": _preview(df, ["metric", "slice", "value", "n", "ci_low", "ci_high"], 30)}
    for r in overall.itertuples(index=False):
        meta[f"{r.metric}"] = MetadataValue.float(float(r.value)) if pd.notna(r.value) else MetadataValue.text("n/a")
    from evalpipe.viewer.links import metrics_chart_md, viewer_url  # [viewer] chart and link (docs/viewer.md)

    meta["chart"] = MetadataValue.md(metrics_chart_md(df))
    meta["viewer"] = MetadataValue.url(viewer_url(dims["benchmark_split"], dims["model"]))
    cfg = eval_config.get()
    if artifacts_enabled(cfg):  # the auditable run folder (evalpipe/store/artifacts.py), built from the warehouse
        started = _run_started(context.instance, context.run.run_id)
        # a user-given `evalpipe run --run-id` (tag evalpipe/run_id) names the run's folder; else Dagster's run id
        run_id = context.run.tags.get(RUN_ID_TAG) or context.run.run_id
        folder = write_artifacts(dims["benchmark_split"], dims["model"], warehouse.get(), cfg, df,
                                 {"run_id": run_id, "dagster_run_id": context.run.run_id, "started_at": started},
                                 batch_rows=rows, dataset_header=dataset_header(cfg.splits.get(dims["benchmark_split"])))
        meta["artifacts"] = MetadataValue.path(str(folder))
        context.log.info(f"run artifacts: {folder}")
        from evalpipe.pipeline.tool_report import METRIC, write_partition_report  # [tool integration] report (issue 10)

        tool_rows = judgements.select(lambda b: b["metric"] == METRIC, rows) if (df["metric"] == METRIC).any() else None
        report = write_partition_report(cfg, dims["benchmark_split"], dims["model"], warehouse.get(), tool_rows,
                                        started, folder) if tool_rows is not None and isinstance(folder, Path) else None
        if report is not None:
            meta["tool_integration_report"] = MetadataValue.path(str(report))
    version = frame_version(df)
    try:  # opt-in `mlflow:`: a tracker that is down warns and leaves the metrics as computed (docs/interop.md)
        mlflow_run = log_metrics_to_mlflow(cfg, warehouse.get(), dims["benchmark_split"], dims["model"], df,
                                           data_version=version.value, viewer_url=meta["viewer"].value,
                                           dagster_run_id=context.run.run_id)
    except Exception as e:  # noqa: BLE001  (any failure of the tracker's client)
        context.log.warning(f"MLflow logging failed for {context.partition_key}: {type(e).__name__}: {e}")
        meta["mlflow"] = MetadataValue.text(f"not logged: {type(e).__name__}: {e}")
    else:
        if mlflow_run:
            meta["mlflow_run_id"] = MetadataValue.text(mlflow_run)
    context.add_output_metadata(meta)
    return Output(df, data_version=version)


@asset(deps=[metrics], io_manager_key=IO, group_name=GROUP, code_version=CODE_VERSIONS["leaderboard"],
       description="Every materialized metrics partition, slice `all`, ranked per benchmark split and metric.",
       # declarative automation (eval_assets/schedules.py runs the sensor): rebuilt after any metrics partition
       # changes, once per change, never while it is already being rebuilt
       automation_condition=(AutomationCondition.any_deps_updated().since_last_handled()
                             & ~AutomationCondition.in_progress()))
def leaderboard(context: AssetExecutionContext, eval_config: EvalConfigResource,
                warehouse: WarehouseResource) -> Output[pd.DataFrame]:
    wh = warehouse.get()
    # a partition whose blocking gate failed is listed unranked, with the reason (docs/metrics.md "Gates")
    df = pipeline.leaderboard_from(wh)  # metrics and gates through their rollups: fast at 10,000 partitions
    blocked = sorted({f"{s} x {m}: {g}" for s, m, g in zip(df["benchmark_split"], df["model"], df["gate"])
                      if isinstance(g, str)}) if len(df) else []
    # the pairs the config means to run, not Dagster's whole split x model product (docs/operations.md)
    pairs = pipeline.intended_pairs_status(eval_config.get(), df)
    context.add_output_metadata({"intended_pairs": f"{len(pairs['ranked'])} of {pairs['intended']} ranked, "
                                                   f"{len(pairs['not_ranked'])} held by a gate, "
                                                   f"{len(pairs['missing'])} not evaluated yet",
                                 "intended_pairs_missing": MetadataValue.md(
                                     "\n".join(f"- {s} x {m}" for s, m in pairs["missing"][:50]) or "_none_"),
                                 "rows": len(df), "models": int(df["model"].nunique()) if len(df) else 0,
                                 "not_ranked": MetadataValue.md("\n".join(f"- {b}" for b in blocked) or "_none_"),
                                 # ranks as read (`=1` tied), counts as counts, which side is better (issue 20)
                                 "preview": _preview(pipeline.leaderboard_display(df), ["benchmark_split", "metric",
                                                     "rank", "model", "value", "better", "n"], 30)})
    return Output(df, data_version=frame_version(df))


def rollouts_asset(project: Project):
    """The `rollouts` asset of a project: with agents given as Python functions (the Python API), its code version
    is their source fingerprints, so an edited function shows its partitions stale; otherwise it has none (a
    model's own identity is checked per sample by the journal)."""
    version = functions_version(project.config.models.values())
    return rollouts if version is None else rollouts.map_asset_specs(
        lambda spec: spec.replace_attributes(code_version=f'{CODE_VERSIONS["rollouts"]}-{version}'))


def eval_assets(project: Project) -> list:
    """The asset graph of a project (only `judgements` and `rollouts` depend on it: their code versions)."""
    from dagster import BackfillPolicy

    from eval_assets.sweep_settings import batch_size

    # [sweeps] a UI/daemon backfill runs `sweep_batch_partitions` partitions per run (docs/scale.md "Sweeps")
    policy = BackfillPolicy.multi_run(max_partitions_per_run=batch_size(project.config))
    chain = [a.with_attributes(backfill_policy=policy)
             for a in (prompts, rollouts_asset(project), judgements_asset(project), metrics)]
    return [dataset, chain[0], chain[1], metric_settings, chain[2], chain[3], leaderboard]
