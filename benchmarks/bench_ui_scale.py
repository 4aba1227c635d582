"""The Dagster UI's asset and partition pages at 10,000 partitions (issue 31): the GraphQL queries the UI sends,
timed against the real webserver at 100 x 100 (split x model) partitions beside the same at 10 x 10.

For each size, a fresh DAGSTER_HOME (the dagster.yaml `make dev` uses) and a config of SPLITS splits x MODELS echo
models, with:
- every partition key registered (evalpipe/store/partition_keys.add_in_chunks, as the sensors and `run` do);
- the events a finished sweep leaves in the instance, written through the instance as the batch code writes them
  (eval_assets/batch.py): one `evaluate_batch` run per `--batch` partitions (RUN_START, STEP_START, per partition
  ASSET_MATERIALIZATION_PLANNED for each asset of `--assets`, then its ASSET_MATERIALIZATION with the data-version
  and multi-partition tags and metadata like the assets', the `error_rate` check on rollouts and
  `samples_accounted` on metrics; a partition that fails does so at rollouts: prompts materialized,
  ASSET_FAILED_TO_MATERIALIZE for the rest, the run ends in failure). 2% of partitions fail, 5% are never run
  (missing), the rest are materialized. `--assets` defaults to judgements and metrics (the whole chain doubles the
  build, ~9 ms of CPU per event on SQLite). No model is called: the events are what a sweep writes, without the work.
Then the webserver and daemon as `make dev` starts them (benchmarks/bench_ui.py `DagsterDev`), and headless
Chromium (Playwright, as tests/test_ui_browser.py) opens the pages a user opens while every /graphql request the UI
sends is recorded: (a) the asset graph of the `evaluation` group and the asset catalog, (b) the `metrics` asset's
page, (c) its Partitions tab, (d) one partition's page (a failed one), (e) its Checks tab. Each distinct recorded
query (its exact text and variables) is then replayed `--repeat` times (rotated order, each round once no run is
queued or in progress: bench_ui.wait_idle) and its median reported, beside the browser's wait for its first answer
(on a freshly started webserver: Dagster's caches empty). `--baseline`: at the largest size, a second webserver on
the same instance whose event log storage computes asset check statuses as stock Dagster does (`StockCheckStates`),
each query replayed on both in the same rounds. `--cache DIR` keeps each size's built instance and copies it on
later runs (the 10,000-partition build takes minutes). docs/scale.md "The UI at 10,000 partitions".

    .venv/bin/python benchmarks/bench_ui_scale.py [--sizes 10x10,100x100] [--repeat 5] [--baseline] [--cache DIR]

Needs Chromium (`apt-get install chromium`); without it the script says so and exits 2.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager, nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_ui import DagsterDev, gql, make_home, wait_idle  # noqa: E402
from benchmarks.common import check_repeat, load, machine, today, write_json  # noqa: E402

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TARGET_S = 2.0  # "usable": no query the UI sends to open a page takes longer
CHAIN = ("prompts", "rollouts", "judgements", "metrics")
FAIL_EVERY, FAIL_AT = 50, 7  # partition i fails (at rollouts) when i % 50 == 7: 2%
SKIP_EVERY, SKIP_AT = 20, 19  # partition i is never run when i % 20 == 19: 5%
BATCH_JOB = "evaluate_batch"  # eval_assets/batch.py's BATCH_JOB (importing it would load the whole code location)
LOCATION = "eval_assets.definitions"


def split_keys(n: int) -> list[str]:
    return [f"bench{i // 10:02d}/split{i % 10}" for i in range(n)]


def model_keys(n: int) -> list[str]:
    return [f"model-{i:03d}" for i in range(n)]


def scale_config(splits: int, models: int) -> str:
    """A config of `splits` splits (10 per benchmark, each the smoke file) x `models` echo models."""
    data = json.dumps(str(REPO / "data" / "smoke" / "test.jsonl"))
    lines = ["benchmarks:"]
    for b in range((splits + 9) // 10):
        lines += [f"  bench{b:02d}:", "    adapter: file", "    splits:"]
        lines += [f"      split{s}: {{path: {data}}}" for s in range(min(10, splits - b * 10))]
        lines += ["    options:", "      columns: {prompt: question, target: answer, id: id}",
                  "    metrics: [exact_match]"]
    lines.append("models:")
    lines += [f"  {m}: {{runner: echo}}" for m in model_keys(models)]
    return "\n".join(lines) + "\n"


def fate(i: int, swept: int | None = None) -> str:
    """What the sweep left for the i-th partition (split-major order): materialized, failed or missing. `swept`: the
    sweep covered only the first `swept` partitions (the rest are missing)."""
    if i % SKIP_EVERY == SKIP_AT or (swept is not None and i >= swept):
        return "missing"
    if i % FAIL_EVERY == FAIL_AT:
        return "failed"
    return "materialized"


def expected_counts(splits: int, models: int, swept: int | None = None) -> dict[str, int]:
    counts = {"materialized": 0, "failed": 0, "missing": 0}
    for i in range(splits * models):
        counts[fate(i, swept)] += 1
    return counts


def _metadata(asset: str, split: str, model: str, value: float) -> dict:
    """Metadata of the size the assets attach (eval_assets/assets.py): rows, a preview table, the metric values."""
    from dagster import MetadataValue

    meta = {"rows": 5, "warehouse_table": asset,
            "partition_file": MetadataValue.path(f"/warehouse/{asset}/{split}/{model}/part.parquet")}
    if asset == "metrics":
        meta.update({"exact_match": MetadataValue.float(value),
                     "preview": MetadataValue.md("| metric | slice | value | n |\n|---|---|---|---|\n"
                                                 f"| exact_match | all | {value:.3f} | 5 |\n"),
                     "viewer": MetadataValue.url(f"http://127.0.0.1:8765/?split={split}&model={model}")})
    return meta


def record_sweep(instance, splits: list[str], models: list[str], batch: int = 64, assets=CHAIN,
                 part: tuple[int, int] = (0, 1), swept: int | None = None) -> dict[str, int]:
    """The events a finished sweep over splits x models leaves, one `evaluate_batch` run per `batch` partitions
    (module docstring), for the chain assets `assets` only (a subset writes fewer events: quicker to build);
    `part` (i, n): only the i-th of every n runs (n writers in parallel); `swept`: module docstring of `fate`.
    Returns the partitions' counts by fate."""
    from dagster import (AssetCheckEvaluation, AssetKey, AssetMaterialization, DagsterEvent, DagsterRun,
                         MultiPartitionKey)
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData)
    from dagster._core.definitions.data_version import (CODE_VERSION_TAG, DATA_VERSION_IS_USER_PROVIDED_TAG,
                                                        DATA_VERSION_TAG)
    from dagster._core.definitions.events import (AssetMaterializationFailure, AssetMaterializationFailureReason,
                                                  AssetMaterializationFailureType)
    from dagster._core.definitions.partitions.utils.multi import get_tags_from_multi_partition_key
    from dagster._core.events import (AssetFailedToMaterializeData, AssetMaterializationPlannedData,
                                      DagsterEventType, StepMaterializationData)
    from dagster._utils.error import SerializableErrorInfo
    from dagster._core.execution.plan.objects import StepFailureData, StepSuccessData
    from dagster._core.storage.dagster_run import DagsterRunStatus

    step = "evaluate_partitions"
    keys = [(i, s, m) for i, (s, m) in enumerate((s, m) for s in splits for m in models)
            if fate(i, swept) != "missing"]
    counts = expected_counts(len(splits), len(models), swept)
    chain = [a for a in CHAIN if a in assets]

    def event(run_id: str, kind, data=None, step_key: str | None = step, message: str = "") -> None:
        instance.report_dagster_event(DagsterEvent(event_type_value=kind.value, job_name=BATCH_JOB, step_key=step_key,
                                                   event_specific_data=data, message=message), run_id=run_id)

    for n_run, start in enumerate(range(0, len(keys), batch)):
        if n_run % part[1] != part[0]:
            continue
        chunk = keys[start:start + batch]
        run_id = str(uuid.uuid4())
        failed_any = any(fate(i, swept) == "failed" for i, _, _ in chunk)
        instance.add_run(DagsterRun(job_name=BATCH_JOB, run_id=run_id, status=DagsterRunStatus.STARTING,
                                    tags={"evals/batch_partitions": str(len(chunk)), "evals/calls_models": "true"}))
        event(run_id, DagsterEventType.RUN_START, step_key=None)
        event(run_id, DagsterEventType.STEP_START)
        for _, s, m in chunk:
            for asset in chain:
                event(run_id, DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
                      AssetMaterializationPlannedData(AssetKey(asset), str(MultiPartitionKey(
                          {"benchmark_split": s, "model": m}))))
        for i, s, m in chunk:
            key = MultiPartitionKey({"benchmark_split": s, "model": m})
            value = ((i * 7) % 50) / 50
            # a failed partition fails at rollouts: prompts materialized, the rest failed
            done = [a for a in chain if fate(i, swept) != "failed" or a == "prompts"]
            for asset in done:
                version = hashlib.sha256(f"{asset}{key}".encode()).hexdigest()[:24]
                tags = {CODE_VERSION_TAG: "1", DATA_VERSION_TAG: version, DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
                        **get_tags_from_multi_partition_key(key)}
                event(run_id, DagsterEventType.ASSET_MATERIALIZATION, StepMaterializationData(AssetMaterialization(
                    asset_key=asset, partition=str(key), metadata=_metadata(asset, s, m, value), tags=tags)))
                if asset in ("rollouts", "metrics"):
                    check = "error_rate" if asset == "rollouts" else "samples_accounted"
                    event(run_id, DagsterEventType.ASSET_CHECK_EVALUATION, AssetCheckEvaluation(
                        asset_key=AssetKey(asset), check_name=check, passed=True, partition=str(key),
                        metadata={"n": 5}, target_materialization_data=AssetCheckEvaluationTargetMaterializationData(
                            storage_id=_last_storage_id(instance, asset, key), run_id=run_id,
                            timestamp=time.time())))
            for asset in (a for a in chain if a not in done):
                failure = AssetMaterializationFailure(
                    asset_key=AssetKey(asset), partition=str(key), description="rollouts: endpoint returned 500",
                    failure_type=AssetMaterializationFailureType.FAILED,
                    reason=(AssetMaterializationFailureReason.FAILED_TO_MATERIALIZE if asset == "rollouts" else
                            AssetMaterializationFailureReason.UPSTREAM_FAILED_TO_MATERIALIZE),
                    tags=dict(get_tags_from_multi_partition_key(key)))
                event(run_id, DagsterEventType.ASSET_FAILED_TO_MATERIALIZE, AssetFailedToMaterializeData(failure))
        if failed_any:
            event(run_id, DagsterEventType.STEP_FAILURE, StepFailureData(SerializableErrorInfo(
                "Failure: partition(s) failed (the others are materialized)", [], "Failure"), None))
            event(run_id, DagsterEventType.RUN_FAILURE, step_key=None)
        else:
            event(run_id, DagsterEventType.STEP_SUCCESS, StepSuccessData(duration_ms=1000.0 * len(chunk)))
            event(run_id, DagsterEventType.RUN_SUCCESS, step_key=None)
    return counts


def _last_storage_id(instance, asset: str, key) -> int:
    """The storage id of the materialization just stored (the instance storage remembers it, as batch.py reads)."""
    got = getattr(instance.event_log_storage, "last_asset_event", lambda: None)()
    if got is not None:
        return got[0]
    from dagster import AssetKey, AssetRecordsFilter

    return instance.fetch_materializations(AssetRecordsFilter(asset_key=AssetKey(asset), asset_partitions=[str(key)]),
                                           limit=1).records[0].storage_id


def _write_part(home: str, splits: int, models: int, batch: int, assets: list[str], part: tuple[int, int],
                swept: int | None) -> None:
    """One writer process: the part-th of every n runs of the sweep, into the instance at DAGSTER_HOME=home."""
    os.environ["DAGSTER_HOME"] = home
    from evalpipe.store.instance_storage import open_instance

    instance = open_instance(home, capture_compute_logs=False)
    record_sweep(instance, split_keys(splits), model_keys(models), batch, assets, part, swept)


def build_home(root: Path, splits: int, models: int, batch: int = 64, assets=("judgements", "metrics"),
               writers: int = 2, swept: int | None = None) -> tuple[dict[str, str], dict[str, int]]:
    """A DAGSTER_HOME under root with splits x models partitions registered and a finished sweep's events
    (`record_sweep`, in `writers` processes); returns the environment for the services and the expected counts."""
    import multiprocessing

    env = make_home(root, scale_config(splits, models))
    home = env["DAGSTER_HOME"]
    from evalpipe.store.instance_storage import open_instance
    from evalpipe.store.partition_keys import add_in_chunks

    os.environ["DAGSTER_HOME"] = home  # (the instance's storages find their folders through it)
    instance = open_instance(home, capture_compute_logs=False)  # (the storage made here, not in two writers at once)
    add_in_chunks(instance, "benchmark_split", split_keys(splits))
    add_in_chunks(instance, "model", model_keys(models))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_part, args=(home, splits, models, batch, list(assets), (i, writers), swept))
             for i in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"a sweep writer exited {p.exitcode}")
    return env, expected_counts(splits, models, swept)


def partition_key(splits: int, models: int, want: str = "failed") -> str:
    """The first partition (split|model) whose fate is `want`."""
    for i, (s, m) in enumerate((s, m) for s in split_keys(splits) for m in model_keys(models)):
        if fate(i) == want:
            return f"{s}|{m}"
    raise ValueError(want)


def pages(url: str, key: str) -> dict[str, str]:
    """The pages a user opens, (a) to (e) of the module docstring."""
    from urllib.parse import quote

    return {"a_graph": f"{url}/locations/{LOCATION}/asset-groups/evaluation",
            "a_catalog": f"{url}/assets",
            "b_asset": f"{url}/assets/metrics",
            "c_partitions": f"{url}/assets/metrics?view=partitions",
            "d_partition": f"{url}/assets/metrics?view=partitions&partition={quote(key)}",
            "e_checks": f"{url}/assets/metrics?view=checks"}


def record_queries(url: str, key: str, settle_s: float = 3.0, timeout_s: float = 90) -> dict[str, list[dict]]:
    """Open each page in headless Chromium and record the /graphql requests it sends: {page: [{op, body, ms}]},
    ms the browser's own wait for that first answer (request sent to response end)."""
    from urllib.parse import urlsplit

    from playwright.sync_api import sync_playwright

    got: dict[str, list[dict]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(timeout_s * 1000)
        for name, address in pages(url, key).items():
            seen: list = []
            listener = (lambda req: seen.append(req) if req.method == "POST" and urlsplit(req.url).path.endswith(
                "/graphql") else None)
            page.on("request", listener)
            page.goto(address)
            # until every request is answered and none new (a query or variables not seen on this page) for
            # settle_s: the UI polls some queries every few seconds, which are the same requests again
            deadline = time.monotonic() + timeout_s
            known: set[str] = set()
            while time.monotonic() < deadline:
                page.wait_for_timeout(settle_s * 1000)
                sigs = {(r.post_data or "") for r in seen}
                if sigs <= known and all(r.response() is not None for r in seen):
                    break
                known |= sigs
            page.remove_listener("request", listener)
            rows = []
            for req in seen:
                body = json.loads(req.post_data or "{}")
                t = req.timing
                rows.append({"op": body.get("operationName") or "?", "body": body,
                             "ms": (t["responseEnd"] - t["requestStart"]) if t.get("responseEnd", -1) >= 0 else None})
            got[name] = rows
            print(f"  {name}: {len(rows)} GraphQL requests: {', '.join(r['op'] for r in rows)}", flush=True)
        browser.close()
    return got


def post(url: str, body: dict, timeout: float = 300) -> tuple[float, int]:
    """One GraphQL request as the UI sent it: (seconds to the whole answer, its bytes). An error answer raises."""
    import urllib.request

    req = urllib.request.Request(f"{url}/graphql", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    raw = urllib.request.urlopen(req, timeout=timeout).read()
    dt = time.perf_counter() - t0
    answer = json.loads(raw)
    if answer.get("errors"):
        raise RuntimeError(f"{body.get('operationName')}: {answer['errors'][0].get('message')}")
    return dt, len(raw)


def label(op: str, variables: dict | None) -> str:
    """A query's name in the tables: its operation, and what it asks about where the UI sends it several ways."""
    v = variables or {}
    keys = v.get("assetKeys")
    if keys is None and isinstance(v.get("assetKey"), dict):
        keys = [v["assetKey"]]
    if keys:
        return f"{op} ({len(keys)} asset{'s' if len(keys) != 1 else ''})" if len(keys) != 1 else \
            f"{op} ({'/'.join(keys[0].get('path', []))})"
    return op


def distinct(recorded: dict[str, list[dict]]) -> dict[str, dict]:
    """Each distinct (operation, variables, text) once, with the pages that sent it, named by `label` (and `#n`
    where two still read alike)."""
    out: dict[str, dict] = {}
    seen: dict[str, str] = {}
    for page, rows in recorded.items():
        for row in rows:
            sig = json.dumps([row["op"], row["body"].get("variables"), row["body"].get("query")], sort_keys=True)
            if sig in seen:
                out[seen[sig]]["pages"].add(page)
                continue
            name = base = label(row["op"], row["body"].get("variables"))
            n = 2
            while name in out:
                name, n = f"{base} #{n}", n + 1
            seen[sig] = name
            out[name] = {"body": row["body"], "pages": {page}, "first_ms": row["ms"]}
    return out


def _stock_check_states_class():
    from dagster._core.storage.event_log.base import EventLogStorage

    from evalpipe.store.instance_storage import FastSqliteEventLogStorage

    class StockCheckStates(FastSqliteEventLogStorage):
        """The product's event log storage with Dagster's own computation of asset check states (the baseline of
        `--baseline`: every call from every partition's record)."""
        get_asset_check_state = EventLogStorage.get_asset_check_state

    return StockCheckStates


def __getattr__(name: str):  # the baseline's storage class, made only when the webserver loads it
    if name == "StockCheckStates":
        return _stock_check_states_class()
    raise AttributeError(name)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cached_home(cache: Path | None, root: Path, splits: int, models: int, args) -> tuple[dict[str, str], dict, float]:
    """`build_home` into root, or a copy of the same build kept under `cache` (keyed by the size, the sweep's
    settings, Dagster's version and this file: a build is minutes at 10,000 partitions); (env, counts, seconds)."""
    import inspect

    from dagster import __version__ as dagster_version

    assets = args.assets.split(",")
    code = [inspect.getsource(f) for f in (record_sweep, scale_config, fate, _metadata, build_home, _write_part)]
    sig = hashlib.sha256(json.dumps([splits, models, args.batch, assets, dagster_version, code]).encode()
                         ).hexdigest()[:16]
    kept = cache / f"{splits}x{models}-{sig}" if cache else None
    t0 = time.perf_counter()
    if kept is not None and (kept / "built.json").exists():
        shutil.copytree(kept, root)
        env = make_home_env(root)
        return env, json.loads((kept / "built.json").read_text())["counts"], time.perf_counter() - t0
    env, counts = build_home(root, splits, models, args.batch, assets, args.writers)
    built_s = time.perf_counter() - t0
    if kept is not None:
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(root, kept)
        (kept / "built.json").write_text(json.dumps({"counts": counts, "built_s": built_s}))
    return env, counts, built_s


def make_home_env(root: Path) -> dict[str, str]:
    """The services' environment for a home made by bench_ui.make_home under root (as it returns it)."""
    env = {**os.environ, "DAGSTER_HOME": str(root / "home"), "EVALS_CONFIG": str(root / "evals.yaml"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("EVALS_WAREHOUSE", None)
    return env


def measure(splits: int, models: int, args, root: Path) -> dict:
    """Build the instance of one size, start the services, record the pages' queries, replay them."""
    env, counts, built_s = cached_home(args.cache, root / f"{splits}x{models}", splits, models, args)
    copied = (root / f"{splits}x{models}" / "built.json").exists()
    print(f"{splits}x{models}: instance {'copied from the cache' if copied else 'built'} in {built_s:.0f} s {counts}",
          flush=True)
    key = partition_key(splits, models)
    stock = args.baseline and (splits, models) == args.sizes_list[-1]
    with DagsterDev(env, free_port(), log=root / f"dev-{splits}x{models}.log") as dev:
        wait_idle(dev.url)
        recorded = record_queries(dev.url, key)
        queries = distinct(recorded)
        if not queries:
            raise RuntimeError(f"the UI sent no GraphQL request (log: {root})")
        urls = {"ours": dev.url}
        with (stock_webserver(env, root / f"dev-{splits}x{models}-stock.log") if stock else nullcontext()) as base:
            if base:
                urls["stock"] = base
            times, sizes = replay(urls, queries, args.repeat, dev.url)
    rows = {q: {"median_s": statistics.median(times["ours"][q]), "first_s": (queries[q]["first_ms"] or 0) / 1000,
                "bytes": sizes[q], "pages": sorted(queries[q]["pages"]), "request": queries[q]["body"]}
            for q in queries}
    if stock:
        for q in rows:
            rows[q]["stock_check_states_s"] = statistics.median(times["stock"][q])
    return {"partitions": splits * models, "counts": counts, "built_s": built_s, "copied": copied, "key": key,
            "queries": rows, "recorded": {page: [row["op"] for row in got] for page, got in recorded.items()}}


@contextmanager
def stock_webserver(env: dict[str, str], log: Path):
    """A second webserver on the same instance whose event log storage computes asset check states as Dagster's
    own does (`StockCheckStates`), beside the product's: the baseline of `--baseline`, measured in the same rounds."""
    import subprocess

    from evalpipe.cli.dev import commands, stop

    home = Path(env["DAGSTER_HOME"])
    yaml = (home / "dagster.yaml").read_text()
    ours = "module: evalpipe.store.instance_storage\n  class: FastSqliteEventLogStorage"
    if ours not in yaml:
        raise RuntimeError(f"{home / 'dagster.yaml'} names no {ours!r}: the baseline can't swap it")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    stock = "module: benchmarks.bench_ui_scale\n  class: StockCheckStates"
    (home / "dagster.yaml").write_text(yaml.replace(ours, stock))
    procs = []
    try:
        with open(log, "ab") as out:
            procs = [subprocess.Popen(commands("127.0.0.1", port, "workspace.yaml")[0], cwd=REPO, env=env,
                                      stdout=out, stderr=subprocess.STDOUT, start_new_session=True)]
        deadline = time.monotonic() + 120
        while True:
            try:
                if gql(url, "{ assetNodes { id } }").get("assetNodes"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or procs[0].poll() is not None:
                raise RuntimeError(f"the baseline webserver did not come up on {url} (log: {log})")
            time.sleep(0.5)
    finally:
        (home / "dagster.yaml").write_text(yaml)  # read at its start: the product's again for everything else
    try:
        yield url
    finally:
        stop(procs)


def replay(urls: dict[str, str], queries: dict[str, dict], repeat: int, daemon_url: str
           ) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Each query `repeat` times on each webserver of `urls` (one after the other, so both see the same load), in an
    order rotated each round, each round once no run is queued or in progress."""
    times: dict[str, dict[str, list[float]]] = {u: {q: [] for q in queries} for u in urls}
    sizes: dict[str, int] = {}
    names = list(queries)
    for r in range(repeat):
        wait_idle(daemon_url)
        for q in names[r % len(names):] + names[:r % len(names)]:
            for u, url in (list(urls.items()) if r % 2 == 0 else list(urls.items())[::-1]):
                dt, size = post(url, queries[q]["body"])
                times[u][q].append(dt)
                sizes[q] = size
    return times, sizes


PAGE_TITLES = {"a_graph": "(a) asset graph", "a_catalog": "(a) asset catalog", "b_asset": "(b) metrics asset",
               "c_partitions": "(c) Partitions tab", "d_partition": "(d) one partition", "e_checks": "(e) Checks tab"}


def table(results: list[dict]) -> list[str]:
    """One row per page and query: its median at each size side by side, the first answer at the largest, and the
    baseline's median where measured."""
    small, big = results[0], results[-1]
    stock = any("stock_check_states_s" in r for r in big["queries"].values())
    head = " | ".join(f"{r['partitions']:,} (s)" for r in results)
    lines = [f"| page | query | {head} | first answer at {big['partitions']:,} (s) |"
             + (" Dagster's check states (s) |" if stock else "") + " answer (KB) |",
             "|---|---|" + "---|" * (len(results) + 2 + stock)]
    shown = set()
    for page, title in PAGE_TITLES.items():
        for q, row in big["queries"].items():
            if page not in row["pages"] or q in shown:
                continue
            shown.add(q)
            cells = " | ".join(f"{r['queries'][q]['median_s']:.2f}" if q in r["queries"] else "-" for r in results)
            extra = f" {row['stock_check_states_s']:.2f} |" if stock else ""
            lines.append(f"| {title} | {q} | {cells} | {row['first_s']:.2f} |{extra} {row['bytes'] / 1024:.0f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10x10,100x100", help="SPLITSxMODELS, comma list (smallest first)")
    ap.add_argument("--repeat", type=int, default=5, help="replays of each query (medians)")
    ap.add_argument("--batch", type=int, default=64, help="partitions per run of the sweep (sweep_batch_partitions)")
    ap.add_argument("--assets", default="judgements,metrics",
                    help="the chain assets the sweep's events are written for (prompts,rollouts,judgements,metrics "
                         "for all: about twice the build time)")
    ap.add_argument("--writers", type=int, default=2, help="processes writing the sweep's events")
    ap.add_argument("--cache", type=Path, default=None,
                    help="keep each size's built instance here and copy it on later runs (the build is minutes)")
    ap.add_argument("--baseline", action="store_true",
                    help="at the largest size, also replay the queries with Dagster's own computation of asset check "
                         "states (what the product's instance storage keeps between calls)")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (homes, webserver logs)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    check_repeat(args.repeat)
    if not os.path.exists(CHROMIUM):
        print("bench_ui_scale: no Chromium here (apt-get install chromium): the UI's queries can't be recorded")
        return 2
    if set(args.assets.split(",")) - set(CHAIN):
        raise SystemExit(f"--assets {args.assets!r}: choose from {','.join(CHAIN)}")
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",") if s]
    args.sizes_list = sizes
    root = Path(tempfile.mkdtemp(prefix="bench_ui_scale_"))
    load_before = load()
    try:
        results = [measure(s, m, args, root) for s, m in sizes]
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")
    big = results[-1]
    slow = {q: r["median_s"] for q, r in big["queries"].items() if r["median_s"] > TARGET_S}
    lines = [f"The GraphQL queries the Dagster UI sends to open each page, replayed {args.repeat} times each (median "
             f"seconds); {machine()}, load average {load_before} before / {load()} after, {today()}", "",
             *table(results), ""]
    for r in results:
        lines.append(f"- {r['partitions']:,} partitions: {r['counts']['materialized']:,} materialized, "
                     f"{r['counts']['failed']:,} failed, {r['counts']['missing']:,} missing; instance "
                     f"{'copied from --cache' if r['copied'] else 'built'} in {r['built_s']:.0f} s; partition opened: "
                     f"{r['key']}")
    worst = max(big["queries"].items(), key=lambda kv: kv[1]["median_s"])
    target = (f"- slowest query at {big['partitions']:,} partitions: {worst[0]} {worst[1]['median_s']:.2f} s (target "
              f"<= {TARGET_S:g} s per query): {'met' if not slow else 'MISSED: ' + ', '.join(slow)}")
    first = max(big["queries"].items(), key=lambda kv: kv[1]["first_s"])
    cold = (f"- slowest first answer at {big['partitions']:,} partitions (the page opened once, caches empty): "
            f"{first[0]} {first[1]['first_s']:.2f} s")
    print("\n".join(lines + [target, cold]))
    write_json(args.json, "ui_scale", "\n".join(lines), [target, cold], results=results, repeat=args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
