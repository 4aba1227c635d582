"""[sweeps] Many (benchmark_split, model) partitions in one Dagster run (docs/scale.md "Sweeps").

The `evaluate_batch` job has one op that runs the chain prompts -> rollouts -> judgements -> metrics, and the
partitioned asset checks, for every partition its run config names, several partitions at once (threads). Each
partition is still recorded as Dagster records it in a run of its own: an ASSET_MATERIALIZATION per asset and
partition, with the data-version tags Dagster writes (`dagster/data_version`, `dagster/code_version`,
`dagster/input_data_version/<dep>`, `dagster/input_event_pointer/<dep>`: staleness works as before), the asset
check evaluations per partition, and ASSET_FAILED_TO_MATERIALIZE for a partition whose chain failed (its
batch-mates' results are kept). The asset bodies are the same functions as the assets' (eval_assets/assets.py),
called with a per-partition view of the op's context.

Why not Dagster's ranged runs (BackfillPolicy): a ranged step records a materialization for every partition of
the range when its output is yielded, so a failing partition would be recorded as materialized; and with a
MultiPartitionsDefinition a selection that is not a full split x model rectangle falls back to one run per
partition (dagster#18852), some grids split into several runs (#23996), `context.partition_keys` can be wrong
(#28861)."""

import inspect
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator, List, NamedTuple

from dagster import (AssetCheckEvaluation, AssetKey, AssetMaterialization, AssetRecordsFilter, Config, DagsterEvent,
                     Failure, MetadataValue, MultiPartitionKey, OpExecutionContext, in_process_executor, job, op)
from dagster._core.definitions.data_version import (CODE_VERSION_TAG, DATA_VERSION_TAG,
                                                    DATA_VERSION_IS_USER_PROVIDED_TAG, get_input_data_version_tag,
                                                    get_input_event_pointer_tag)
from dagster._core.definitions.events import (AssetMaterializationFailure, AssetMaterializationFailureReason,
                                              AssetMaterializationFailureType)
from dagster._core.definitions.partitions.utils.multi import get_tags_from_multi_partition_key
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData)
from dagster._core.events import AssetFailedToMaterializeData, AssetMaterializationPlannedData, DagsterEventType
from pydantic import Field

from evalpipe.core.schema import ASSET_TABLES
from evalpipe.core.turns import Turns
from eval_assets.assets import RANGED_RUNS
from eval_assets.sweep_settings import DEFAULT_BATCH_PARTITIONS, batch_concurrency, batch_size  # noqa: F401
from partitions import BENCHMARK_SPLIT, MODEL, partition_dims
from resources import EvalConfigResource, JudgeResource, ModelRunnerResource, ToolsResource, WarehouseResource

BATCH_JOB = "evaluate_batch"
BATCH_TAG = "evals/batch_partitions"  # on a batch run: how many partitions it carries (the Runs page shows it)
# each asset's upstream assets, as the graph declares them (eval_assets/assets.py): the input tags of its events
DEPS = {"prompts": ["dataset"], "rollouts": ["prompts"], "judgements": ["prompts", "rollouts", "metric_settings"],
        "metrics": ["judgements", "rollouts", "metric_settings"]}
SPLIT_DEPS = {"dataset", "metric_settings"}  # partitioned by benchmark_split alone
OBSERVED = {"metric_settings"}  # observable source assets: their input tags come from the latest observation
CHAIN = list(DEPS)
PLANNED_PER_TRANSACTION = 64  # partitions whose planned events are written in one transaction (a short one)
READS = {a: [d for d in deps if d not in OBSERVED] for a, deps in DEPS.items()}  # the asset bodies' inputs
# partitions of a batch computing at once (the others wait for their model calls or for a turn): one interpreter
# computes one thread at a time whatever the threads (core/turns.py)
COMPUTING_PARTITIONS = 1


def batches(keys: list, size: int) -> list[list]:
    return [keys[i:i + size] for i in range(0, len(keys), size)]


class BatchConfig(Config):
    partitions: List[str] = Field(description="The (benchmark_split, model) partition keys to evaluate, as "
                                              "`<benchmark_split>|<model>` (Dagster's spelling of a multi key).")
    max_concurrent: int = Field(default=0, description="Partitions evaluated at once (0: the config's "
                                                       "max_concurrent_partitions, else all of them).")


def parse_key(text: str) -> MultiPartitionKey:
    from evalpipe.core.errors import ConfigError
    from partitions import eval_key

    split, sep, model = str(text).rpartition("|")
    if not sep or not split or not model:
        raise ConfigError(f"partition {text!r}: give it as <benchmark_split>|<model>")
    return eval_key(split, model)


class _PartitionView:
    """What an asset or check body reads of its context, for one partition of the batch run."""

    has_partition_key_range = False  # (one partition: the prompts body runs its own chain, not a range's)

    def __init__(self, context: OpExecutionContext, key: MultiPartitionKey, check_keys: Any = ()):
        self._context, self.partition_key, self.selected_asset_check_keys = context, key, check_keys
        self.metadata: dict[str, Any] = {}

    log = property(lambda self: self._context.log)
    instance = property(lambda self: self._context.instance)
    run_id = property(lambda self: self._context.run_id)
    run = property(lambda self: self._context.run)

    def add_output_metadata(self, metadata: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        self.metadata.update(metadata)


class _Stored(NamedTuple):
    """A materialization as its checks point at it."""
    storage_id: int
    run_id: str
    timestamp: float


class _Recorder:
    """Writes the per-partition events of a batch run, one at a time (they are written to the instance as they
    are made), and remembers what it wrote so the next asset's input tags need no query."""

    def __init__(self, context: OpExecutionContext, code_versions: dict[str, str]):
        self.context, self.code_versions = context, code_versions
        self.lock = threading.Lock()
        self.latest: dict[tuple[str, str], tuple[str, int | None]] = {}  # (asset, partition) -> (version, storage id)
        self.records: dict[tuple[str, str], Any] = {}  # (asset, partition) -> its materialization's record
        self.cache: dict[Any, Any] = {}

    @contextmanager
    def grouped(self) -> Iterator[None]:
        """The events written inside the block in one transaction per database where the instance's storage can
        (evalpipe/store/instance_storage.py `grouped`), else one by one as before. Only for events handed to the
        instance directly (`report_dagster_event`), never for `context.log_event`: that goes through Python's
        logging handlers, whose locks a thread logging a message holds while it waits for the storage, so a group
        holding the storage while taking a handler's lock would deadlock with it."""
        group = getattr(self.context.instance.event_log_storage, "grouped", None)
        with self.lock, (group() if group is not None else nullcontext()):
            yield

    def shared(self, key: Any, make: Any) -> Any:
        """What every partition of the batch reads alike (a split's dataset reader), made once."""
        with self.lock:
            if key not in self.cache:
                self.cache[key] = make()
            return self.cache[key]

    def _input(self, asset: str, partition: Any) -> tuple[str, int | None]:
        hit = self.latest.get((asset, str(partition)))
        if hit is not None:
            return hit
        fetch = (self.context.instance.fetch_observations if asset in OBSERVED
                 else self.context.instance.fetch_materializations)
        recs = fetch(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[str(partition)]), limit=1).records
        if not recs:
            return "INITIAL", None
        rec = recs[0]
        event = rec.asset_observation if asset in OBSERVED else rec.asset_materialization
        hit = ((event.tags or {}).get(DATA_VERSION_TAG) or "INITIAL", rec.storage_id)
        self.latest[(asset, str(partition))] = hit
        return hit

    def materialized(self, asset: str, key: MultiPartitionKey, version: str, metadata: dict[str, Any]) -> None:
        dims = partition_dims(key)
        tags = {CODE_VERSION_TAG: self.code_versions.get(asset) or self.context.run_id}
        for dep in DEPS[asset]:
            dv, storage_id = self._input(dep, dims[BENCHMARK_SPLIT] if dep in SPLIT_DEPS else key)
            tags[get_input_data_version_tag(AssetKey(dep))] = dv
            tags[get_input_event_pointer_tag(AssetKey(dep))] = str(storage_id) if storage_id else "NULL"
        tags.update({DATA_VERSION_TAG: version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
                     **get_tags_from_multi_partition_key(key)})
        with self.lock:
            self.context.log_event(AssetMaterialization(asset_key=asset, partition=str(key), metadata=metadata,
                                                        tags=tags))
            # its storage id: as the instance's storage stored it (evalpipe/store/instance_storage.py), else read
            stored = getattr(self.context.instance.event_log_storage, "last_asset_event", lambda: None)()
            if stored is not None:
                target = _Stored(stored[0], self.context.run_id, stored[1])
            else:
                recs = self.context.instance.fetch_materializations(
                    AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[str(key)]), limit=1).records
                target = _Stored(recs[0].storage_id, recs[0].run_id, recs[0].timestamp) if recs else None
            self.latest[(asset, str(key))] = (version, target.storage_id if target is not None else None)
            self.records[(asset, str(key))] = target  # what its checks are tied to

    def checked(self, asset: str, key: MultiPartitionKey, result: Any, check_name: str | None = None) -> None:
        check_name = check_name or result.check_name
        with self.lock:
            # tied to the partition's materialization just written (read back when it was), as a check in a run
            # of its own is
            target = self.records.get((asset, str(key)))
            self.context.log_event(AssetCheckEvaluation(
                asset_key=AssetKey(asset), check_name=check_name, passed=bool(result.passed),
                metadata=result.metadata or {}, severity=result.severity, description=result.description,
                partition=str(key), target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                    storage_id=target.storage_id, run_id=target.run_id, timestamp=target.timestamp)
                if target is not None else None))

    def planned(self, keys: list) -> None:
        """ASSET_MATERIALIZATION_PLANNED per asset and partition, as a run of its own writes at its start: a
        partition planned in a failed run and not materialized is what Dagster shows as failed (SQLite storage keeps
        no ASSET_FAILED_TO_MATERIALIZE events)."""
        run = self.context.run
        for chunk in batches(list(keys), PLANNED_PER_TRANSACTION):
            with self.grouped():
                for key in chunk:
                    for asset in CHAIN:
                        event = DagsterEvent.build_asset_materialization_planned_event(
                            run.job_name, "evaluate_partitions",
                            AssetMaterializationPlannedData(AssetKey(asset), str(key)))
                        self.context.instance.report_dagster_event(event, run_id=self.context.run_id)

    def failed(self, assets: list[str], key: MultiPartitionKey, error: str) -> None:
        with self.lock:
            for i, asset in enumerate(assets):
                failure = AssetMaterializationFailure(
                    asset_key=AssetKey(asset), partition=str(key), description=error[:2000],
                    failure_type=AssetMaterializationFailureType.FAILED,
                    reason=(AssetMaterializationFailureReason.FAILED_TO_MATERIALIZE if i == 0 else
                            AssetMaterializationFailureReason.UPSTREAM_FAILED_TO_MATERIALIZE),
                    tags=dict(get_tags_from_multi_partition_key(key)))
                # (as Dagster logs a step's own asset events: written to the run's event log now)
                DagsterEvent.from_step(DagsterEventType.ASSET_FAILED_TO_MATERIALIZE,
                                       self.context.get_step_execution_context(),
                                       event_specific_data=AssetFailedToMaterializeData(failure),
                                       message=f"Asset {asset} failed to materialize for partition {key}")


def _body(asset_def: Any):
    return asset_def.op.compute_fn.decorated_fn


def _checks(project: Any) -> tuple[Any, Any]:
    from eval_assets.checks import metrics_checks_for, rollouts_error_rate

    metrics_checks = metrics_checks_for(project)
    return _body(rollouts_error_rate), (_body(metrics_checks), metrics_checks.check_keys)


def run_partition(context: OpExecutionContext, key: MultiPartitionKey, rec: _Recorder, graph: dict[str, Any],
                  checks: tuple[Any, Any], res: dict[str, Any]) -> str | None:
    """The chain and checks of one partition; returns None, or the first error (one line)."""
    from dagster import MetadataValue

    from evalpipe.core.errors import describe_exception

    wh = res["warehouse"].get()
    dims = partition_dims(key)
    outputs: dict[str, Any] = {}  # each asset's output (a reader of what it wrote): its dependents read it

    def reader(asset: str) -> Any:
        if asset in outputs:
            return outputs[asset]
        if asset == "dataset":  # the split's, read by every partition of the split in the batch: opened once
            return rec.shared(("dataset", dims[BENCHMARK_SPLIT]), lambda: wh.reader(
                ASSET_TABLES[asset], {BENCHMARK_SPLIT: dims[BENCHMARK_SPLIT]}))
        return wh.reader(ASSET_TABLES[asset], dims)
    error_rate_check, (metrics_check, metrics_check_keys) = checks
    done: list[str] = []
    try:
        for asset in CHAIN:
            view = _PartitionView(context, key)
            common = {"eval_config": res["eval_config"], "warehouse": res["warehouse"]}
            extra = {"prompts": {"model_runner": res["model_runner"], "judge": res["judge"], "tools": res["tools"]},
                     "rollouts": {"model_runner": res["model_runner"], "tools": res["tools"]},
                     "judgements": {"judge": res["judge"]}, "metrics": {}}[asset]
            out = _body(graph[asset])(view, **common, **extra, **{d: reader(d) for d in READS[asset]})
            if inspect.isgenerator(out):  # (prompts yields its one Output: a ranged run yields none)
                out = next(out)
            table = ASSET_TABLES[asset]
            # the IO manager's part in a run of its own: a DataFrame (metrics) is written here
            path = wh.write(table, out.value, dims) if asset == "metrics" else out.value.path
            if asset != "metrics":
                outputs[asset] = out.value
            meta = {**view.metadata, **(out.metadata or {}), "warehouse_table": table,
                    "partition_file": MetadataValue.path(str(path))}
            rec.materialized(asset, key, out.data_version.value, meta)
            done.append(asset)
            if asset == "rollouts":
                rec.checked("rollouts", key, error_rate_check(_PartitionView(context, key), res["eval_config"],
                                                              reader("rollouts")), "error_rate")
            if asset == "metrics":
                view = _PartitionView(context, key, metrics_check_keys)
                results = list(metrics_check(view, res["eval_config"], res["warehouse"], out.value,
                                             reader("prompts"), reader("judgements")))
                for r in results:
                    rec.checked("metrics", key, r)
        return None
    except Exception as e:  # noqa: BLE001  a partition's failure is recorded; its batch-mates go on
        import traceback

        from evalpipe.store.run_logs import save_traceback

        from evalpipe.core.redact import redact

        # redacted here: it reaches the failure event's metadata and the batch's Failure description, which
        # Dagster stores as they are (its error redaction covers exceptions, not a Failure's description)
        error = redact(describe_exception(e))
        failed_at = CHAIN[len(done)] if len(done) < len(CHAIN) else "metrics checks"
        context.log.error(f"{key} failed at {failed_at}: {error}\n{traceback.format_exc()}")
        saved = save_traceback(context.run.run_id, f"{failed_at} ({key})", traceback.format_exc(),
                               res["eval_config"].project.home)
        rec.failed(CHAIN[len(done):], key, f"{failed_at}: {error}")
        return f"{failed_at}: {error}" + (f" (full traceback: {saved})" if saved else "")


def evaluate_keys(context: Any, keys: list, res: dict[str, Any], max_concurrent: int | None = None,
                  planned: bool = True) -> dict:
    """Every partition's chain and checks, `max_concurrent` partitions at once, each recorded on its own; raises
    a Failure naming the failed partitions after the others are materialized. `planned`: write the partitions'
    ASSET_MATERIALIZATION_PLANNED events (a ranged run's own planning has written them already)."""
    from eval_assets.assets import eval_assets, record_metric_settings

    eval_config = res["eval_config"]
    project = eval_config.project
    cfg = eval_config.get()
    for k in keys:  # an unknown split or model is a one-line error before any model call
        dims = partition_dims(k)
        cfg.split(dims[BENCHMARK_SPLIT])
        cfg.model(dims[MODEL])
    # judgements and metrics record the splits' metric settings they are computed with (as launch.run_assets does)
    record_metric_settings(project, context.instance, sorted({partition_dims(k)[BENCHMARK_SPLIT] for k in keys}))
    graph = {a.key.path[-1]: a for a in eval_assets(project) if hasattr(a, "op")}
    code_versions = {name: a.specs_by_key[a.key].code_version for name, a in graph.items()}
    rec = _Recorder(context, code_versions)
    if planned:
        rec.planned(keys)
    checks = _checks(project)
    workers = min(len(keys) or 1, batch_concurrency(cfg, max_concurrent))
    turns = Turns(COMPUTING_PARTITIONS)

    def one(key: MultiPartitionKey) -> str | None:
        with turns.turn():  # computes only in its turn; gives it up while its model calls are out (core/turns.py)
            return run_partition(context, key, rec, graph, checks, res)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evalpipe-partition") as pool:
        errors = dict(zip(map(str, keys), pool.map(one, keys)))
    failed = {k: e for k, e in errors.items() if e}
    if failed:
        from evalpipe.pipeline.tracking import log_failed_keys  # [interop] each as a FAILED MLflow run (`mlflow:`)

        for line in log_failed_keys(cfg, res["warehouse"].get(), context.run_id, failed):
            context.log.warning(line)
        first = next(iter(failed))
        raise Failure(f"{len(failed)} of {len(keys)} partition(s) failed, first {first}: {failed[first]} (the "
                      f"others are materialized)", metadata={"errors": MetadataValue.json(failed)})
    return {"partitions": len(keys)}


def run_range(context: Any, res: dict[str, Any]) -> None:
    """A ranged run of the chain assets (a UI/daemon backfill under their BackfillPolicy, eval_assets/assets.py):
    its first asset's step evaluates every partition of the run here, each recorded on its own, and yields no
    output, so that Dagster records no materialization for the range as a whole and skips the chain's later
    steps (their partitions are recorded here)."""
    keys = [k if isinstance(k, MultiPartitionKey) else parse_key(k) for k in context.partition_keys]
    context.log.info(f"evaluating {len(keys)} partitions in this run (docs/scale.md \"Sweeps\")")
    import gc

    # as `evalpipe run` does before its batches: Dagster's, pandas' and the definitions' ~1M long-lived objects are
    # left out of the collector's full passes during the run (a ranged run is a run process of its own)
    gc.freeze()
    evaluate_keys(context, keys, res, planned=False)


@op(name="evaluate_partitions",
    description="prompts -> rollouts -> judgements -> metrics and their checks for each partition named in the "
                "config, several at once; each partition materialized (or failed) on its own.")
def evaluate_partitions(context: OpExecutionContext, config: BatchConfig, eval_config: EvalConfigResource,
                        model_runner: ModelRunnerResource, judge: JudgeResource, warehouse: WarehouseResource,
                        tools: ToolsResource) -> dict:
    keys = [parse_key(k) for k in dict.fromkeys(config.partitions)]
    res = {"eval_config": eval_config, "model_runner": model_runner, "judge": judge, "warehouse": warehouse,
           "tools": tools}
    return evaluate_keys(context, keys, res, config.max_concurrent or None)


@job(name=BATCH_JOB, executor_def=in_process_executor, tags={"evals/calls_models": "true"},
     description="Many (benchmark_split, model) partitions in one run (a sweep): run config "
                 "ops.evaluate_partitions.config.partitions = ['<split>|<model>', ...]. Each partition is "
                 "materialized, checked and failed on its own (docs/scale.md \"Sweeps\").")
def evaluate_batch_job():
    evaluate_partitions()


# the ranged runs of a UI/daemon backfill: the `prompts` asset hands them here (eval_assets/assets.py; the assets
# module can't import this one, which reads the assets' bodies and their checks)
RANGED_RUNS["evaluate"] = run_range


def batch_run_config(keys: list, max_concurrent: int | None = None) -> dict:
    return {"ops": {"evaluate_partitions": {"config": {"partitions": [str(k) for k in keys],
                                                       "max_concurrent": int(max_concurrent or 0)}}}}
