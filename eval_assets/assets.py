"""The asset graph: dataset -> prompts -> rollouts -> judgements -> metrics -> leaderboard.

Thin on purpose: each asset resolves its partition to config entries and calls a plain function in
`evalpipe.pipeline`, then records metadata for the UI.
"""

import pandas as pd
from dagster import AssetExecutionContext, AssetIn, AutomationCondition, DataVersion, MetadataValue, Output, asset

from evalpipe import fingerprints, pipeline, sample_progress, tracing
from evalpipe.prompt_wrappers import wrapper_for
from evalpipe.artifacts import artifacts_enabled, write_artifacts
from evalpipe.config import load_config
from evalpipe.metrics import judgements_version, judging_version
from evalpipe.metrics.code_execution import sandbox_used
from evalpipe.redact import redact
from partitions import benchmark_split_partitions, eval_partitions, partition_dims
from resources import EvalConfigResource, JudgeResource, ModelRunnerResource, ToolsResource, WarehouseResource

GROUP = "evaluation"
RUN_ID_TAG = "evalpipe/run_id"  # [reproducibility] `evalpipe run --run-id`
IO = "warehouse_io_manager"


def _preview(df: pd.DataFrame, columns: list[str], n: int = 10) -> MetadataValue:
    cols = [c for c in columns if c in df.columns]
    short = df[cols].head(n).copy()
    for c in cols:
        if short[c].dtype == object:
            short[c] = short[c].map(lambda v: (str(v)[:80] + "...") if isinstance(v, str) and len(v) > 80 else v)
    # Previews show prompts and outputs: redacted, since asset metadata is stored in Dagster's own database.
    return MetadataValue.md(redact(short.to_markdown(index=False)) if len(short) else "_empty_")


# ---- [reproducibility] fingerprints (evalpipe/fingerprints.py, docs/reproducibility.md) -------------------------
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


def _record_fingerprints(wh, dims: dict, fps: dict) -> dict:
    before = fingerprints.previous(wh, dims["benchmark_split"], dims["model"])
    changed = fingerprints.changes(before, fps)
    fingerprints.record(wh, dims["benchmark_split"], dims["model"], fps)
    meta = {f"fp_{k}": MetadataValue.text(str(v)) for k, v in fps.items()}
    meta["fingerprints_changed"] = MetadataValue.md(
        ("**fingerprints changed since the last materialization:**\n" + "\n".join(f"- {c}" for c in changed))
        if changed else ("_unchanged_" if before else "_first materialization_"))
    return meta


@asset(partitions_def=benchmark_split_partitions, io_manager_key=IO, group_name=GROUP,
       description="The benchmark split's samples, loaded by its adapter.")
def dataset(context: AssetExecutionContext, eval_config: EvalConfigResource) -> pd.DataFrame:
    split = eval_config.get().split(context.partition_key)
    df = pipeline.build_dataset(split)
    for name, want, got in df.attrs.get("fingerprint_mismatches") or []:  # fail_on_fingerprint_mismatch: false
        context.log.warning(f"fingerprint mismatch (ignored): {name} header {want} != loaded {got}")
    context.add_output_metadata({
        **_dataset_fingerprint_metadata(df),  # [reproducibility] dataset_sha256, header, shard
        "rows": len(df), "adapter": split.adapter,
        "with_ground_truth": int(df["target"].notna().sum()) if len(df) else 0,
        "preview": _preview(df, ["sample_id", "input", "target"]),
    })
    return df


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP,
       ins={"dataset": AssetIn()}, description="The chat messages sent to the model for each sample.")
def prompts(context: AssetExecutionContext, eval_config: EvalConfigResource, model_runner: ModelRunnerResource,
            dataset: pd.DataFrame) -> pd.DataFrame:
    dims = partition_dims(context.partition_key)
    cfg = eval_config.get()
    model = cfg.model(dims["model"])  # fail early, with a clear message, for a model nobody configured
    split = cfg.split(dims["benchmark_split"])
    # [reproducibility] the prompt wrapper of the model (or --prompt-wrapper), else of the benchmark
    wrapper = wrapper_for(split, model_runner.model_config_for(model))
    df = pipeline.build_prompts(split, dims["model"], dataset, wrapper=wrapper)
    context.add_output_metadata({"rows": len(df), "preview": _preview(df, ["sample_id", "prompt_text"])})
    return df


def _write_tool_calls(wh, dims: dict, df: pd.DataFrame) -> dict:
    """[tools] Write the partition's `tool_calls` rows beside `rollouts`; counts for the UI (docs/tools.md)."""
    calls = pipeline.tool_calls_frame(df)
    if not len(calls) and not df["stop_reason"].notna().any():
        if wh.partition_file("tool_calls", dims).exists():  # a previous run's calls must not linger
            wh.write("tool_calls", calls, dims)
        return {}
    wh.write("tool_calls", calls, dims)
    err = calls["error"] if len(calls) else pd.Series(dtype=object)
    stops = df["stop_reason"].dropna().value_counts()
    meta = {"tool_calls": len(calls), "fixture_misses": int((err == "fixture_miss").sum()),
            "tools_not_allowed": int((err == "tool_not_allowed").sum()),
            "invalid_tool_args": int((calls["arguments_valid"] == False).sum()) if len(calls) else 0,  # noqa: E712
            "stop_reasons": MetadataValue.json({str(k): int(v) for k, v in stops.items()})}
    if df.attrs.get("tool_registry_sha256"):
        meta["tool_registry_sha256"] = MetadataValue.text(df.attrs["tool_registry_sha256"])
    return meta


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP,
       description="Each sample run through the model: prediction, raw output, usage, cost, latency, errors.")
def rollouts(context: AssetExecutionContext, eval_config: EvalConfigResource, model_runner: ModelRunnerResource,
             warehouse: WarehouseResource, tools: ToolsResource, prompts: pd.DataFrame) -> pd.DataFrame:
    dims = partition_dims(context.partition_key)
    cfg = eval_config.get()
    split, model = cfg.split(dims["benchmark_split"]), cfg.model(dims["model"])
    step = max(1, len(prompts) // 10)

    def progress(done: int, total: int, errors: int | None = None) -> None:
        # [scale] per-sample progress, in-process caller; [viewer/CLI] with the failed samples so far
        sample_progress.report(context.partition_key, done, total, errors)
        if done == total or done % step == 0:
            context.log.info(f"rollouts {dims['benchmark_split']} x {dims['model']}: {done}/{total}")

    with tracing.scope(context.run_id, "rollouts", **dims):  # a no-op unless tracing is on
        runner = model_runner.runner_for(model)  # built inside the scope so tracing can wrap it
        # [reproducibility] fingerprints checked against the dataset header before any model call
        fps, _ = fingerprints.compute_for_partition(split, model_runner.model_config_for(model), runner,
                                                    _dataset_sha(context, split), context.log.warning)
        df = pipeline.run_rollouts(split, model_runner.model_config_for(model), prompts, runner,
                                   model_runner.settings(model), progress, tools_mode=tools.mode_override())
    fp_meta = _record_fingerprints(warehouse.get(), dims, fps)
    tool_meta = _write_tool_calls(warehouse.get(), dims, df)  # [tools] the tool_calls table, same partition
    ok = df["status"] == "ok"
    context.add_output_metadata({
        **fp_meta, **tool_meta,
        "rows": len(df), "ok": int(ok.sum()), "errors": int((~ok).sum()), "from_journal": int(df["cached"].sum()),
        "input_tokens": int(pd.to_numeric(df["input_tokens"]).fillna(0).sum()),
        "output_tokens": int(pd.to_numeric(df["output_tokens"]).fillna(0).sum()),
        "cost_usd": float(pd.to_numeric(df["cost"]).fillna(0).sum()),
        "preview": _preview(df, ["sample_id", "status", "prediction", "error"]),
    })
    return df


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP,
       description="Per-sample verdicts of each metric on each rollout.",
       # changes when a judge (model, prompt, settings) or a split's metrics change in the config: Dagster then
       # shows judgements as stale; re-materializing it reads rollouts from the warehouse (no model calls)
       code_version=judging_version(load_config()))
def judgements(context: AssetExecutionContext, eval_config: EvalConfigResource, judge: JudgeResource,
               prompts: pd.DataFrame, rollouts: pd.DataFrame) -> Output[pd.DataFrame]:
    dims = partition_dims(context.partition_key)
    split = eval_config.get().split(dims["benchmark_split"])
    with tracing.scope(context.run_id, "judgements", **dims):
        df = pipeline.judge(split, prompts, rollouts, metric_settings=judge.metric_settings(), metrics=judge.metrics)
    context.add_output_metadata({
        "rows": len(df), "scored": int((df["status"] == "scored").sum()) if len(df) else 0,
        "unscored": int((df["status"] == "unscored").sum()) if len(df) else 0,
        "parse_errors": int((df["status"] == "parse_error").sum()) if len(df) else 0,
        "sandbox": sandbox_used(df),  # the code sandbox backend(s) that really ran (docs/sandbox.md)
        "preview": _preview(df, ["sample_id", "metric", "score", "prediction", "target"]),
    })
    # the data version is the verdicts' content: `metrics` goes stale only when a verdict actually changed
    return Output(df, data_version=DataVersion(judgements_version(df)))


@asset(partitions_def=eval_partitions, io_manager_key=IO, group_name=GROUP,
       description="Each metric per slice: value, n, standard error, bootstrap 95% CI.")
def metrics(context: AssetExecutionContext, eval_config: EvalConfigResource, warehouse: WarehouseResource,
            judgements: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    dims = partition_dims(context.partition_key)
    df = pipeline.compute_metrics(dims["benchmark_split"], dims["model"], judgements, rollouts=rollouts,
                                  split=eval_config.get().split(dims["benchmark_split"]))
    overall = df[df["slice"] == "all"] if len(df) else df
    meta: dict = {"rows": len(df), "preview": _preview(df, ["metric", "slice", "value", "n", "ci_low", "ci_high"], 30)}
    for r in overall.itertuples(index=False):
        meta[f"{r.metric}"] = MetadataValue.float(float(r.value)) if pd.notna(r.value) else MetadataValue.text("n/a")
    from evalpipe.viewer.links import metrics_chart_md, viewer_url  # [viewer] chart and link (docs/viewer.md)

    meta["chart"] = MetadataValue.md(metrics_chart_md(df))
    meta["viewer"] = MetadataValue.url(viewer_url(dims["benchmark_split"], dims["model"]))
    cfg = eval_config.get()
    if artifacts_enabled(cfg):  # the auditable run folder (evalpipe/artifacts.py), built from the warehouse
        record = context.instance.get_run_record_by_id(context.run_id)
        started = record.start_time if record is not None else None
        # a user-given `evalpipe run --run-id` (tag evalpipe/run_id) names the run's folder; else Dagster's run id
        run_id = context.run.tags.get(RUN_ID_TAG) or context.run_id
        folder = write_artifacts(dims["benchmark_split"], dims["model"], warehouse.get(), cfg, df,
                                 {"run_id": run_id, "dagster_run_id": context.run_id, "started_at": started})
        meta["artifacts"] = MetadataValue.path(str(folder))
        context.log.info(f"run artifacts: {folder}")
        from evalpipe.tooleval.report import write_partition_report  # [tool integration] report JSON (issue 10)

        report = write_partition_report(cfg, dims["benchmark_split"], dims["model"], warehouse.get(), judgements,
                                        started, folder)
        if report is not None:
            meta["tool_integration_report"] = MetadataValue.path(str(report))
    context.add_output_metadata(meta)
    return df


@asset(deps=[metrics], io_manager_key=IO, group_name=GROUP,
       description="Every materialized metrics partition, slice `all`, ranked per benchmark split and metric.",
       # declarative automation (eval_assets/schedules.py runs the sensor): rebuilt after any metrics partition
       # changes, once per change, never while it is already being rebuilt
       automation_condition=(AutomationCondition.any_deps_updated().since_last_handled()
                             & ~AutomationCondition.in_progress()))
def leaderboard(context: AssetExecutionContext, warehouse: WarehouseResource) -> pd.DataFrame:
    df = pipeline.build_leaderboard(warehouse.get().read_table("metrics"))
    context.add_output_metadata({"rows": len(df), "models": int(df["model"].nunique()) if len(df) else 0,
                                 "preview": _preview(df, ["benchmark_split", "metric", "rank", "model", "value", "n"], 30)})
    return df


EVAL_ASSETS = [dataset, prompts, rollouts, judgements, metrics, leaderboard]
