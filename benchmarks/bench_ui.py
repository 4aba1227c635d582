"""The Dagster UI's path against the CLI's, for the same journaled partitions (issue 25: UI <= 1.5x CLI for one
partition, <= 2x for a two-model backfill).

A webserver and a daemon started as `make dev` starts them (evalpipe/cli/dev.py `commands`, the dagster.yaml of
dagster_home/), and runs launched through the webserver's GraphQL API with the mutations the UI sends:
- one partition: "Materialize" on `prompts`..`metrics` with one (benchmark_split, model) key chosen, which the UI
  sends as `launchPipelineExecution` of the implicit asset job `__ASSET_JOB` with the partition as tags and the
  assets' checks selected;
- a two-model backfill: the same assets with two keys, which the UI sends as `launchPartitionBackfill`.
Beside them, `evalpipe run --split S --model M [--model M2]` for the same partitions. Every partition is journaled
first (no model calls: the echo runner and cached rollouts). The CLI's run also checks the `dataset` and rebuilds
the leaderboard; in the UI the leaderboard follows by automation, in a run of its own that the UI figure leaves out
(each measurement starts once no run is queued or in progress). Medians of --repeat rounds (default 3), the order
rotated each round (benchmarks/common.py).

    .venv/bin/python benchmarks/bench_ui.py [--repeat 3] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.common import check_repeat, machine, median_row, rounds  # noqa: E402

SPLIT = "smoke/extra"
MODELS = ("echo", "echo2")
CHAIN = ("prompts", "rollouts", "judgements", "metrics")
TARGETS = {"one": 1.5, "backfill": 2.0}
DONE_RUN = {"SUCCESS", "FAILURE", "CANCELED"}
DONE_BACKFILL = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}

CONFIG = f"""benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {json.dumps(str(REPO / "data" / "smoke" / "test.jsonl"))}}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
    metrics: [exact_match]
models:
  echo: {{runner: echo}}
  echo2: {{runner: echo}}
"""


def make_home(root: Path, config: str = CONFIG) -> dict[str, str]:
    """A fresh DAGSTER_HOME with the dagster.yaml `make dev` uses, and `config` (default: the smoke split, two echo
    models) as root/evals.yaml: the environment for the services and the CLI."""
    home = root / "home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    (root / "evals.yaml").write_text(config)
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(root / "evals.yaml"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("EVALS_WAREHOUSE", None)
    return env


class DagsterDev:
    """The webserver and daemon of `make dev` on a free port, stopped (both process groups) on exit."""

    def __init__(self, env: dict[str, str], port: int, log: Path | None = None):
        self.env, self.port, self.log = env, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "DagsterDev":
        from evalpipe.cli.dev import commands

        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.procs = [subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True) for cmd in commands("127.0.0.1", self.port,
                                                                                    "workspace.yaml")]
        deadline = time.monotonic() + 120
        while True:
            try:
                if gql(self.url, "{ assetNodes { id } }").get("assetNodes"):
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.__exit__()
                raise RuntimeError(f"the Dagster webserver did not come up on {self.url} (log: {self.log})")
            time.sleep(0.5)

    def __exit__(self, *exc) -> None:
        from evalpipe.cli.dev import stop

        stop(self.procs)


def gql(url: str, query: str, variables: dict | None = None, timeout: float = 30) -> dict:
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query, "variables": variables or {}})
                                 .encode(), headers={"Content-Type": "application/json"})
    body = json.loads(urllib.request.urlopen(req, timeout=timeout).read())
    if body.get("errors"):
        raise RuntimeError(f"GraphQL error: {body['errors'][0].get('message')}")
    return body["data"]


CHECKS_QUERY = """query($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) { assetKey { path }
  assetChecksOrError { ... on AssetChecks { checks { name } } } } }"""
LAUNCH_RUN = """mutation LaunchPipelineExecution($executionParams: ExecutionParams!) {
  launchPipelineExecution(executionParams: $executionParams) { __typename
    ... on LaunchRunSuccess { run { id } } ... on PythonError { message } ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } } } }"""
LAUNCH_BACKFILL = """mutation LaunchPartitionBackfill($backfillParams: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $backfillParams) { __typename
    ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
    ... on PartitionKeysNotFoundError { message } ... on InvalidSubsetError { message } } }"""
RUN_STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
BACKFILL_STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill {
  status runs(limit: 20) { id status } } } }"""


def asset_keys(names) -> list[dict]:
    return [{"path": [n]} for n in names]


def check_selection(url: str, names) -> list[dict]:
    """The checks of `names`, as the UI's Materialize selects them with their assets."""
    nodes = gql(url, CHECKS_QUERY, {"keys": asset_keys(names)})["assetNodes"]
    return [{"assetKey": {"path": n["assetKey"]["path"]}, "name": c["name"]}
            for n in nodes for c in (n["assetChecksOrError"] or {}).get("checks", [])]


def partition_tags(split: str, model: str) -> list[dict]:
    return [{"key": "dagster/partition", "value": f"{split}|{model}"},
            {"key": "dagster/partition/benchmark_split", "value": split},
            {"key": "dagster/partition/model", "value": model}]


def launch_run(url: str, split: str, model: str, names=CHAIN, location: str = "eval_assets.definitions") -> str:
    """The UI's "Materialize" of one partition: a run of the implicit asset job; returns its id."""
    params = {"mode": "default", "runConfigData": "{}",
              "executionMetadata": {"tags": partition_tags(split, model)},
              "selector": {"repositoryLocationName": location, "repositoryName": "__repository__",
                           "pipelineName": "__ASSET_JOB", "assetSelection": asset_keys(names),
                           "assetCheckSelection": check_selection(url, names)}}
    got = gql(url, LAUNCH_RUN, {"executionParams": params})["launchPipelineExecution"]
    if got["__typename"] != "LaunchRunSuccess":
        raise RuntimeError(f"launch failed: {got}")
    return got["run"]["id"]


def launch_backfill(url: str, keys: list[str], names=CHAIN) -> str:
    """The UI's "Launch backfill" over `keys` ("split|model"); returns the backfill's id."""
    params = {"tags": [], "assetSelection": asset_keys(names), "partitionNames": keys, "fromFailure": False}
    got = gql(url, LAUNCH_BACKFILL, {"backfillParams": params})["launchPartitionBackfill"]
    if got["__typename"] != "LaunchBackfillSuccess":
        raise RuntimeError(f"backfill failed to launch: {got}")
    return got["backfillId"]


def wait_run(url: str, run_id: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = gql(url, RUN_STATUS, {"id": run_id})["runOrError"].get("status")
        if status in DONE_RUN:
            return status
        time.sleep(0.2)
    raise TimeoutError(f"run {run_id} not done after {timeout} s")


def wait_backfill(url: str, backfill_id: str, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        b = gql(url, BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
        if b.get("status") in DONE_BACKFILL:
            failed = [r["id"] for r in b.get("runs") or [] if r["status"] != "SUCCESS"]
            return "FAILURE" if failed or b["status"] in {"COMPLETED_FAILED", "FAILED"} else "SUCCESS"
        # every 0.5 s: a tighter poll of this query (it lists the backfill's runs) costs the webserver ~10% of a
        # core during a long backfill, CPU the runs being measured need on a 2-core machine
        time.sleep(0.5)
    raise TimeoutError(f"backfill {backfill_id} not done after {timeout} s")


def cli(env: dict[str, str], models) -> float:
    t = time.monotonic()
    args = [sys.executable, "-m", "evalpipe.cli.main", "run", "--split", SPLIT, "--no-progress"]
    for m in models:
        args += ["--model", m]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"`evalpipe run` exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}")
    return time.monotonic() - t


ACTIVE_RUNS = """query { runsOrError(filter: {statuses: [QUEUED, NOT_STARTED, STARTING, STARTED, CANCELING]}) {
  ... on Runs { results { id } } } }"""


def wait_idle(url: str, timeout: float = 300) -> None:
    """Until no run is queued or in progress (e.g. the leaderboard's automation run that follows a UI launch), so
    that each measurement starts on an idle instance and no run holds the warehouse's one writer slot."""
    deadline = time.monotonic() + timeout
    while gql(url, ACTIVE_RUNS)["runsOrError"]["results"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs still in progress after {timeout} s")
        time.sleep(0.5)


def timed(fn) -> dict:
    t = time.monotonic()
    status = fn()
    if status != "SUCCESS":
        raise RuntimeError(f"UI launch ended {status}")
    return {"wall_s": time.monotonic() - t}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    check_repeat(args.repeat)
    with socket.socket() as sock:  # a free loopback port
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(tempfile.mkdtemp(prefix="bench_ui_"))
    env = make_home(root)
    cli(env, MODELS)  # journal both partitions: later runs call no model
    keys = [f"{SPLIT}|{m}" for m in MODELS]
    with DagsterDev(env, port, log=root / "dev.log") as dev:
        jobs = {
            "cli_one": lambda r: {"wall_s": cli(env, MODELS[:1])},
            "ui_one": lambda r: timed(lambda: wait_run(dev.url, launch_run(dev.url, SPLIT, MODELS[0]))),
            "cli_backfill": lambda r: {"wall_s": cli(env, MODELS)},
            "ui_backfill": lambda r: timed(lambda: wait_backfill(dev.url, launch_backfill(dev.url, keys))),
        }
        jobs = {name: (lambda job: lambda r: (wait_idle(dev.url), job(r))[1])(job) for name, job in jobs.items()}
        got = rounds(jobs, args.repeat,
                     after_each=lambda name, r, row: print(f"round {r}: {name} {row['wall_s']:.2f} s", flush=True))
    med = {name: median_row(rows, ["wall_s"])["wall_s"] for name, rows in got.items()}
    report = {"machine": machine(), "repeat": args.repeat, "median_wall_s": med,
              "ratio": {k: med[f"ui_{k}"] / med[f"cli_{k}"] for k in TARGETS}}
    for k, target in TARGETS.items():
        ratio = report["ratio"][k]
        print(f"{k:9s} UI {med[f'ui_{k}']:.2f} s  CLI {med[f'cli_{k}']:.2f} s  UI/CLI {ratio:.2f}x "
              f"(target <= {target}x: {'met' if ratio <= target else 'MISSED'})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
