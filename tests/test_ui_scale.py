"""The Dagster webserver answers the Partitions tab's partition-status query at 10,000 partitions (100 splits x 100
models registered, issue 31) with the right partitions materialized, failed and missing: the events of a finished
sweep over the first 400 partitions written through the instance as the batch code writes them
(benchmarks/bench_ui_scale.py `build_home`), then the webserver and daemon as `make dev` starts them. Not timed:
benchmarks/bench_ui_scale.py times the queries."""
from __future__ import annotations

import pytest

from benchmarks.bench_ui import DagsterDev, gql
from benchmarks.bench_ui_scale import build_home, fate, model_keys, split_keys
from tests.helpers.services import free_port

pytestmark = pytest.mark.slow

SPLITS = MODELS = 100
SWEPT = 400  # partitions the sweep covered: 4 splits x 100 models

# the fields the UI's partition-status query reads, asked of the `metrics` asset
STATUS = """query($key: AssetKeyInput!) { assetNodeOrError(assetKey: $key) { ... on AssetNode {
  partitionKeysByDimension { name partitionKeys }
  partitionStats { numMaterialized numFailed numMaterializing numPartitions }
  assetPartitionStatuses { ... on MultiPartitionStatuses { primaryDimensionName ranges {
    primaryDimStartKey primaryDimEndKey
    secondaryDim { ... on DefaultPartitionStatuses { materializedPartitions failedPartitions
                                                     materializingPartitions } } } } } } } }"""


def statuses(node: dict) -> dict[str, set[str]]:
    """{materialized|failed|materializing: {split|model}} from the answer's ranges of the primary dimension."""
    dims = {d["name"]: d["partitionKeys"] for d in node["partitionKeysByDimension"]}
    got = node["assetPartitionStatuses"]
    primary = dims[got["primaryDimensionName"]]
    out: dict[str, set[str]] = {"materialized": set(), "failed": set(), "materializing": set()}
    for r in got["ranges"]:
        first, last = primary.index(r["primaryDimStartKey"]), primary.index(r["primaryDimEndKey"])
        for p in primary[first:last + 1]:
            for status in out:
                for s in r["secondaryDim"][f"{status}Partitions"]:
                    # a multi key reads split|model whichever dimension is primary
                    split, model = (p, s) if got["primaryDimensionName"] == "benchmark_split" else (s, p)
                    out[status].add(f"{split}|{model}")
    return out


def test_partition_status_at_10000_partitions_counts_materialized_failed_and_missing(tmp_path):
    env, counts = build_home(tmp_path, SPLITS, MODELS, assets=("metrics",), writers=1, swept=SWEPT)
    keys = [f"{s}|{m}" for s in split_keys(SPLITS) for m in model_keys(MODELS)]
    want = {f: {k for i, k in enumerate(keys) if fate(i, SWEPT) == f} for f in ("materialized", "failed")}
    assert counts == {"materialized": 372, "failed": 8, "missing": 9620}  # the sweep as designed
    with DagsterDev(env, free_port(), log=tmp_path / "dev.log") as dev:
        node = gql(dev.url, STATUS, {"key": {"path": ["metrics"]}}, timeout=120)["assetNodeOrError"]
    assert node["partitionStats"] == {"numMaterialized": 372, "numFailed": 8, "numMaterializing": 0,
                                      "numPartitions": 10_000}
    got = statuses(node)
    assert got["materialized"] == want["materialized"]
    assert got["failed"] == want["failed"]
    assert not got["materializing"]
    missing = set(keys) - got["materialized"] - got["failed"]
    assert len(missing) == 9620
