"""Rate limits shared across runs and workers (evalpipe/store/ratelimit.py): counted server-side by the mock, whatever
process sent the requests. Real stores: SQLite under DAGSTER_HOME, and a real redis-server when installed."""
import json
import os
import subprocess
import sys
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from evalpipe.store.ratelimit import Limit, next_slot
from tests.helpers.cli import run_processes
from tests.helpers.configs import smoke_benchmark
from tests.helpers.mock_servers import litellm_models, mock_server_process

ROOT = Path(__file__).resolve().parents[1]


def max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def test_next_slot_is_a_sliding_window():
    lim = Limit(rpm=3, window_s=60)
    assert next_slot([], 100.0, 0, lim) == 100.0
    booked = [(100.0, 0), (101.0, 0), (102.0, 0)]
    assert next_slot(booked, 103.0, 0, lim) == pytest.approx(161.0)  # the oldest leaves at 160, + 1 s guard
    assert next_slot(booked, 200.0, 0, lim) == 200.0
    tok = Limit(tpm=100, window_s=60)
    assert next_slot([(0.0, 60), (1.0, 30)], 2.0, 20, tok) == pytest.approx(61.0)  # 30 + 20 <= 100 once 60 left
    assert next_slot([], 5.0, 1000, tok) == 5.0  # larger than a whole window: alone, not never


def _book_many(store_spec: str, n: int, out: str) -> None:  # run in a child process
    code = f"""
import json, time
from evalpipe.store.ratelimit import Limit, store_for
s = store_for({store_spec!r}); lim = Limit(rpm=120, window_s=4)   # at most 8 grants in any 4 s
grants = []
for _ in range({n}):
    bid, slot, now = s.book("k", 0, lim)
    time.sleep(max(0, slot - now)); grants.append(slot)   # the granted time, on the store's clock
json.dump(grants, open({out!r}, "w"))
"""
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)


def _processes_share(store_spec: str, tmp_path: Path) -> None:
    outs = [str(tmp_path / f"g{i}.json") for i in range(4)]
    procs = [_book_many(store_spec, 5, o) for o in outs]
    assert all(p.wait(120) == 0 for p in procs)
    times = [t for o in outs for t in json.load(open(o))]
    assert len(times) == 20
    assert max_in_window(times, 4.0) <= 8
    assert max(times) - min(times) >= 8.0  # 20 grants at 8 per 4 s: the limit really held them back


def test_sqlite_store_is_shared_by_processes(tmp_path):
    _processes_share(str(tmp_path / "rl.sqlite"), tmp_path)


def test_redis_store_is_shared_by_processes(redis_url, tmp_path):
    _processes_share(redis_url, tmp_path)


def test_four_concurrent_runs_never_exceed_the_rpm(home, tmp_path):
    """4 `evalpipe run` processes, 4 models on one provider key, one mock: the server never sees more requests
    in any window than the key allows."""
    with mock_server_process(latency=0.05) as port:
        cfg = tmp_path / "evals.yaml"
        cfg.write_text(smoke_benchmark("test") + "models:\n" + litellm_models(port, 4) + """
rate_limits:
  limits:
    # at most 8 requests in any 8 s, all four runs together; a 2 s guard absorbs this loaded CI machine's delays
    # between a grant and the request reaching the server (over 1 s seen for a process's first request)
    openai: {rpm: 60, window_s: 8, guard_s: 2.0}
""")
        env = {**os.environ, "EVALS_CONFIG": str(cfg), "DAGSTER_HOME": str(home)}
        run_processes(env, [["run", "--model", f"m{i}", "--no-progress", "--concurrency", "8", "--benchmark-option",
                             "limit=4"] for i in range(4)])
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats").read())
    times = stats["times"]
    assert len(times) == 16  # 4 samples x 4 runs, each sent once
    assert max_in_window(times, 8.0) <= 8
    assert max(times) - min(times) >= 8.0  # 16 requests at 8 per 8 s: held back, not merely lucky


def _first_booking(path: str, start_at: float) -> None:
    from evalpipe.store.ratelimit import SqliteStore

    while time.time() < start_at:  # every process opens the new file at the same moment
        pass
    SqliteStore(path).book("k", 1, Limit(rpm=1000, window_s=60))


def test_processes_opening_a_new_store_at_once_all_get_their_booking(tmp_path):
    """Switching a new SQLite file to WAL can fail at once with "database is locked" (SQLite skips the busy timeout
    there); 6 processes x 40 fresh files failed ~5% of their first bookings before the set-up was retried."""
    import multiprocessing

    # each worker stops on SIGTERM whatever handler the test process holds (the pool's exit sends SIGTERM)
    with multiprocessing.get_context("fork").Pool(6, initializer=signal.signal,
                                                 initargs=(signal.SIGTERM, signal.SIG_DFL)) as pool:
        for trial in range(40):
            path, start_at = str(tmp_path / f"rl-{trial}.sqlite"), time.time() + 0.05
            for booking in [pool.apply_async(_first_booking, (path, start_at)) for _ in range(6)]:
                booking.get(timeout=120)
