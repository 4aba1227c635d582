"""Experiment trackers fed from the pipeline's results: each metrics partition as an MLflow run when the config
has `mlflow:` (evalpipe/interop/mlflow_runs.py; docs/interop.md "MLflow")."""
from __future__ import annotations

from typing import Any

from evalpipe.core.config import EvalConfig
from evalpipe.core.run_marks import is_try_run
from evalpipe.interop.mlflow_runs import MlflowSettings, log_partition
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
    return log_partition(settings, split_key, model_key, metrics_frame, fingerprints=fps,
                         data_version=data_version, viewer_url=viewer_url, dagster_run_id=dagster_run_id)
