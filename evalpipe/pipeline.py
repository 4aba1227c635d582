"""The evaluation stages as plain functions over DataFrames. The Dagster assets only wire these together,
so every stage can be tested (and reused by the CLI) without Dagster."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import pandas as pd

from evalpipe.benchmarks import adapter_for
from evalpipe.config import ModelConfig, SplitConfig, dagster_home
from evalpipe.errors import DataError
from evalpipe.fingerprint import fingerprint
from evalpipe.journal import Journal
from evalpipe.metrics import JudgeInput, aggregate, build_metric
from evalpipe.runners import Runner, RunSettings, run_requests
from evalpipe.types import RolloutRequest, Sample, Score


def _json(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, ensure_ascii=False, default=str)


def _loads(s: Any, default: Any) -> Any:
    return json.loads(s) if isinstance(s, str) and s else default


# ---- dataset ----------------------------------------------------------------------------------------------------
def build_dataset(split: SplitConfig) -> pd.DataFrame:
    from evalpipe import fingerprints, sharding

    adapter = adapter_for(split)
    samples = list(adapter.load())
    # [reproducibility] the loaded content's fingerprint (before limit and sharding), checked against the header
    header = adapter.header() if hasattr(adapter, "header") else None
    dataset_sha = fingerprints.dataset_sha256(samples)
    mismatches = fingerprints.check_header(split.key, header, {"dataset_sha256": dataset_sha}, ["dataset_sha256"],
                                           split.options)
    limit = split.options.get("limit")
    if limit is not None:
        if int(limit) < 0:  # checked with the config too; a negative slice would drop samples from the end
            from evalpipe.errors import ConfigError

            raise ConfigError(f"{split.key}: limit must be >= 0, got {limit}")
        samples = samples[: int(limit)]
    indexed = list(enumerate(samples))  # sample_index: the position in the split, the same in every shard
    shard = sharding.shard_spec(split.options)
    if shard is not None:
        indexed = sharding.select(indexed, *shard, key=lambda p: p[1].id)
    seen: set[str] = set()
    for _, s in indexed:
        if s.id in seen:
            raise DataError(f"{split.key}: duplicate sample id {s.id!r}; ids must be unique within a split")
        seen.add(s.id)
    df = pd.DataFrame([{
        "benchmark_split": split.key, "sample_id": s.id, "sample_index": i, "input": s.input, "target": s.target,
        "choices": _json(s.choices), "system": s.system, "files": _json(s.files), "metadata": _json(s.metadata),
        "slices": _json(adapter.slices(s)), "messages": _json(s.messages), "tools": _json(s.tools),
    } for i, s in indexed], columns=["benchmark_split", "sample_id", "sample_index", "input", "target",
                                                "choices", "system", "files", "metadata", "slices", "messages",
                                                "tools"])
    df.attrs.update({"dataset_sha256": dataset_sha, "header": header, "shard": shard,
                     "fingerprint_mismatches": mismatches})
    return df


def samples_from_frame(df: pd.DataFrame) -> list[Sample]:
    return [Sample(id=r.sample_id, input=r.input, target=r.target if isinstance(r.target, str) else None,
                   metadata=_loads(r.metadata, {}), choices=_loads(r.choices, None),
                   system=r.system if isinstance(r.system, str) else None, files=_loads(r.files, []),
                   messages=_loads(getattr(r, "messages", None), None),
                   tools=_loads(getattr(r, "tools", None), None))
            for r in df.itertuples(index=False)]


# ---- prompts ----------------------------------------------------------------------------------------------------
def render_messages(messages: list[dict[str, Any]]) -> str:
    return "\n\n".join(f"[{m.get('role', 'user')}]\n{m.get('content', '')}" for m in messages)


def build_prompts(split: SplitConfig, model_key: str, dataset: pd.DataFrame, wrapper: Any = None) -> pd.DataFrame:
    """`wrapper`: a `PromptWrapper` (evalpipe/prompt_wrappers.py) shaping the system and user turns, or None."""
    adapter = adapter_for(split)
    config_tools = split_tool_schemas(split)  # [tools] schemas the benchmark config offers every sample
    rows = []
    for s, (_, d) in zip(samples_from_frame(dataset), dataset.iterrows()):
        tools = merge_tools(s.tools, config_tools)
        if wrapper is not None and not s.messages:  # [reproducibility] native chat messages are sent unwrapped
            messages = wrapper.render(user=s.input, system=s.system, tools=getattr(s, "tools", None))
        else:
            messages = adapter.build_messages(s)
        rows.append({
            "benchmark_split": split.key, "model": model_key, "sample_id": s.id, "sample_index": d["sample_index"],
            "messages": _json(messages), "prompt_text": render_messages(messages), "target": s.target,
            "files": d["files"], "metadata": d["metadata"], "slices": d["slices"],
            "prompt_fingerprint": fingerprint({"messages": messages, "files": s.files}
                                              | ({"wrapper": wrapper.sha256} if wrapper is not None else {})
                                              | ({"tools": tools} if tools is not None else {})),
            "tools": _json(tools),
        })
    return pd.DataFrame(rows)


# ---- rollouts ---------------------------------------------------------------------------------------------------
def journal_path(table: str, split_key: str, model_key: str) -> Path:
    return dagster_home() / "journal" / table / quote(split_key, safe="") / f"{quote(model_key, safe='')}.sqlite"


def rollout_requests(runner: Runner, prompts: pd.DataFrame, tools_env: Any = None) -> list[RolloutRequest]:
    ident = runner.identity()
    # [tools] a sample with tools is a conversation: its fingerprint also covers the fixtures' SHA-256, the tool
    # mode, live tools and the loop limits (one-shot samples keep their fingerprints)
    tools_id = fingerprint(tools_env.identity()) if tools_env is not None else None
    parsed: dict[str, Any] = {}  # one list object per distinct schema JSON (the loop caches per object)
    out = []
    for r in prompts.itertuples(index=False):
        raw_tools = getattr(r, "tools", None)
        tools = None
        if isinstance(raw_tools, str) and raw_tools:
            tools = parsed.get(raw_tools)
            if tools is None:
                tools = parsed[raw_tools] = json.loads(raw_tools)
        fp = {"runner": ident, "prompt": r.prompt_fingerprint, "sample": r.sample_id}
        if tools is not None:
            fp["tools"] = tools_id
        out.append(RolloutRequest(
            sample_id=r.sample_id, messages=json.loads(r.messages), fingerprint=fingerprint(fp),
            files=_loads(r.files, []), metadata=_loads(r.metadata, {}),
            target=r.target if isinstance(r.target, str) else None, tools=tools))
    return out


# ---- tools (docs/tools.md) ------------------------------------------------------------------------------------------
TRACE_COLUMNS = ("turns", "tool_calls", "invalid_args", "fixture_misses", "stop_reason", "tool_trace")
TOOL_CALL_COLUMNS = ("turn", "call_index", "name", "arguments", "arguments_valid", "normalized_key", "result",
                     "fixture_hit", "error", "latency_s")


def split_tool_schemas(split: SplitConfig) -> list[dict[str, Any]] | None:
    """The tool schemas a split's `tools:` config offers every sample (None without a `tools:` config)."""
    from evalpipe.tools import ToolEnv

    env = ToolEnv.for_split(split)
    return env.schemas() if env is not None else None


def merge_tools(sample_tools: list[dict[str, Any]] | None,
                config_tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The config's schemas, then the sample's own (a name the sample defines wins); None when none is offered."""
    if sample_tools is None and config_tools is None:
        return None
    from evalpipe.tools.schema import schema_name

    out = {schema_name(t): t for t in (config_tools or [])}
    out.update({schema_name(t): t for t in (sample_tools or [])})
    return list(out.values()) or None  # nothing offered: a one-shot request


def tools_env_for(split: SplitConfig, prompts: pd.DataFrame, mode: str | None = None) -> Any:
    """The split's `ToolEnv`; a default one (no fixtures) when only the dataset offers tools; else None."""
    from evalpipe.tools import ToolEnv

    env = ToolEnv.for_split(split, mode=mode)
    if env is None and "tools" in prompts.columns and prompts["tools"].notna().any():
        env = ToolEnv({}, split.options, resolve=split.resolve, mode=mode, where=split.key)
    return env


def tool_calls_frame(rollouts: pd.DataFrame) -> pd.DataFrame:
    """The `tool_calls` table rows of a rollouts frame (from each sample's `tool_trace`)."""
    cols = ["benchmark_split", "model", "sample_id", *TOOL_CALL_COLUMNS]
    rows = []
    if "tool_trace" in rollouts.columns:
        for r in rollouts[["benchmark_split", "model", "sample_id", "tool_trace"]].itertuples(index=False):
            for rec in _loads(r.tool_trace, []):
                rows.append({"benchmark_split": r.benchmark_split, "model": r.model, "sample_id": r.sample_id,
                             **{c: rec.get(c) for c in TOOL_CALL_COLUMNS}})
    return pd.DataFrame(rows, columns=cols)


def run_rollouts(split: SplitConfig, model: ModelConfig, prompts: pd.DataFrame, runner: Runner,
                 settings: RunSettings, progress: Callable[[int, int], None] | None = None,
                 journal_file: Path | None = None, tools_mode: str | None = None) -> pd.DataFrame:
    """`tools_mode` overrides the split's `tools.mode` (replay | live) for this run."""
    adapter = adapter_for(split)
    tools_env = tools_env_for(split, prompts, tools_mode)
    requests = rollout_requests(runner, prompts, tools_env)
    n_shards = int(model.options.get("rollout_shards") or split.options.get("rollout_shards") or 1)
    # [tools] conversations need the split's tool layer, which lives in this process: they are not sharded
    if n_shards > 1 and len(requests) > 1 and tools_env is None:  # [reproducibility] N worker processes by stable-hash shard, merged
        from evalpipe.sharding import run_sharded

        rows = run_sharded(model, requests, settings, n_shards,
                           journal_file or journal_path("rollouts", split.key, model.key), progress)
    else:
        with Journal(journal_file or journal_path("rollouts", split.key, model.key)) as journal:
            rows = asyncio.run(run_requests(runner, requests, journal, settings, progress, tools=tools_env))
    from evalpipe.runners.driver import ROW_FIELDS

    df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*ROW_FIELDS, "cached"])  # 0 samples: 0 rows
    for c in TRACE_COLUMNS:  # [tools] conversation columns (null for one-shot samples)
        if c not in df.columns:
            df[c] = None
    df["tool_trace"] = [_json(t) if isinstance(t, list) else t for t in df["tool_trace"]]
    if tools_env is not None:
        df.attrs["tool_registry_sha256"] = tools_env.tool_registry_sha256()
    df["prediction"] = [adapter.extract_answer(t) if s == "ok" else None
                        for t, s in zip(df.get("raw_output", [None] * len(df)), df["status"])]
    after = getattr(adapter, "after_rollouts", None)  # e.g. single_turn code run once (benchmarks/protocols.py)
    if after is not None:
        df = after(df, prompts)
    df["benchmark_split"], df["model"] = split.key, model.key
    return df


# ---- judgements -------------------------------------------------------------------------------------------------
def judge(split: SplitConfig, prompts: pd.DataFrame, rollouts: pd.DataFrame,
          metric_settings: dict[str, dict[str, Any]] | None = None, metrics: list[Any] | None = None) -> pd.DataFrame:
    adapter = adapter_for(split)
    specs = metrics if metrics is not None else adapter.metrics()
    trace_cols = [c for c in ("trajectory", "tool_trace", "stop_reason") if c in rollouts.columns]  # [tools]
    merged = prompts.merge(rollouts[["sample_id", "status", "error", "prediction", "raw_output", *trace_cols]],
                           on="sample_id", how="left", validate="one_to_one")
    rows = []
    for spec in specs:
        metric = build_metric(spec, metric_settings)
        judge_fp = fingerprint(metric.identity())
        ok = merged[merged["status"] == "ok"]
        items = [JudgeInput(sample_id=r.sample_id, input=r.prompt_text, target=r.target if isinstance(r.target, str) else None,
                            prediction=r.prediction if isinstance(r.prediction, str) else None,
                            raw_output=r.raw_output if isinstance(r.raw_output, str) else None,
                            metadata=_loads(r.metadata, {}), **_trace_inputs(r)) for r in ok.itertuples(index=False)]
        scorable = [i for i in items if i.target is not None or not metric.requires_target]
        scored = dict(zip((i.sample_id for i in scorable), asyncio.run(metric.ascore_many(scorable))))
        for r in merged.itertuples(index=False):
            target = r.target if isinstance(r.target, str) else None
            if r.sample_id in scored:
                sc = scored[r.sample_id]
            elif target is None and metric.requires_target:
                sc = Score.unscored()
            else:
                sc = Score(value=0.0, correct=False, status="error", reason=f"rollout failed: {r.error}")
            rows.append({
                "benchmark_split": split.key, "model": r.model, "sample_id": r.sample_id, "metric": metric.name,
                "score": sc.value, "correct": sc.correct, "status": sc.status, "reason": sc.reason,
                "prediction": r.prediction if isinstance(r.prediction, str) else None,
                "normalized_prediction": sc.normalized_prediction, "target": target,
                "normalized_target": sc.normalized_target, "slices": r.slices, "details": _json(sc.details or None),
                "judge_fingerprint": judge_fp,
            })
    return pd.DataFrame(rows)


def _trace_inputs(r: Any) -> dict[str, Any]:
    """[tools] JudgeInput's trace fields from a merged prompts+rollouts row (docs/interfaces.md)."""
    trajectory = _loads(getattr(r, "trajectory", None), [])
    stop = getattr(r, "stop_reason", None)
    return {"tool_calls": _loads(getattr(r, "tool_trace", None), []),
            "trajectory": trajectory if isinstance(trajectory, list) else [],
            "tools": _loads(getattr(r, "tools", None), None), "stop_reason": stop if isinstance(stop, str) else None}


# ---- metrics and leaderboard ------------------------------------------------------------------------------------
def compute_metrics(split_key: str, model_key: str, judgements: pd.DataFrame, seed: int = 0,
                    rollouts: pd.DataFrame | None = None, split: SplitConfig | None = None) -> pd.DataFrame:
    """Metric rows per slice; with `rollouts`, also the partition's latency/token/cost rows (slice `usage`).
    With `split`, a split with 0 samples (`limit: 0`, a filter matching nothing) gets n=0 rows for its metrics."""
    df = aggregate(judgements, seed=seed, rollouts=rollouts)
    if split is not None and not len(judgements):
        names = [m if isinstance(m, str) else m.get("name") for m in adapter_for(split).metrics()]
        nan = float("nan")
        empty = pd.DataFrame([{"metric": str(n), "slice": "all", "value": nan, "n": 0, "n_unscored": 0, "n_errors": 0,
                               "stderr": nan, "ci_low": nan, "ci_high": nan}
                              for n in names if n and n not in set(df.get("metric", []))])
        df = pd.concat([df, empty], ignore_index=True) if len(df) else empty
    df["benchmark_split"], df["model"] = split_key, model_key
    return df


def build_leaderboard(metrics: pd.DataFrame, include_limited: bool = False) -> pd.DataFrame:
    df = metrics[metrics["slice"] == "all"].drop(columns=["slice"]).copy()
    if not include_limited and len(df):  # `evalpipe run --limit N` partitions (<model>@limit<N>) never rank
        from evalpipe.run_marks import is_limited

        df = df[~df["model"].map(is_limited)]
    if df.empty:
        return df.assign(rank=pd.Series(dtype="int64"))
    # a split whose samples are all unscored (GAIA test: answers hidden) has value NaN: no rank, not a crash
    df["rank"] = df.groupby(["benchmark_split", "metric"])["value"].rank(
        ascending=False, method="min", na_option="keep").astype("Int64")
    return df.sort_values(["benchmark_split", "metric", "rank", "model"]).reset_index(drop=True)
