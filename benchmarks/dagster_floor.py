"""The least any tool that records its runs in Dagster pays for one: import Dagster, pandas and DuckDB, open the
instance (DAGSTER_HOME's dagster.yaml, existing storage), and materialize one partition of a chain of six trivial
assets in process (dataset -> prompts -> rollouts -> judgements -> metrics -> leaderboard, returning small numbers;
in-memory IO manager: no warehouse, no model, no data). `bench_light_run.py` measures it as the `dagster-floor`
contender beside the import floor, so a cold `evalpipe run` can be read against both: what importing costs, and
what Dagster's own run machinery (its storage layer's imports, run creation, events) adds before evalpipe does
anything.

    DAGSTER_HOME=... .venv/bin/python benchmarks/dagster_floor.py
"""
import dagster
import duckdb  # noqa: F401  (the import floor's three)
import pandas  # noqa: F401
from dagster import AssetIn, DagsterInstance, StaticPartitionsDefinition, asset, materialize, mem_io_manager

PARTITIONS = StaticPartitionsDefinition(["bench"])
STAGES = ("dataset", "prompts", "rollouts", "judgements", "metrics", "leaderboard")


def chain() -> list[dagster.AssetsDefinition]:
    out = []
    for i, name in enumerate(STAGES):
        if i == 0:
            @asset(name=name, partitions_def=PARTITIONS)
            def first() -> int:
                return 1
            out.append(first)
        else:
            @asset(name=name, partitions_def=PARTITIONS, ins={"upstream": AssetIn(STAGES[i - 1])})
            def step(upstream: int) -> int:
                return upstream + 1
            out.append(step)
    return out


if __name__ == "__main__":
    # Dagster's console logger prints every event at DEBUG; a quiet run, as evalpipe's are
    quiet = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    result = materialize(chain(), instance=DagsterInstance.get(), partition_key="bench",
                         resources={"io_manager": mem_io_manager}, run_config=quiet)
    assert result.success and result.output_for_node("leaderboard") == len(STAGES)
