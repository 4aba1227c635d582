"""`budget:` (issue 34): a hard cap on tokens and cost, shared by every partition, run and process through the
rate limits' store. Against a priced loopback endpoint: requests stop at the cap, the ones in flight finish, the
spend ends above the cap by at most what those cost; a re-run with a larger cap sends exactly what was left."""
import asyncio
import json
import os
import subprocess
import sys

import pytest

from benchmarks.mock_server import serve_in_thread
from evalpipe.core.types import RolloutRequest
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.store.journal import Journal
from evalpipe.store.ratelimit import (STOPPED_PREFIX, SqliteStore, budget_for, budget_ledgers, check_budget,
                                      spend_scope)
from tests.helpers.cli import REPO
from tests.helpers.configs import smoke_benchmark
from tests.helpers.priced import PRICING, PricedMock, priced_model

CONCURRENCY = 4


def _requests(n: int) -> list[RolloutRequest]:
    return [RolloutRequest(sample_id=f"s{i}", messages=[{"role": "user", "content": f"question number {i} please"}],
                           fingerprint=f"fp{i}") for i in range(n)]


def _run(base_url, journal_path, budget, n=40):
    runner = build_runner(priced_model(base_url))
    settings = RunSettings(concurrency=CONCURRENCY, max_retries=0, budget=budget)
    with Journal(journal_path) as journal:
        return asyncio.run(run_requests(runner, _requests(n), journal, settings))


def test_requests_stop_at_the_cap_and_a_larger_cap_finishes_without_repeats(tmp_path):
    store = tmp_path / "rl.sqlite"
    rl = {"store": str(store)}
    with serve_in_thread(PricedMock(latency=0.05)) as (mock, url):
        cap = 0.1  # each request costs ~0.011 USD (5 words in, 3 out): about 9 fit
        budget = budget_for({"run": {"cost_usd": cap}}, budget_ledgers("first", project="p"), rl)
        rows = _run(url, tmp_path / "j.sqlite", budget)
        stopped = [r for r in rows if str(r["error"] or "").startswith(STOPPED_PREFIX)]
        ok = [r for r in rows if r["status"] == "ok"]
        spent = SqliteStore(store).spent(["run:first"])["run:first"]
        assert stopped and ok and len(ok) + len(stopped) == 40
        assert len(mock.served) == len(ok)  # a stopped row was never sent
        assert spent[1] == pytest.approx(mock.cost())  # the ledger holds what the endpoint counted
        assert spent[0] == mock.tokens()
        assert spent[1] >= cap  # it stopped because the cap was reached ...
        # ... and went over it by at most the requests in flight then (the one that reached it and the others)
        assert spent[1] - cap < CONCURRENCY * mock.max_request_cost()
        assert all(r["attempts"] == 0 for r in stopped)

        first = set(p for p, _, _ in mock.served)
        bigger = budget_for({"run": {"cost_usd": 10}}, budget_ledgers("second", project="p"), rl)
        rows2 = _run(url, tmp_path / "j.sqlite", bigger)
        assert all(r["status"] == "ok" for r in rows2)
        assert len(mock.served) == 40 and len({p for p, _, _ in mock.served}) == 40  # no request sent twice
        assert first.isdisjoint(p for p, _, _ in mock.served[len(ok):])


def test_a_token_cap_and_the_day_scope_is_shared_by_two_budgets(tmp_path):
    """Two runs (two Budget objects, as two processes have) of one project on one day draw on one day ledger."""
    rl = {"store": str(tmp_path / "rl.sqlite")}
    with serve_in_thread(PricedMock(latency=0.02)) as (mock, url):
        a = budget_for({"day": {"tokens": 60}}, budget_ledgers("a", project="p", day="2030-01-01"), rl)
        b = budget_for({"day": {"tokens": 60}}, budget_ledgers("b", project="p", day="2030-01-01"), rl)
        rows_a = _run(url, tmp_path / "a.sqlite", a, n=4)  # 4 x 8 tokens: 32, under the cap
        rows_b = _run(url, tmp_path / "b.sqlite", b, n=20)
    assert all(r["status"] == "ok" for r in rows_a)
    assert any(str(r["error"] or "").startswith(STOPPED_PREFIX + " day") for r in rows_b)
    assert 60 <= mock.tokens() < 60 + CONCURRENCY * 8


def test_the_active_budget_reaches_calls_made_without_settings(tmp_path):
    """The wiring sets the budget for its context (`spend_scope`); a judge's calls (RunSettings without a budget)
    count against it."""
    rl = {"store": str(tmp_path / "rl.sqlite")}
    with serve_in_thread(PricedMock()) as (mock, url):
        budget = budget_for({"run": {"tokens": 1}}, budget_ledgers("r", project="p"), rl)
        runner = build_runner(priced_model(url))
        with spend_scope(budget):
            rows = asyncio.run(run_requests(runner, _requests(3), None, RunSettings(concurrency=1)))
    assert [r["status"] for r in rows] == ["ok", "error", "error"]
    assert len(mock.served) == 1


@pytest.mark.parametrize("raw, says", [
    ({"weekly": {"cost_usd": 1}}, "unknown scope 'weekly'"),
    ({"run": {"cost": 1}}, "unknown key 'cost'"),
    ({"run": {"cost_usd": 0}}, "a positive number"),
    ({"run": {}}, "expected {tokens: N}"),
])
def test_a_cap_that_cannot_be_honoured_is_refused(raw, says):
    assert says in check_budget(raw)[0][1]


def test_a_budget_needs_the_sqlite_store(redis_url):
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="budget: needs the SQLite store"):
        budget_for({"run": {"cost_usd": 1}}, budget_ledgers("r"), {"store": redis_url})


def _config(tmp_path, url: str, budget: str) -> str:
    cfg = tmp_path / "evals.yaml"
    models = "".join(f"  m{i}:\n    runner: litellm\n    model: openai/mock-{i}\n    api_base: {url}\n"
                     f"    options: {{pricing: {json.dumps(PRICING)}}}\n" for i in range(2))
    cfg.write_text(smoke_benchmark("test") + "models:\n" + models + budget)
    return str(cfg)


def test_two_processes_share_the_day_budget_and_stopped_partitions_fail_resumably(home, tmp_path):
    """Two `evalpipe run` processes (one model each) under one day cap: the endpoint's count stays within the
    cap plus what was in flight, the stopped partitions fail `stopped by budget` (never ranked), and a run with a
    larger cap finishes them without sending a request twice."""
    with serve_in_thread(PricedMock(latency=0.05)) as (mock, url):
        cfg = _config(tmp_path, url, "budget:\n  day: {cost_usd: 0.15}\n")
        env = {**os.environ, "EVALS_CONFIG": cfg, "DAGSTER_HOME": str(home)}
        from dagster import DagsterInstance

        with DagsterInstance.get():
            pass
        procs = [subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "run", "--model", f"m{i}",
                                   "--no-progress", "--concurrency", "2"], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        assert any(p.returncode == 1 for p in procs), outs
        assert "stopped by budget" in "".join(outs)
        assert 0.15 <= mock.cost() < 0.15 + 2 * 2 * mock.max_request_cost()
        sent = len(mock.served)
        assert sent < 16
        cfg2 = _config(tmp_path, url, "budget:\n  day: {cost_usd: 100}\n")
        env["EVALS_CONFIG"] = cfg2
        for i in range(2):
            r = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "run", "--model", f"m{i}",
                                "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        sent = [(b["model"], b["messages"][-1]["content"]) for b in mock.bodies]
        assert len(sent) == len(set(sent)) == 16  # 8 samples x 2 models, each sent once


def test_dry_run_prints_the_estimate_beside_each_cap(tmp_path):
    from types import SimpleNamespace

    from evalpipe.cli.dryrun import Estimate, budget_lines

    cfg = SimpleNamespace(raw={"budget": {"run": {"cost_usd": 1.0}, "day": {"tokens": 1000}},
                               "rate_limits": {"store": str(tmp_path / "rl.sqlite")}}, path=tmp_path / "evals.yaml")
    lines = budget_lines(cfg, [Estimate("s", "m", 10, 0, 400, 400, 0.5), Estimate("s", "n", 10, 0, 300, 300, 1.5)])
    assert lines[0] == "budget:"
    assert lines[1] == "  run: est $2.0000 of $1: STOPS at about 50% of the requests"
    assert lines[2] == "  day: est 1400 tokens of 1000 (0 spent today): STOPS at about 71% of the requests"
