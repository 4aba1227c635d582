"""`evalpipe validate-sharding`: prove that an N-shard run gives exactly what one pass gives.

A baseline run and N shard runs, each in its own isolated state (its own DAGSTER_HOME: Dagster instance,
warehouse, resume journal, artifacts), under a deterministic environment: PYTHONHASHSEED=0, OMP/MKL (and
torch) on one thread, temperature 0, top_p 1, no retries (a retry is counted as a failure). Then:

- coverage: every baseline sample is in exactly one shard (`duplicates`, `missing`), and in the shard its id
  hashes to; `shard_sizes` per shard;
- per example: each (sample, metric) verdict after the scorer's normalization (status, correct and
  normalized prediction/target exactly; score with `abs(a-b) <= max(atol, rtol*max(|a|,|b|))`), each rollout's
  status, and for tool-using samples the tool choice (the called tools' names, in call order), the normalized
  arguments (the broker's normalization, sorted keys) and the integration spans (the strict and lax span values of
  the `tool_integration` result), exactly;
- metrics: the shards concatenated and sorted by sample_id are summarized again and compared with the baseline
  summarized the same way (counts exactly, values with the tolerance above); wall time and latency are not compared;
- fingerprints: every shard's six fingerprints equal the baseline's;
- gates: no asset check of severity ERROR failed in any run, and no rollout needed a retry.

The report JSON has exactly the fields of `REPORT_FIELDS`.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from evalpipe.core.procs import restore_environ

REPORT_FIELDS = ("ok", "num_shards", "dataset_sha256", "runner_fingerprint", "model_fingerprint",
                 "per_example_mismatches", "metric_diffs", "shard_sizes", "duplicates", "missing",
                 "fingerprints_match", "coverage_ok", "metrics_match", "gates_ok")
DETERMINISTIC_ENV = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                     "OPENBLAS_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "EVALS_DETERMINISTIC": "1"}
DETERMINISTIC_PARAMS = {"temperature": 0, "top_p": 1}
NOT_COMPARED_METRICS = ("latency_s_p50", "latency_s_p95", "latency_s_mean")  # wall time is not compared
METRIC_COUNTS = ("n", "n_unscored", "n_errors")
METRIC_FLOATS = ("value", "stderr", "ci_low", "ci_high")
VERDICT_EXACT = ("status", "correct", "normalized_prediction", "normalized_target")


@dataclass
class Phase:
    """What one isolated run left: its warehouse tables for the partition, fingerprints and gate results."""

    name: str
    dataset: pd.DataFrame
    rollouts: pd.DataFrame
    judgements: pd.DataFrame
    fingerprints: dict[str, Any]
    gates_failed: list[str] = field(default_factory=list)
    shard: tuple[int, int] | None = None


def close(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if _missing(a) and _missing(b):
        return True
    if _missing(a) or _missing(b):
        return False
    a, b = float(a), float(b)
    return abs(a - b) <= max(atol, rtol * max(abs(a), abs(b)))


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def _plain(v: Any) -> Any:
    if _missing(v):
        return None
    return v.item() if hasattr(v, "item") else v


def _deterministic_torch() -> None:
    if "torch" in sys.modules or os.environ.get("EVALS_DETERMINISTIC") == "1":
        try:
            import torch

            torch.set_num_threads(1)
            torch.use_deterministic_algorithms(True, warn_only=True)
        except Exception:
            pass


@contextmanager
def _isolated_home(path: Path) -> Iterator[Path]:
    """DAGSTER_HOME (instance, warehouse, journal, artifacts) pointed at `path` for the duration."""
    saved = {k: os.environ.get(k) for k in ("DAGSTER_HOME", "EVALS_WAREHOUSE", "EVALS_ARTIFACTS")}
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(path)
    os.environ.pop("EVALS_WAREHOUSE", None)
    os.environ.pop("EVALS_ARTIFACTS", None)
    try:
        yield path
    finally:
        restore_environ(saved)


def run_phase(name: str, home: Path, split_key: str, model_key: str, *, shard: tuple[int, int] | None = None,
              limit: int | None = None, runner_options: dict[str, Any] | None = None,
              params: dict[str, Any] | None = None) -> Phase:
    """One isolated run (dataset -> metrics) of one partition, or of one shard of it, in this process."""
    from dagster import DagsterInstance

    from eval_assets.launch import check_results, evaluate
    from evalpipe.project import load_config
    from evalpipe.core.errors import WarehouseError
    from evalpipe.store.warehouse import Warehouse
    from resources import EvalConfigResource, ModelRunnerResource

    split_options: dict[str, Any] = {}
    if limit is not None:  # a try's key: the dataset partition always holds the whole split (evalpipe/core/run_marks.py)
        from evalpipe.core.run_marks import limited_key

        model_key = limited_key(model_key, limit)
    if shard is not None:
        split_options["num_shards"], split_options["shard_index"] = shard
    from evalpipe.repro.run_request import sort_runner_options

    kw = sort_runner_options(dict(runner_options or {}),
                             {"params": {**DETERMINISTIC_PARAMS, **(params or {})}, "options": {}, "max_retries": 0})
    resources = {"model_runner": ModelRunnerResource(**kw),
                 "eval_config": EvalConfigResource(split_options=split_options)}
    with _isolated_home(home):
        cfg = load_config()
        with DagsterInstance.get() as instance:
            result = evaluate(cfg, [split_key], [model_key], resources=resources, instance=instance)
            checks = check_results(instance, [p.run_id for p in result.partitions if p.run_id])
        failed = [f"{name}: {p.error}" for p in result.partitions if not p.success]
        failed += [f"{name}: check {c.check} on {c.asset} failed" for c in checks
                   if not c.passed and c.severity == "ERROR"]
        wh = Warehouse(home / "warehouse.duckdb")
        part = {"benchmark_split": split_key, "model": model_key}

        def read(table: str, p: dict[str, str]) -> pd.DataFrame:
            try:
                return wh.read(table, p)
            except WarehouseError:
                return pd.DataFrame()

        fps = read("fingerprints", part)
        rollouts = read("rollouts", part)
        if len(rollouts) and "attempts" in rollouts:
            retried = rollouts[pd.to_numeric(rollouts["attempts"]).fillna(1) > 1]
            if len(retried):
                failed.append(f"{name}: {len(retried)} rollout(s) needed a retry, e.g. {retried['sample_id'].iloc[0]}")
        return Phase(name=name, dataset=read("datasets", {"benchmark_split": split_key}), rollouts=rollouts,
                     judgements=read("judgements", part),
                     fingerprints={k: _plain(v) for k, v in fps.iloc[-1].to_dict().items()} if len(fps) else {},
                     gates_failed=failed, shard=shard)


def collect(split_key: str, model_key: str, num_shards: int, workdir: Path, *, limit: int | None = None,
            runner_options: dict[str, Any] | None = None,
            shard_params: dict[int, dict[str, Any]] | None = None) -> tuple[Phase, list[Phase]]:
    """The baseline and the N shard runs, each in its own DAGSTER_HOME under `workdir`. `shard_params` gives a
    shard other decoding params (a planted difference, for testing the validator)."""
    _deterministic_torch()
    baseline = run_phase("baseline", workdir / "baseline", split_key, model_key, limit=limit,
                         runner_options=runner_options)
    shards = [run_phase(f"shard {i}", workdir / f"shard-{i}", split_key, model_key, shard=(num_shards, i), limit=limit,
                        runner_options=runner_options, params=(shard_params or {}).get(i))
              for i in range(num_shards)]
    return baseline, shards


def _summarize(split_key: str, model_key: str, judgements: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    from evalpipe.pipeline.stages import compute_metrics

    if not len(judgements):
        return pd.DataFrame(columns=["metric", "slice", *METRIC_COUNTS, *METRIC_FLOATS])
    j = judgements.sort_values(["sample_id", "metric"], kind="stable").reset_index(drop=True)
    r = rollouts.sort_values("sample_id", kind="stable").reset_index(drop=True) if len(rollouts) else None
    return compute_metrics(split_key, model_key, j, rollouts=r)


def tool_view(tool_trace: Any) -> tuple[list[str], list[str | None]]:
    """(tool choice, normalized arguments) of one rollout's `tool_trace`: names in call order, and each call's
    arguments as the broker normalizes them for lookup (canonical JSON, sorted keys; None when not a JSON object)."""
    from evalpipe.tools.replay import normalized_key

    trace = tool_trace
    if isinstance(trace, str):
        try:
            trace = json.loads(trace) if trace else []
        except ValueError:
            trace = []
    if not isinstance(trace, list):
        return [], []
    calls = sorted((c for c in trace if isinstance(c, dict)), key=lambda c: int(c.get("call_index") or 0))
    names, args = [], []
    for c in calls:
        a = c.get("arguments")
        if isinstance(a, str):
            try:
                a = json.loads(a) if a.strip() else {}
            except ValueError:
                a = None
        names.append(str(c.get("name")))
        args.append(normalized_key(str(c.get("name")), a) if isinstance(a, dict) else None)
    return names, args


def _spans(judgement: dict[str, Any] | None) -> dict[str, Any] | None:
    """The integration spans of a `tool_integration` verdict (its details), None for other metrics."""
    if judgement is None or judgement.get("metric") != "tool_integration":
        return None
    try:
        d = json.loads(judgement.get("details") or "{}")
    except (TypeError, ValueError):
        return None
    sp = d.get("spans") or {}
    return {"strict": sp.get("strict_values"), "lax": sp.get("lax_values")}


def _tool_mismatches(baseline: Phase, merged_r: pd.DataFrame, bj: dict, sj: dict) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if "tool_trace" in baseline.rollouts and "tool_trace" in merged_r:
        bt = dict(zip(baseline.rollouts["sample_id"], baseline.rollouts["tool_trace"]))
        st = dict(zip(merged_r["sample_id"], merged_r["tool_trace"]))
        for sid in sorted(set(bt) & set(st)):
            (bn, ba), (sn, sa) = tool_view(bt[sid]), tool_view(st[sid])
            if bn != sn:
                out.append({"sample_id": sid, "metric": None, "field": "tool_choice", "baseline": bn, "sharded": sn})
            elif ba != sa:
                out.append({"sample_id": sid, "metric": None, "field": "tool_arguments", "baseline": ba,
                            "sharded": sa})
    for key in sorted(set(bj) & set(sj)):
        a, b = _spans(bj[key]), _spans(sj[key])
        if a != b:
            out.append({"sample_id": key[0], "metric": key[1], "field": "integration_spans", "baseline": a,
                        "sharded": b})
    return out


def compare(baseline: Phase, shards: list[Phase], num_shards: int, atol: float = 1e-6, rtol: float = 1e-6,
            split_key: str | None = None, model_key: str | None = None) -> dict[str, Any]:
    from evalpipe.pipeline.fingerprints import NAMES
    from evalpipe.pipeline.shards import shard_of

    split_key = split_key or (baseline.dataset["benchmark_split"].iloc[0] if len(baseline.dataset) else "")
    model_key = model_key or (baseline.rollouts["model"].iloc[0] if len(baseline.rollouts) else "")
    base_ids = list(baseline.rollouts["sample_id"]) if len(baseline.rollouts) else []
    # coverage: each sample in exactly one shard, the one its id hashes to
    seen: dict[str, int] = {}
    duplicates: set[str] = set()
    misplaced: list[str] = []
    sizes = []
    for i, sh in enumerate(shards):
        ids = list(sh.rollouts["sample_id"]) if len(sh.rollouts) else []
        sizes.append(len(ids))
        for sid in ids:
            if sid in seen:
                duplicates.add(sid)
            seen[sid] = seen.get(sid, 0) + 1
            if shard_of(sid, num_shards) != i:
                misplaced.append(sid)
    missing = sorted(set(base_ids) - set(seen))
    extra = sorted(set(seen) - set(base_ids))
    coverage_ok = not duplicates and not missing and not extra and not misplaced and len(shards) == num_shards

    # fingerprints: every shard's equal the baseline's
    fp_diffs = [(sh.name, n) for sh in shards for n in NAMES
                if str(sh.fingerprints.get(n)) != str(baseline.fingerprints.get(n))]
    fingerprints_match = bool(baseline.fingerprints) and not fp_diffs

    # per example, after the scorer's normalization
    merged_j = pd.concat([s.judgements for s in shards if len(s.judgements)], ignore_index=True) \
        if any(len(s.judgements) for s in shards) else pd.DataFrame(columns=["sample_id", "metric"])
    merged_r = pd.concat([s.rollouts for s in shards if len(s.rollouts)], ignore_index=True) \
        if any(len(s.rollouts) for s in shards) else pd.DataFrame(columns=["sample_id", "status"])
    mismatches: list[dict[str, Any]] = []
    bj = {(r["sample_id"], r["metric"]): r for r in baseline.judgements.to_dict("records")} if len(baseline.judgements) else {}
    sj: dict[tuple[str, str], dict[str, Any]] = {}
    for r in merged_j.to_dict("records"):
        sj.setdefault((r["sample_id"], r["metric"]), r)  # a duplicate is reported under coverage
    for key in sorted(set(bj) | set(sj)):
        a, b = bj.get(key), sj.get(key)
        if a is None or b is None:
            mismatches.append({"sample_id": key[0], "metric": key[1], "field": "presence",
                               "baseline": a is not None, "sharded": b is not None})
            continue
        for f in VERDICT_EXACT:
            if _plain(a.get(f)) != _plain(b.get(f)):
                mismatches.append({"sample_id": key[0], "metric": key[1], "field": f,
                                   "baseline": _plain(a.get(f)), "sharded": _plain(b.get(f))})
        if not close(a.get("score"), b.get("score"), atol, rtol):
            mismatches.append({"sample_id": key[0], "metric": key[1], "field": "score",
                               "baseline": _plain(a.get("score")), "sharded": _plain(b.get("score"))})
    mismatches += _tool_mismatches(baseline, merged_r, bj, sj)
    br = dict(zip(baseline.rollouts["sample_id"], baseline.rollouts["status"])) if len(baseline.rollouts) else {}
    sr = dict(zip(merged_r["sample_id"], merged_r["status"])) if len(merged_r) else {}
    for sid in sorted(set(br) & set(sr)):
        if br[sid] != sr[sid]:
            mismatches.append({"sample_id": sid, "metric": None, "field": "rollout_status",
                               "baseline": br[sid], "sharded": sr[sid]})

    # metrics: both summarized the same way (sorted by sample_id), compared
    bm = _summarize(split_key, model_key, baseline.judgements, baseline.rollouts)
    mm = _summarize(split_key, model_key, merged_j, merged_r)
    metric_diffs: list[dict[str, Any]] = []
    bmi = {(r["metric"], r["slice"]): r for r in bm.to_dict("records") if r["metric"] not in NOT_COMPARED_METRICS}
    mmi = {(r["metric"], r["slice"]): r for r in mm.to_dict("records") if r["metric"] not in NOT_COMPARED_METRICS}
    for key in sorted(set(bmi) | set(mmi)):
        a, b = bmi.get(key), mmi.get(key)
        if a is None or b is None:
            metric_diffs.append({"metric": key[0], "slice": key[1], "field": "presence",
                                 "baseline": a is not None, "sharded": b is not None})
            continue
        for f in METRIC_COUNTS:
            if f in a and _plain(a.get(f)) != _plain(b.get(f)):
                metric_diffs.append({"metric": key[0], "slice": key[1], "field": f,
                                     "baseline": _plain(a.get(f)), "sharded": _plain(b.get(f))})
        for f in METRIC_FLOATS:
            if f in a and not close(a.get(f), b.get(f), atol, rtol):
                metric_diffs.append({"metric": key[0], "slice": key[1], "field": f,
                                     "baseline": _plain(a.get(f)), "sharded": _plain(b.get(f))})
    metrics_match = not mismatches and not metric_diffs
    gates_ok = not baseline.gates_failed and not any(s.gates_failed for s in shards)
    report = {
        "ok": bool(fingerprints_match and coverage_ok and metrics_match and gates_ok),
        "num_shards": int(num_shards),
        "dataset_sha256": baseline.fingerprints.get("dataset_sha256"),
        "runner_fingerprint": baseline.fingerprints.get("runner_fingerprint"),
        "model_fingerprint": baseline.fingerprints.get("model_fingerprint"),
        "per_example_mismatches": mismatches,
        "metric_diffs": metric_diffs,
        "shard_sizes": sizes,
        "duplicates": sorted(duplicates),
        "missing": missing,
        "fingerprints_match": bool(fingerprints_match),
        "coverage_ok": bool(coverage_ok),
        "metrics_match": bool(metrics_match),
        "gates_ok": bool(gates_ok),
    }
    assert tuple(report) == REPORT_FIELDS
    return report


def validate(split_key: str, model_key: str, num_shards: int = 4, *, limit: int | None = None, atol: float = 1e-6,
             rtol: float = 1e-6, workdir: str | os.PathLike | None = None,
             runner_options: dict[str, Any] | None = None, shard_params: dict[int, dict[str, Any]] | None = None,
             report_path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Run and compare in this process (the caller sets up the deterministic environment; see `run_isolated`)."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="evalpipe-validate-sharding-")
        workdir = tmp
    try:
        baseline, shards = collect(split_key, model_key, num_shards, Path(workdir), limit=limit,
                                   runner_options=runner_options, shard_params=shard_params)
        report = compare(baseline, shards, num_shards, atol, rtol, split_key, model_key)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if report_path:
        write_report(report, report_path)
    return report


def write_report(report: dict[str, Any], path: str | os.PathLike) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return p


def run_isolated(split_key: str, model_key: str, num_shards: int, **kw: Any) -> dict[str, Any]:
    """`validate` in a fresh Python process under the deterministic environment (PYTHONHASHSEED must be set
    before the interpreter starts); returns the report."""
    report_path = kw.pop("report_path", None) or str(Path(tempfile.mkdtemp(prefix="evalpipe-report-")) / "report.json")
    args = {"split_key": split_key, "model_key": model_key, "num_shards": num_shards, "report_path": report_path, **kw}
    env = {**os.environ, **DETERMINISTIC_ENV}
    # The child's output goes to a file, not a pipe: helper processes a run may leave behind (Dagster's compute-log
    # `tail -F`, which ignores SIGTERM) would hold a pipe open forever. Its own session: they are ended with it.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen([sys.executable, "-m", "evalpipe.repro.validate_sharding", json.dumps(args, default=str)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode = proc.wait()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever of the child's process group is left
            except (ProcessLookupError, PermissionError):
                pass
        log.seek(0)
        output = log.read()
    if returncode != 0 or not Path(report_path).exists():
        from evalpipe.core.errors import EvalError

        tail = output.strip().splitlines()
        raise EvalError(f"validate-sharding failed: {tail[-1] if tail else f'exit {returncode}'}")
    return json.loads(Path(report_path).read_text())


if __name__ == "__main__":  # the child of `run_isolated`
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    a = json.loads(sys.argv[1])
    validate(a.pop("split_key"), a.pop("model_key"), a.pop("num_shards"), **a)
