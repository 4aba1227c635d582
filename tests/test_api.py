"""The Python API: `evalpipe.evaluate` and `evalpipe.evaluate_async` on the same assets and warehouse as the CLI."""
import asyncio

import pytest

import evalpipe
from tests.helpers.configs import smoke_benchmark

CONFIG = smoke_benchmark({"test": None, "extra": 4}, options="slice_by: [category]") + """models:
  perfect: {runner: echo, reply: target}
  fixed: {runner: echo, reply: fixed, text: Paris}
default_models: [perfect]
default_benchmarks: [smoke]
"""


def test_evaluate_returns_metrics_run_dirs_and_samples(home, write_config):
    write_config(CONFIG)
    res = evalpipe.evaluate(benchmarks=["smoke/extra"], models=["fixed"], run_id="api-run")
    assert res.success and [(p.benchmark_split, p.model) for p in res.partitions] == [("smoke/extra", "fixed")]
    assert res.metric("smoke/extra", "fixed", "exact_match") == 0.25
    assert {"all", "category=geography"} <= set(res.metrics["slice"])
    run_dir = res.run_dirs[("smoke/extra", "fixed")]
    assert run_dir.name == "api-run" and (run_dir / "manifest.json").exists()
    samples = res.samples("smoke/extra", "fixed")
    assert [s["sample_id"] for s in samples] == ["s1", "s2", "s3", "s4"]
    assert samples[0]["prediction"] == "Paris" and samples[0]["exact_match_correct"] is True
    assert samples[1]["exact_match_score"] == 0.0
    # the same warehouse the CLI reads
    from evalpipe.cli.main import _warehouse

    assert _warehouse().query("select count(*) n from rollouts where model = 'fixed'")["n"][0] == 4
    assert list(res.leaderboard["model"]) == ["fixed"]
    with pytest.raises(evalpipe.ConfigError, match="unknown option"):
        evalpipe.evaluate(benchmarks=["smoke"], models=["fixed"], limt=3)


def test_evaluate_async_inside_a_running_event_loop(home, write_config):
    write_config(CONFIG)

    async def main():
        assert asyncio.get_running_loop() is not None
        ticks = 0

        async def heartbeat():  # the loop keeps running while the evaluation works in its thread
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.05)

        hb = asyncio.create_task(heartbeat())
        res = await evalpipe.evaluate_async(benchmarks=["smoke"], splits=["extra"], models=["perfect", "fixed"],
                                            experiment="api", limit=2)
        hb.cancel()
        return res, ticks

    res, ticks = asyncio.run(main())
    assert res.success and ticks > 1
    # limit=2: a try under its own keys (<model>@<experiment>-limit<N>), read back under the name asked for
    assert sorted(p.model for p in res.partitions) == ["fixed@api-limit2", "perfect@api-limit2"]
    assert res.metric("smoke/extra", "perfect@api", "exact_match") == 1.0
    assert len(res.samples("smoke/extra", "perfect@api")) == 2
    assert res.metric("smoke/extra", "perfect@api-limit2", "exact_match") == 1.0
