"""Experiment trackers fed from the pipeline's results: each metrics partition as an MLflow run when the config
has `mlflow:` (evalpipe/interop/mlflow_runs.py; docs/interop.md "MLflow")."""
from __future__ import annotations

from typing import Any

from evalpipe.core.config import EvalConfig
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


def report_run(cfg: EvalConfig, wh: Any, instance: Any, partitions: list[Any]) -> list[str]:
    """After `evalpipe run`: each failed partition logged as a FAILED MLflow run, and one line when the tracker
    failed (for those, or for a finished partition whose metrics step could not log: its materialization says
    `mlflow: not logged: ...`). [] when `mlflow:` is off or all went well."""
    settings = MlflowSettings.from_config(cfg.mlflow, cfg.path.parent)
    if settings is None:
        return []
    errors: list[str] = []
    for p in partitions:
        if p.success or (is_try_run(p.model) and not settings.include_tries):
            continue
        try:
            log_failed_partition(settings, p.benchmark_split, p.model, p.error or "failed",
                                 fingerprints=fingerprints.previous(wh, p.benchmark_split, p.model) or {},
                                 dagster_run_id=p.run_id)
        except Exception as exc:  # noqa: BLE001  (any failure of the tracker's client)
            errors.append(f"{type(exc).__name__}: {exc}")
    errors += _not_logged(instance, [p.run_id for p in partitions if p.success and p.run_id])
    if not errors:
        return []
    first = " ".join(errors[0].split())[:300]
    return [f"mlflow: {len(errors)} partition(s) not logged to {settings.tracking_uri or 'the default store'}: "
            f"{first} (the numbers are in the warehouse; re-run when the tracker is back)"]


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
