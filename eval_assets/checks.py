"""Quality gates as Dagster asset checks, per (benchmark_split, model) partition. They run with the assets
they check (in `evalpipe run` and in the UI) and show on the asset's Checks tab.

- rollouts / error_rate: failed rollouts / all rollouts <= `checks.max_error_rate` (default 0.1).
- metrics / samples_accounted: every sample of the partition has, for every metric, a judgement that is
  scored, unscored (no ground truth) or an error; and the metric rows count them all (n + n_unscored).
- metrics / judge_parse_failures: judge verdicts that couldn't be read / judged samples, per metric,
  <= `checks.max_parse_error_rate` (default 0.05).

Thresholds come from the config file (top-level `checks:`). A failed check has severity ERROR (WARN for
`severity: warn`). error_rate and judge_parse_failures report without hiding the results (a flaky model's
partition is still scored: its failures count as wrong). samples_accounted is a Dagster *blocking* check: a
partition whose metrics do not account for every sample is wrong, so assets downstream of `metrics` in the same
run (the leaderboard, when the UI materializes both) do not run, and `evalpipe run` exits 3 naming it.
"""

import json
from typing import Any, Iterator

import pandas as pd
from dagster import (AssetCheckExecutionContext, AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetIn,
                     MetadataValue, asset_check, multi_asset_check)

from eval_assets.assets import dataset, metrics, rollouts
from evalpipe.benchmarks.routing import SourceRouter
from evalpipe.core.errors import ConfigError
from evalpipe.metrics import USAGE_METRICS
from evalpipe.store.warehouse import PartitionReader  # [scale] inputs read lazily or by column (resources/warehouse.py)
from evalpipe.project import Project
from partitions import BENCHMARK_SPLIT, MODEL, benchmark_split_partitions, eval_partitions, partition_dims
from resources import EvalConfigResource, WarehouseResource

DEFAULTS = {"max_error_rate": 0.1, "max_parse_error_rate": 0.05, "severity": "error"}


def thresholds(eval_config: EvalConfigResource) -> dict[str, Any]:
    raw = eval_config.get().raw.get("checks") or {}
    if not isinstance(raw, dict):
        raise ConfigError("'checks' in the config must be a mapping, e.g. {max_error_rate: 0.1}")
    unknown = set(raw) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"'checks' has unknown key(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    return {**DEFAULTS, **raw}


def _severity(t: dict[str, Any]) -> AssetCheckSeverity:
    return AssetCheckSeverity.WARN if str(t["severity"]).lower() == "warn" else AssetCheckSeverity.ERROR


def error_rate_result(df: pd.DataFrame, max_rate: float) -> tuple[bool, dict[str, Any]]:
    n = len(df)
    errors = int((df["status"] != "ok").sum()) if n else 0
    rate = errors / n if n else 0.0
    first = df.loc[df["status"] != "ok", "error"].dropna().astype(str).head(3).tolist() if n else []
    return rate <= max_rate, {"rollouts": n, "errors": errors, "error_rate": rate, "max_error_rate": float(max_rate),
                              "first_errors": MetadataValue.md("\n".join(f"- {e[:200]}" for e in first) or "_none_")}


def accounted_result(prompts: pd.DataFrame, judgements: pd.DataFrame, metric_rows: pd.DataFrame,
                     routed: dict[str, set[str]] | None = None) -> tuple[bool, dict[str, Any]]:
    """`routed`: per metric of `metrics_by_source`, the samples it judges (the others have no row for it)."""
    all_samples = set(prompts["sample_id"]) if len(prompts) else set()
    from evalpipe.core.run_marks import base_id

    problems: list[str] = []
    names = sorted(set(judgements["metric"])) if len(judgements) else []
    for m in names:
        samples = (routed or {}).get(m, all_samples)
        n_samples = len({base_id(s) for s in samples})  # [epochs] a metric's n counts samples, each over its epochs
        j = judgements[judgements["metric"] == m]
        missing = samples - set(j["sample_id"])
        if missing:
            problems.append(f"{m}: {len(missing)} sample(s) without a judgement, e.g. {sorted(missing)[:3]}")
        bad = j[~j["status"].isin(["scored", "unscored", "error", "parse_error"])]
        if len(bad):
            problems.append(f"{m}: {len(bad)} judgement(s) with unknown status {sorted(set(bad['status']))}")
        row = metric_rows[(metric_rows["metric"] == m) & (metric_rows["slice"] == "all")] if len(metric_rows) else metric_rows
        if row.empty:
            problems.append(f"{m}: no metrics row")
        elif int(row["n"].iloc[0]) + int(row["n_unscored"].iloc[0]) != n_samples:
            problems.append(f"{m}: n {int(row['n'].iloc[0])} + unscored {int(row['n_unscored'].iloc[0])} != {n_samples} samples")
    if all_samples and not names:
        problems.append("no judgements at all")
    return not problems, {"samples": len(all_samples), "metrics": len(names),
                          "problems": MetadataValue.md("\n".join(f"- {p}" for p in problems) or "_none_")}


def unaccounted_samples(prompts: pd.DataFrame, judgements: pd.DataFrame,
                        routed: dict[str, set[str]] | None = None) -> list[str]:
    """The samples that fail `samples_accounted`: without a judgement for some metric (of those it routes to
    them, `routed` as in `accounted_result`), or judged with a status that is none of
    scored/unscored/error/parse_error."""
    samples = set(prompts["sample_id"]) if len(prompts) else set()
    if not len(judgements):
        return sorted(map(str, samples))
    out = set(judgements.loc[~judgements["status"].isin(["scored", "unscored", "error", "parse_error"]), "sample_id"])
    for m, j in judgements.groupby("metric"):
        out |= (routed or {}).get(m, samples) - set(j["sample_id"])
    return sorted(map(str, out))


def parse_failure_result(judgements: pd.DataFrame, max_rate: float) -> tuple[bool, dict[str, Any]]:
    worst, per_metric = 0.0, {}
    for m, j in (judgements.groupby("metric") if len(judgements) else []):
        judged = j[j["status"].isin(["scored", "parse_error"])]
        rate = float((judged["status"] == "parse_error").mean()) if len(judged) else 0.0
        per_metric[m] = {"parse_errors": int((judged["status"] == "parse_error").sum()), "judged": len(judged), "rate": rate}
        worst = max(worst, rate)
    return worst <= max_rate, {"worst_parse_error_rate": worst, "max_parse_error_rate": float(max_rate),
                               "per_metric": MetadataValue.json(per_metric)}


@asset_check(asset=rollouts, name="error_rate", partitions_def=eval_partitions,
             description="Share of failed rollouts is at most checks.max_error_rate (default 0.1).")
def rollouts_error_rate(context: AssetCheckExecutionContext, eval_config: EvalConfigResource,
                        rollouts: PartitionReader) -> AssetCheckResult:
    t = thresholds(eval_config)
    ok, meta = error_rate_result(rollouts.to_pandas(["status", "error"]), float(t["max_error_rate"]))
    return AssetCheckResult(passed=ok, severity=_severity(t), metadata=meta,
                            description=f"{meta['errors']}/{meta['rollouts']} rollouts failed")


# The metrics checks run as one Dagster step (a multi-asset check: one op, each check its own result, spec and UI
# row, each still selectable alone): one step and one load of `judgements` instead of three of each, which were
# ~15% of the Dagster work of a small run. Tool-integration gates: issue 10 (evalpipe/tooleval/gates.py, docs/metrics.md).
# Blocking checks are gates: when one fails (severity ERROR), Dagster skips what depends on `metrics` in the same run,
# the `evalpipe run` exits 3, and the partition stays off the leaderboard (the `gates` table) until it passes.
METRICS_CHECK_SPECS = {
    "samples_accounted": AssetCheckSpec(
        "samples_accounted", asset=metrics, partitions_def=eval_partitions, blocking=True,
        additional_deps=["prompts", "judgements"],
        description="Gate: every sample is scored, unscored (no ground truth) or counted as an error, for every "
                    "metric. Failing means the partition's numbers leave samples out: it is not ranked on the "
                    "leaderboard (its metrics stay viewable) and `evalpipe run` exits 3."),
    "judge_parse_failures": AssetCheckSpec(
        "judge_parse_failures", asset=metrics, partitions_def=eval_partitions, additional_deps=["judgements"],
        description="Share of unreadable judge verdicts is at most checks.max_parse_error_rate (default 0.05). "
                    "Failing is a warning about the judge: the partition stays ranked."),
    "tool_integration_gates": AssetCheckSpec(
        "tool_integration_gates", asset=metrics, partitions_def=eval_partitions, blocking=True,
        additional_deps=["judgements"],
        description="Gate: the tool-integration dataset's gates (controls_with_integration == 0, coverage >= 0.95, "
                    "F1 thresholds from the header). A failed gate the header marks blocking fails this check: the "
                    "partition is not ranked on the leaderboard (its samples and metrics stay viewable) and "
                    "`evalpipe run` exits 3. Non-blocking or 'insufficient' gates (too few eligible items) warn. "
                    "Declared only in projects with a tool_integration metric; other splits' partitions pass."),
    "tool_integration_ci_gates": AssetCheckSpec(
        "tool_integration_ci_gates", asset=metrics, partitions_def=eval_partitions, additional_deps=["judgements"],
        description="The tool-integration harness's CI gates one partition can judge (docs/tools.md \"CI gates\"): "
                    "locale probes' strict-lax delta <= 0.05 per locale (es/de/fr) and the teacher-heavy slice "
                    "(strict macro F1 at least the header's f1_strict_macro min; span-cap exceedances warn). A "
                    "warning only: the partition stays ranked. Runner parity compares two runs: make ci-runner-parity."),
}
TOOL_INTEGRATION_CHECKS = ("tool_integration_gates", "tool_integration_ci_gates")
BLOCKING_CHECKS = tuple(k for k, spec in METRICS_CHECK_SPECS.items() if spec.blocking)


def _record_gates(warehouse: WarehouseResource, partition_key: str, results: list[AssetCheckResult]) -> None:
    """The partition's blocking gate outcomes into the warehouse's `gates` table (the leaderboard reads it):
    the checks evaluated now replace their earlier rows; others are kept."""
    from datetime import datetime, timezone

    from evalpipe.core.errors import WarehouseError

    dims = partition_dims(partition_key)
    wh = warehouse.get()
    now = datetime.now(timezone.utc).isoformat()
    rows = pd.DataFrame([{**dims, "check": r.check_name, "passed": bool(r.passed), "severity": r.severity.value,
                          "description": r.description, "checked_at": now}
                         for r in results if r.check_name in BLOCKING_CHECKS])
    if not len(rows):
        return
    try:
        before = wh.read("gates", dims)
    except WarehouseError:  # the partition's first gates
        before = rows.iloc[0:0]
    kept = before[~before["check"].isin(rows["check"])] if len(before) else before
    wh.write("gates", pd.concat([kept, rows], ignore_index=True) if len(kept) else rows, dims)


def splits_with_tool_integration(project: Project) -> list[str]:
    """The project's splits whose metrics include `tool_integration` (where its gates apply)."""
    from evalpipe.benchmarks import adapter_for
    from evalpipe.tooleval.report import METRIC

    out = []
    for key, split in sorted(project.config.splits.items()):
        try:
            names = adapter_for(split).metrics()
        except Exception:  # an adapter that can't be built yet fails at materialization, with its own message
            names = split.metrics or []
        if any((m if isinstance(m, str) else (m or {}).get("name")) == METRIC for m in names):
            out.append(key)
    return out


def metrics_checks_for(project: Project | None):
    """The metrics checks of a project: `tool_integration_gates` only where a split has the tool_integration
    metric (None: every check, for callers without a project)."""
    names = [k for k in METRICS_CHECK_SPECS
             if k not in TOOL_INTEGRATION_CHECKS or project is None or splits_with_tool_integration(project)]

    @multi_asset_check(
        name="metrics_checks", specs=[METRICS_CHECK_SPECS[k] for k in names], can_subset=True,
        ins={"metrics": AssetIn("metrics"), "prompts": AssetIn("prompts"), "judgements": AssetIn("judgements")})
    def metrics_checks(context: AssetCheckExecutionContext, eval_config: EvalConfigResource,
                       warehouse: WarehouseResource, metrics: pd.DataFrame, prompts: PartitionReader,
                       judgements: PartitionReader) -> Iterator[AssetCheckResult]:
        results = list(_metrics_check_results(context, eval_config, metrics, prompts, judgements))
        _record_gates(warehouse, context.partition_key, results)
        yield from results

    return metrics_checks


# Which samples fail a tool-integration gate, from their result records (evalpipe/tooleval/report.py `summarize`
# counts the same flags); gates over pooled scores (F1, JSON validity) have no per-sample culprit.
_GATE_SAMPLE_FAILS = {
    "controls_with_integration": lambda r: r.get("kind") == "control" and bool(r["flags"].get("contaminated")),
    "control_contamination_rate": lambda r: r.get("kind") == "control" and bool(r["flags"].get("contaminated")),
    "coverage": lambda r: bool(r["eligible"].get("coverage")) and not r["flags"].get("integrated"),
    "grounded_coverage": lambda r: bool(r["eligible"].get("coverage")) and not r["flags"].get("grounded"),
    "multi_call_parity": lambda r: bool(r["eligible"].get("parity")) and not r["calls"].get("parity"),
    "error_recovery": lambda r: bool(r["eligible"].get("recovery")) and not r["flags"].get("recovered"),
    "negative_control_hallucination_rate": lambda r: (r.get("kind") == "negative_control"
                                                      and bool(r["flags"].get("hallucinated"))),
    "fixture_misses": lambda r: int(r["calls"].get("fixture_misses") or 0) > 0,
}
MAX_LINKED_SAMPLES = 200  # a longer id list makes a URL some browsers and proxies refuse


def gate_failed_samples(judgements: pd.DataFrame, failed_gates: list[str]) -> list[str]:
    """The sample ids whose tool_integration records fail one of `failed_gates` (those with a per-sample rule)."""
    import json

    from evalpipe.tooleval.report import METRIC

    rules = [_GATE_SAMPLE_FAILS[g] for g in failed_gates if g in _GATE_SAMPLE_FAILS]
    j = judgements[judgements["metric"] == METRIC] if len(judgements) and rules else judgements.iloc[0:0]
    out = []
    for sample_id, details in zip(j["sample_id"], j["details"]):
        try:
            rec = json.loads(details) if isinstance(details, str) and details else {}
        except ValueError:
            continue
        try:
            if rec.get("result_version") and any(rule(rec) for rule in rules):
                out.append(str(sample_id))
        except (KeyError, TypeError, AttributeError):  # a record of another layout: no culprit, not a crash
            continue
    return sorted(set(out))


def failed_samples_meta(partition_key, sample_ids: list[str], metric: str | None = None) -> dict[str, Any]:
    """Metadata of a failed gate: how many samples failed it and a link to the viewer's sample list narrowed to
    them (the first MAX_LINKED_SAMPLES)."""
    from evalpipe.viewer.links import viewer_url

    dims = partition_dims(partition_key)
    if MODEL not in dims or not sample_ids:
        return {}
    url = viewer_url(dims[BENCHMARK_SPLIT], dims[MODEL], metric=metric, sample_ids=sample_ids[:MAX_LINKED_SAMPLES])
    return {"failed_samples": len(sample_ids), "failed_samples_link": MetadataValue.url(url)}


def _metrics_check_results(context: AssetCheckExecutionContext, eval_config: EvalConfigResource,
                           metrics: pd.DataFrame, prompts: PartitionReader,
                           judgements: PartitionReader) -> Iterator[AssetCheckResult]:
    selected = {key.name for key in context.selected_asset_check_keys}
    t = thresholds(eval_config)
    # [scale] only the columns the checks read (the readers are lazy: resources/warehouse.py)
    judgement_columns = ["sample_id", "metric", "status"] + (["details"] if selected & set(TOOL_INTEGRATION_CHECKS) else [])
    judgements = judgements.to_pandas(judgement_columns)
    split = eval_config.get().split(partition_dims(context.partition_key)["benchmark_split"])
    router = SourceRouter.of(split.key, split.options)  # [routing] a routed metric judges its sources' samples only
    prompts = prompts.to_pandas(["sample_id"] + (["metadata"] if router else [])) if "samples_accounted" in selected \
        else None
    if "samples_accounted" in selected:
        rows = metrics[~metrics["metric"].isin(USAGE_METRICS)] if len(metrics) else metrics
        routed = router.expected_samples(prompts["sample_id"], (json.loads(m) if isinstance(m, str) else {}
                                                               for m in prompts["metadata"])) if router else None
        ok, meta = accounted_result(prompts, judgements, rows, routed)
        if not ok:
            meta.update(failed_samples_meta(context.partition_key, unaccounted_samples(prompts, judgements, routed)))
        yield AssetCheckResult(check_name="samples_accounted", passed=ok, severity=_severity(t), metadata=meta,
                               description=None if ok else "some samples are not accounted for")
    if "judge_parse_failures" in selected:
        ok, meta = parse_failure_result(judgements, float(t["max_parse_error_rate"]))
        yield AssetCheckResult(check_name="judge_parse_failures", passed=ok, severity=_severity(t), metadata=meta)
    if "tool_integration_gates" in selected:
        from evalpipe.tooleval.gates import gate_outcome

        out = gate_outcome(judgements)
        meta = {"gates": MetadataValue.json(out.gates)} if out.applicable else {}
        failed = [g["gate"] for g in out.gates if g.get("status") == "fail"]
        if failed:
            meta.update(failed_samples_meta(context.partition_key, gate_failed_samples(judgements, failed),
                                            metric="tool_integration"))
        # only a failed gate the header marks blocking is an ERROR (blocks); other failures warn
        yield AssetCheckResult(check_name="tool_integration_gates", passed=out.passed, metadata=meta,
                               description=out.description[:1000],
                               severity=AssetCheckSeverity.ERROR if out.error else AssetCheckSeverity.WARN)
    if "tool_integration_ci_gates" in selected:
        from evalpipe.pipeline.tool_report import judged_results, partition_ci_gates

        results = judged_results(judgements)
        gates = partition_ci_gates(results) if results else []
        yield AssetCheckResult(check_name="tool_integration_ci_gates", severity=AssetCheckSeverity.WARN,
                               passed=all(g["status"] != "fail" for g in gates),
                               metadata={"ci_gates": MetadataValue.json(gates)} if gates else {},
                               description="; ".join(f"{g['gate']}: {g['status']}" for g in gates) or "not applicable")


metrics_checks = metrics_checks_for(None)


def eval_checks(project: Project | None) -> list:
    """The asset checks of a project (eval_assets/factory.py): each declared only where it applies."""
    return [rollouts_error_rate, metrics_checks_for(project), dataset_tool_fixtures]




# ---- tool fixtures (issue 9; evalpipe/tools/replay.py, docs/tools.md) --------------------------------------------
TOOL_FIXTURE_MIN_HIT_RATE = 0.95


@asset_check(asset=dataset, name="tool_fixtures", partitions_def=benchmark_split_partitions,
             description="Broker smoke check: every tool fixture key, spelled in normalization variants (re-cased "
                         "and padded queries, reordered keys, null extras, top_k omitted/null/3 for web.search*), "
                         "still hits its fixture in at least 95% of lookups. Splits without fixtures: passes.")
def dataset_tool_fixtures(context: AssetCheckExecutionContext, eval_config: EvalConfigResource,
                          dataset: PartitionReader) -> AssetCheckResult:
    from evalpipe.tools import ToolEnv

    env = ToolEnv.for_split(eval_config.get().split(context.partition_key))
    if env is None or not env.broker.fixtures:
        return AssetCheckResult(passed=True, description="no tool fixtures")
    r = env.broker.check()
    return AssetCheckResult(
        passed=r["hit_rate"] >= TOOL_FIXTURE_MIN_HIT_RATE,
        metadata={"fixtures": r["fixtures"], "variants": r["variants"], "hit_rate": float(r["hit_rate"]),
                  "tool_registry_sha256": env.tool_registry_sha256(),
                  "misses": MetadataValue.md("\n".join(f"- {m}" for m in r["failures"]) or "_none_")},
        description=f"{r['hits']}/{r['variants']} fixture lookups hit ({r['hit_rate']:.1%})")


EVAL_CHECKS = eval_checks(None)  # every check (tests and callers without a project)
