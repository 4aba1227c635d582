"""Experiment trackers fed from the pipeline's results: each metrics partition as an MLflow run when the config
has `mlflow:` (evalpipe/interop/mlflow_runs.py; docs/interop.md "MLflow")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from evalpipe.core.config import EvalConfig
from evalpipe.core.errors import WarehouseError
from evalpipe.core.run_marks import is_try_run
from evalpipe.interop.mlflow_runs import MlflowSettings, log_failed_partition, log_partition, sample_table
from evalpipe.pipeline import fingerprints


def log_metrics_to_mlflow(cfg: EvalConfig, wh: Any, split_key: str, model_key: str, metrics_frame: Any, *,
                          data_version: str, viewer_url: str | None, dagster_run_id: str | None) -> str | None:
    """The MLflow run id of this metrics partition, logged now or found already logged; None when `mlflow:` is off
    or the key is a try (`--limit`, `--sample-id`, ad hoc) and `include_tries` isn't set. A tracker that fails
    raises: the caller decides whether that fails the step."""
    settings = MlflowSettings.from_config(cfg.mlflow, cfg.path.parent)
    if settings is None or (is_try_run(model_key) and not settings.include_tries):
        return None
    fps = fingerprints.previous(wh, split_key, model_key) or {}
    samples = _samples(wh, split_key, model_key)
    return log_partition(settings, split_key, model_key, metrics_frame, fingerprints=fps,
                         data_version=data_version, viewer_url=viewer_url, dagster_run_id=dagster_run_id,
                         samples=samples)


def _samples(wh: Any, split_key: str, model_key: str) -> Any:
    """The partition's per-sample table (mlflow_runs.sample_table), secrets masked as in the run artifacts."""
    from evalpipe.core.redact import redact

    judgements = wh.read("judgements", {"benchmark_split": split_key, "model": model_key},
                         ["sample_id", "metric", "score", "status", "target", "prediction"])
    table = sample_table(judgements)
    for c in ("target", "prediction"):
        if c in table:
            table[c] = [redact(v) if isinstance(v, str) else v for v in table[c]]
    return table


# our own message for a rollouts step where nothing was measured (eval_assets/assets.py): every sample an error
_ALL_FAILED = re.compile(r"every one of the (\d+) sample\(s\) failed")
_AFTER_ROLLOUTS = ("judgements", "metrics", "metrics checks")  # a failure here: the partition's rollouts are kept


@dataclass(frozen=True)
class PartitionFailure:
    """One partition that failed in one Dagster run: the error starts with the step that failed (`rollouts: ...`)."""

    benchmark_split: str
    model: str
    error: str
    dagster_run_id: str | None = None


def failure_counts(wh: Any, failure: PartitionFailure) -> dict[str, int]:
    """The error counts known for a failed partition: from its rollouts when the failure came after them (they
    are this run's), or every sample when the rollouts step failed with nothing measured; {} when not known."""
    step = failure.error.split(":", 1)[0].strip()
    if step in _AFTER_ROLLOUTS:
        try:
            status = wh.read("rollouts", {"benchmark_split": failure.benchmark_split, "model": failure.model},
                             ["status"])["status"]
            return {"n_errors": int((status != "ok").sum()), "n_samples": int(len(status))}
        except (WarehouseError, OSError, KeyError):
            pass
    m = _ALL_FAILED.search(failure.error)
    return {"n_errors": int(m.group(1)), "n_samples": int(m.group(1))} if m else {}


def log_failures(cfg: EvalConfig, wh: Any, failures: list[PartitionFailure]) -> list[str]:
    """Each failed partition as a FAILED MLflow run (once per Dagster run and partition, whoever calls: the CLI,
    `evaluate()`, a batch op, the run failure sensor); the tracker's errors, one text each. [] when `mlflow:` is
    off or all were logged."""
    settings = MlflowSettings.from_config(cfg.mlflow, cfg.path.parent)
    if settings is None:
        return []
    errors: list[str] = []
    for f in failures:
        if is_try_run(f.model) and not settings.include_tries:
            continue
        try:
            log_failed_partition(settings, f.benchmark_split, f.model, f.error or "failed",
                                 fingerprints=fingerprints.previous(wh, f.benchmark_split, f.model) or {},
                                 dagster_run_id=f.dagster_run_id, counts=failure_counts(wh, f))
        except Exception as exc:  # noqa: BLE001  (any failure of the tracker's client)
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def tracker_line(cfg: EvalConfig, errors: list[str]) -> list[str]:
    """The one line saying the tracker failed (redacted), or []."""
    settings = MlflowSettings.from_config(cfg.mlflow, cfg.path.parent)
    if settings is None or not errors:
        return []
    from evalpipe.core.redact import redact

    first = " ".join(errors[0].split())[:300]
    return [redact(f"mlflow: {len(errors)} partition(s) not logged to {settings.tracking_uri or 'the default store'}: "
                   f"{first} (the numbers are in the warehouse; re-run when the tracker is back)")]


def report_run(cfg: EvalConfig, wh: Any, instance: Any, partitions: list[Any]) -> list[str]:
    """After `evalpipe run` or `evaluate()`: each failed partition logged as a FAILED MLflow run, and one line when
    the tracker failed (for those, or for a finished partition whose metrics step could not log: its
    materialization says `mlflow: not logged: ...`). [] when `mlflow:` is off or all went well."""
    if MlflowSettings.from_config(cfg.mlflow, cfg.path.parent) is None:
        return []
    errors = log_failures(cfg, wh, [PartitionFailure(p.benchmark_split, p.model, p.error or "failed", p.run_id)
                                    for p in partitions if not p.success])
    errors += _not_logged(instance, [p.run_id for p in partitions if p.success and p.run_id])
    return tracker_line(cfg, errors)


def log_failed_keys(cfg: EvalConfig, wh: Any, dagster_run_id: str, failed: dict[str, str]) -> list[str]:
    """A batch op's failed partitions ({"<split>|<model>": error}, eval_assets/batch.py) as FAILED MLflow runs;
    the tracker line, or []."""
    return tracker_line(cfg, log_failures(cfg, wh, [PartitionFailure(*_split_model(k), e, dagster_run_id)
                                                    for k, e in failed.items()]))


def _split_model(key: str) -> tuple[str, str]:
    split, _, model = str(key).partition("|")  # a MultiPartitionKey: its dimensions' values in name order
    return split, model


def dagster_run_failures(instance: Any, run: Any) -> list[PartitionFailure]:
    """The partitions a failed Dagster run failed: a batch or ranged run's op lists each in its Failure's `errors`
    metadata; a run of one partition (the `evaluate` job, a UI materialization) names it in its tags, and its first
    failed step gives the error."""
    from dagster import DagsterEventType

    from evalpipe.core.errors import describe_error_info

    out: list[PartitionFailure] = []
    first: str | None = None
    for rec in instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE):
        ev = rec.dagster_event
        data = ev.step_failure_data.user_failure_data if ev.step_failure_data else None
        errors = data.metadata.get("errors") if data is not None else None
        for key, error in ((errors.value if errors is not None else None) or {}).items():
            out.append(PartitionFailure(*_split_model(key), str(error), run.run_id))
        if first is None and ev.step_failure_data and ev.step_failure_data.error:
            first = f"{ev.step_key}: {describe_error_info(ev.step_failure_data.error)}"
    split, model = run.tags.get("dagster/partition/benchmark_split"), run.tags.get("dagster/partition/model")
    if not out and split and model:
        out.append(PartitionFailure(split, model, first or "failed", run.run_id))
    return out


def report_dagster_run(cfg: EvalConfig, wh: Any, instance: Any, run: Any) -> list[str]:
    """A failed Dagster run (the run failure sensor: UI and daemon runs): its failed partitions as FAILED MLflow
    runs; the tracker line, or []."""
    if MlflowSettings.from_config(cfg.mlflow, cfg.path.parent) is None:
        return []
    return tracker_line(cfg, log_failures(cfg, wh, dagster_run_failures(instance, run)))


def _not_logged(instance: Any, run_ids: list[str]) -> list[str]:
    """The `mlflow: not logged: <error>` texts of the metrics materializations of these Dagster runs."""
    if instance is None or not run_ids:
        return []
    from dagster import DagsterEventType

    out = []
    for run_id in dict.fromkeys(run_ids):
        for entry in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
            mat = entry.asset_materialization
            value = mat.metadata.get("mlflow") if mat is not None else None
            if value is not None and str(value.value).startswith("not logged: "):
                out.append(str(value.value)[len("not logged: "):])
    return out
