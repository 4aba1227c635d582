"""Each metrics partition as one MLflow run (opt-in: the `mlflow:` config key; docs/interop.md "MLflow").

A run holds, for one (benchmark split, model) partition:
- params: the model and split keys and every fingerprint of the partition (what can change a number);
- metrics: each metric's value on slice `all` under its own name, its interval and counts as `<metric>.ci_low`,
  `.ci_high`, `.stderr`, `.n`, and other slices as `<metric>/<slice>` (names cleaned to MLflow's alphabet);
- tags: the viewer link, the Dagster run id, which side of each metric is better, the partition and the content
  version of its metrics frame;
- the per-sample table as the artifact `eval_results_table.json` (as `mlflow.evaluate` logs its per-row table:
  one row per sample, its target, prediction and each metric's score and status), and the split as the run's
  dataset input (`mlflow.data`: name = the split, digest = its dataset fingerprint, context `evaluation`).

A partition that failed (its rollouts never finished) is logged as a FAILED run with its error as a tag.

A partition is logged once per content: a re-materialization that changes no number (the same data version)
finds its run and logs nothing, so the tracker isn't filled with copies of cached re-runs.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


DEFAULT_EXPERIMENT = "evalpipe"
# MLflow's limits (mlflow/utils/validation.py): param values up to 6000 characters, keys of [\w\-. /] up to 250
_PARAM_MAX = 6000
_KEY_MAX = 250
_NOT_KEY = re.compile(r"[^\w\-. /]")
_SQLITE = "sqlite:///"
TAG_PARTITION = "evalpipe.partition"
TAG_VERSION = "evalpipe.data_version"


@dataclass(frozen=True)
class MlflowSettings:
    """`mlflow:` in the config. `tracking_uri` None: MLflow's own default (MLFLOW_TRACKING_URI, else its local
    store in the working folder)."""

    tracking_uri: str | None = None
    experiment: str = DEFAULT_EXPERIMENT
    include_tries: bool = False  # log `--limit` / `--sample-id` / ad-hoc keys too (they are never ranked)

    @classmethod
    def from_config(cls, raw: dict[str, Any] | None, base_dir: Path) -> "MlflowSettings | None":
        """None when MLflow logging is off (no `mlflow:` key, or `enabled: false`). A relative `sqlite:///` file
        resolves against the config's folder (`base_dir`), as the config's other paths do: every process of a run
        (the CLI, the webserver, run workers) then writes the same store whatever its working folder."""
        if not raw or raw.get("enabled") is False:
            return None
        return cls(tracking_uri=_resolved(raw.get("tracking_uri") or None, base_dir),
                   experiment=str(raw.get("experiment") or DEFAULT_EXPERIMENT),
                   include_tries=bool(raw.get("include_tries", False)))


def _resolved(uri: str | None, base_dir: Path) -> str | None:
    if uri and uri.startswith(_SQLITE) and not uri[len(_SQLITE):].startswith("/"):
        return _SQLITE + str((base_dir / uri[len(_SQLITE):]).resolve())
    return uri


def metric_key(name: str) -> str:
    """A name MLflow accepts: characters outside [A-Za-z0-9_-. /] become `_`, cut to its 250-character limit."""
    return _NOT_KEY.sub("_", str(name))[:_KEY_MAX]


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def metric_values(metrics_frame: Any) -> dict[str, float]:
    """The MLflow metrics of one partition's metrics frame (columns of the `metrics` table). Missing values (an
    interval over too few samples, a metric with nothing scored) are left out, never logged as 0."""
    out: dict[str, float] = {}
    for r in metrics_frame.itertuples(index=False):
        base = str(r.metric) if str(r.slice) == "all" else f"{r.metric}/{r.slice}"
        for suffix, value in (("", r.value), (".ci_low", r.ci_low), (".ci_high", r.ci_high),
                              (".stderr", r.stderr), (".n", r.n), (".n_errors", getattr(r, "n_errors", None))):
            f = _finite(value)
            if f is not None:
                out[metric_key(base + suffix)] = f
    return out


def _params(split_key: str, model_key: str, fingerprints: dict[str, Any]) -> dict[str, str]:
    params = {"benchmark_split": split_key, "model": model_key}
    for k, v in sorted(fingerprints.items()):
        if k in ("benchmark_split", "model", "recorded_at") or v is None:
            continue
        params[metric_key(f"fingerprint.{k}" if k != "params" else "decoding_params")] = str(v)[:_PARAM_MAX]
    return params


def _tags(metrics_frame: Any, viewer_url: str | None, dagster_run_id: str | None, partition: str,
          data_version: str) -> dict[str, str]:
    tags = {TAG_PARTITION: partition, TAG_VERSION: data_version}
    if viewer_url:
        tags["evalpipe.viewer"] = viewer_url
    if dagster_run_id:
        tags["evalpipe.dagster_run_id"] = dagster_run_id
    overall = metrics_frame[metrics_frame["slice"] == "all"] if len(metrics_frame) else metrics_frame
    for r in overall.itertuples(index=False):
        hib = getattr(r, "higher_is_better", None)
        if hib is not None and not (isinstance(hib, float) and math.isnan(hib)):
            tags[metric_key(f"evalpipe.higher_is_better.{r.metric}")] = "true" if bool(hib) else "false"
    return tags


def sample_table(judgements: Any) -> Any:
    """One row per sample (mlflow.evaluate's per-row table): sample_id, target, prediction, then `<metric>` (the
    score) and `<metric>/status` for each metric, in the judgements' order."""
    import pandas as pd

    if judgements is None or not len(judgements):
        return pd.DataFrame({"sample_id": []})
    first = judgements.drop_duplicates("sample_id")[["sample_id", "target", "prediction"]].set_index("sample_id")
    wide = judgements.pivot_table(index="sample_id", columns="metric", values="score", aggfunc="first", sort=False)
    status = judgements.pivot(index="sample_id", columns="metric", values="status")
    status.columns = [f"{c}/status" for c in status.columns]
    table = first.join(wide).join(status).reset_index()
    return table.astype(object).where(table.notna(), None)


def _client(settings: MlflowSettings) -> tuple[Any, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=settings.tracking_uri)
    experiment = client.get_experiment_by_name(settings.experiment)
    if experiment is not None:
        return client, experiment.experiment_id
    # a SQLite store's artifacts (the per-sample tables) beside its file, not in whatever folder the process runs in
    uri = settings.tracking_uri or ""
    where = (Path(uri[len(_SQLITE):]).parent / "mlartifacts").as_uri() if uri.startswith(_SQLITE + "/") else None
    return client, client.create_experiment(settings.experiment, artifact_location=where)


def _dataset_input(split_key: str, dataset_digest: str | None, samples: Any) -> Any:
    """The split as an MLflow dataset input (mlflow.data's pandas dataset over the sample ids and targets)."""
    import mlflow.data
    from mlflow.entities import DatasetInput, InputTag

    frame = samples[["sample_id", "target"]] if len(samples) else samples
    ds = mlflow.data.from_pandas(frame, name=split_key, targets="target" if "target" in frame else None,
                                 digest=(dataset_digest or None) and str(dataset_digest)[:36])
    return DatasetInput(dataset=ds._to_mlflow_entity(), tags=[InputTag(key="mlflow.data.context", value="evaluation")])


def _log_inputs(client: Any, run_id: str, datasets: list[Any]) -> None:
    """client.log_inputs, tried again when a partition of the same split, logged at the same moment, inserted the
    same dataset first (MLflow's SQL store checks, then inserts: the second insert fails its unique key; the next
    try finds the row)."""
    from mlflow.exceptions import MlflowException

    for attempt in range(3):
        try:
            client.log_inputs(run_id, datasets=datasets)
            return
        except MlflowException as exc:
            if "UNIQUE constraint" not in str(exc) and "Duplicate entry" not in str(exc) or attempt == 2:
                raise
            time.sleep(0.2 * (attempt + 1))


def log_failed_partition(settings: MlflowSettings, split_key: str, model_key: str, error: str, *,
                         fingerprints: dict[str, Any], dagster_run_id: str | None = None,
                         counts: dict[str, int] | None = None) -> str:
    """A partition that failed as a FAILED MLflow run: its params, the error (tag `evalpipe.error`, redacted), the
    counts known (`n_errors`, `n_samples` as metrics); the run id. Logged once per Dagster run: a FAILED run of the
    same partition and Dagster run already there is returned as it is (the CLI, the API, a batch op and the run
    failure sensor may each see the same failure)."""
    from mlflow.entities import Metric, Param

    from evalpipe.core.redact import redact

    client, experiment_id = _client(settings)
    partition = f"{split_key}|{model_key}"
    if dagster_run_id and re.fullmatch(r"[0-9a-zA-Z-]+", dagster_run_id):
        for found in client.search_runs([experiment_id], max_results=50,
                                        filter_string=f"tags.`evalpipe.dagster_run_id` = '{dagster_run_id}' and "
                                                      "attributes.status = 'FAILED'"):
            if found.data.tags.get(TAG_PARTITION) == partition:
                return found.info.run_id
    tags = {TAG_PARTITION: partition, "evalpipe.error": redact(str(error))[:5000]}
    if dagster_run_id:
        tags["evalpipe.dagster_run_id"] = dagster_run_id
    if not counts or "n_errors" not in counts:
        tags["evalpipe.n_errors"] = "unknown: the partition failed before its rollouts were kept"
    run = client.create_run(experiment_id, run_name=f"{split_key} x {model_key}", tags=tags)
    try:
        params = [Param(k, v) for k, v in _params(split_key, model_key, fingerprints).items()]
        for i in range(0, len(params), 100):
            client.log_batch(run.info.run_id, params=params[i:i + 100])
        if counts:
            now = int(time.time() * 1000)
            client.log_batch(run.info.run_id, metrics=[Metric(k, float(v), now, 0) for k, v in counts.items()])
    finally:
        client.set_terminated(run.info.run_id, status="FAILED")
    return run.info.run_id


def log_partition(settings: MlflowSettings, split_key: str, model_key: str, metrics_frame: Any, *,
                  fingerprints: dict[str, Any], data_version: str, viewer_url: str | None = None,
                  dagster_run_id: str | None = None, samples: Any = None) -> str:
    """Log one metrics partition as an MLflow run in `settings.experiment` (created when missing); returns the
    MLflow run id. A run of the same partition and the same data version is reused, not logged again."""
    from mlflow.entities import Metric, Param  # an optional extra: imported only when logging

    client, experiment_id = _client(settings)
    partition = f"{split_key}|{model_key}"
    # the data version is a hex digest (safe inside the filter's quotes); the partition is compared here, as keys
    # may hold characters MLflow's filter grammar can't quote
    for found in client.search_runs([experiment_id], max_results=50,
                                    filter_string=f"tags.`{TAG_VERSION}` = '{_hex(data_version)}' and "
                                                  "attributes.status = 'FINISHED'"):
        if found.data.tags.get(TAG_PARTITION) == partition:
            return found.info.run_id
    tags = _tags(metrics_frame, viewer_url, dagster_run_id, partition, data_version)
    run = client.create_run(experiment_id, run_name=f"{split_key} x {model_key}", tags=tags)
    run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in metric_values(metrics_frame).items()]
        params = [Param(k, v) for k, v in _params(split_key, model_key, fingerprints).items()]
        # log_batch takes at most 1000 metrics and 100 params per call (MLflow's batch limits)
        for i in range(0, len(params), 100):
            client.log_batch(run_id, params=params[i:i + 100])
        for i in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[i:i + 1000])
        if samples is not None:  # the per-sample table and the split as the dataset evaluated
            _log_inputs(client, run_id, [_dataset_input(split_key, fingerprints.get("dataset_sha256"), samples)])
            client.log_table(run_id, samples, artifact_file="eval_results_table.json")
    except Exception:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id)
    return run_id


def _hex(value: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]+", value or ""):
        raise ValueError(f"a data version is a hex digest, not {value!r}")
    return value
