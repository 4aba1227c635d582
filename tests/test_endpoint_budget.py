"""One in-flight budget per endpoint and per model (`rate_limits.limits.<key>.max_in_flight`, issue 31), shared
by the partitions of a run, by runs and by processes (evalpipe/store/ratelimit.py InFlight). Counted server-side:
with a fixed latency L, requests that reach the mock less than L apart were all under way at once, so the most
arrivals in any window shorter than L is how many were in flight."""
import json
import os
import urllib.request
from pathlib import Path

import pytest

from tests.helpers.cli import run_processes
from tests.helpers.configs import smoke_benchmark
from tests.helpers.mock_servers import litellm_models, mock_server_process
from tests.test_ratelimit import max_in_window

LATENCY = 0.4
WINDOW = 0.3  # < LATENCY: arrivals this close together overlapped at the server


def _config(tmp_path, port: int, models: int, limits: str) -> str:
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(smoke_benchmark("test") + "models:\n" + litellm_models(port, models) + "rate_limits:\n  limits:\n"
                   + limits)
    return str(cfg)


def _times(port: int) -> list[float]:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/stats").read())["times"]


def test_two_partitions_of_two_models_share_the_endpoint_budget(home, tmp_path):
    """One `evalpipe run` of two models (two partitions, 8 in flight allowed each) on one endpoint that takes 4."""
    with mock_server_process(latency=LATENCY) as port:
        cfg = _config(tmp_path, port, 2, f"    http://127.0.0.1:{port}/v1: {{max_in_flight: 4}}\n")
        env = {**os.environ, "EVALS_CONFIG": cfg, "DAGSTER_HOME": str(home)}
        run_processes(env, [["run", "--model", "m0", "--model", "m1", "--no-progress", "--concurrency", "8",
                             "--benchmark-option", "limit=8"]])
        times = _times(port)
    assert len(times) == 16
    assert max_in_window(times, WINDOW) == 4  # never more than the endpoint takes, and the budget used whole


def _two_processes_on_an_endpoint_of_4(home, tmp_path, store_line: str = "") -> None:
    """Two `evalpipe run` processes (models m0, m1; 8 in flight allowed each) on one endpoint that takes 4, m0 alone
    1 (`store_line`: where the budgets are kept): the server saw 16 requests, never more than 4 at once, and 4."""
    with mock_server_process(latency=LATENCY) as port:
        cfg = _config(tmp_path, port, 2, f"    http://127.0.0.1:{port}/v1: {{max_in_flight: 4}}\n"
                                         "    m0: {max_in_flight: 1}\n" + store_line)
        env = {**os.environ, "EVALS_CONFIG": cfg, "DAGSTER_HOME": str(home)}
        run_processes(env, [["run", "--model", f"m{i}", "--no-progress", "--concurrency", "8",
                             "--benchmark-option", "limit=8"] for i in range(2)])
        times = _times(port)
    assert len(times) == 16
    assert max_in_window(times, WINDOW) == 4


def test_two_processes_share_the_endpoint_budget_and_each_model_its_own(home, tmp_path):
    """Two `evalpipe run` processes, one model each, on one endpoint that takes 4; model m0 alone takes 1."""
    _two_processes_on_an_endpoint_of_4(home, tmp_path)


def test_a_budget_is_taken_back_from_a_process_that_died(tmp_path):
    """A slot held by a process killed mid-request is given back at the next look, not lost for good."""
    import subprocess
    import sys

    from evalpipe.store.ratelimit import SqliteStore

    path = tmp_path / "rl.sqlite"
    child = subprocess.run([sys.executable, "-c", "from evalpipe.store.ratelimit import SqliteStore; import sys; "
                            f"s = SqliteStore({str(path)!r}); print(s.enter('ep', 1))"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() not in ("", "None")
    store = SqliteStore(path)
    assert store.enter("ep", 1) is not None  # the dead child's slot taken back
    assert store.enter("ep", 1) is None  # ... and this one is held


@pytest.mark.parametrize("raw, says", [
    ({"max_in_flight": 0}, "a whole number >= 1"),
    ({"max_in_flight": 2.5}, "a whole number >= 1"),
    ({"max_in_fligth": 4}, "unknown key(s) ['max_in_fligth']"),
])
def test_a_budget_that_cannot_be_honoured_is_one_line(raw, says):
    from evalpipe.core.errors import ConfigError
    from evalpipe.store.ratelimit import in_flight_budget

    with pytest.raises(ConfigError) as e:
        in_flight_budget(["ep"], {"store": "unused.sqlite", "limits": {"ep": raw}})
    assert says in str(e.value) and "\n" not in str(e.value)


def test_max_in_flight_on_a_store_that_cannot_keep_it_is_refused(monkeypatch):
    from evalpipe.core.errors import ConfigError
    from evalpipe.store import ratelimit

    class Remote(ratelimit._Store):  # (a store that keeps rpm/tpm only)
        pass

    monkeypatch.setitem(ratelimit._stores, "redis://nowhere:6379/0", Remote())
    with pytest.raises(ConfigError, match="max_in_flight needs a store that keeps it"):
        ratelimit.in_flight_budget(["ep"], {"store": "redis://nowhere:6379/0", "limits": {"ep": {"max_in_flight": 4}}})


def test_the_example_in_docs_scale_md_states_the_budgets_it_says(tmp_path):
    """docs/scale.md "Endpoint budgets": its config example gives ckpt-100 its own 32 and the endpoint's 256."""
    import re
    from pathlib import Path

    import yaml

    from evalpipe.store.ratelimit import in_flight_budget

    text = Path(__file__).resolve().parents[1].joinpath("docs", "scale.md").read_text()
    block = re.search(r"## Endpoint budgets.*?```yaml\n(.*?)```", text, re.S).group(1)
    cfg = yaml.safe_load(block)
    section = {**cfg["rate_limits"], "store": str(tmp_path / "rl.sqlite")}
    for key, want in (("ckpt-100", [("ckpt-100", 32), ("http://gpu-box:8000/v1", 256)]),
                      ("ckpt-200", [("http://gpu-box:8000/v1", 256)])):
        model = cfg["models"][key]
        assert in_flight_budget([key, "openai", model["api_base"]], section).budgets == want


def test_the_config_check_refuses_a_budget_before_any_call(tmp_path):
    from evalpipe.core.errors import ConfigError
    from evalpipe.project.schema import validate_file

    cfg = tmp_path / "evals.yaml"
    cfg.write_text("benchmarks: {}\nmodels: {m: {runner: echo}}\nrate_limits:\n  limits:\n    m: {max_in_flight: 0}\n")
    with pytest.raises(ConfigError, match=r"evals.yaml:5: .*max_in_flight: a whole number >= 1, got 0"):
        validate_file(cfg)


# ---- the same budgets on the stores of several machines (Redis, Postgres): a slot is a lease renewed while held ----
@pytest.fixture(params=["redis", "postgres"])
def remote_store_url(request):
    """A fresh redis-server or PostgreSQL (tests/helpers/services.py): the URL a `rate_limits.store` names."""
    from tests.helpers.services import postgres_server, redis_server

    with (redis_server() if request.param == "redis" else postgres_server()) as url:
        yield url


def test_two_processes_share_the_endpoint_budget_on_a_remote_store(remote_store_url, home, tmp_path):
    """Two `evalpipe run` processes, one model each (8 in flight allowed each), on one endpoint that takes 4 (model
    m0 alone 1: its slot first, then the endpoint's), the budgets kept in Redis or Postgres (as on celery workers of
    several machines): never more than 4, and 4 reached."""
    _two_processes_on_an_endpoint_of_4(home, tmp_path, f"  store: {remote_store_url}\n")


def _remote(url: str, lease_s: float):
    from evalpipe.store.ratelimit import PostgresStore, RedisStore

    return RedisStore(url, lease_s=lease_s) if url.startswith("redis") else PostgresStore(url, lease_s=lease_s)


def test_slots_are_released_and_kept_while_held_on_a_remote_store(remote_store_url):
    """A slot given back is free at once; a slot held longer than its lease stays held (renewed), then ends."""
    import time

    store = _remote(remote_store_url, lease_s=0.6)
    a, b = store.enter("ep", 2), store.enter("ep", 2)
    assert a and b and a != b and store.enter("ep", 2) is None
    store.leave("ep", a)
    c = store.enter("ep", 2)
    assert c is not None
    time.sleep(1.5)  # 2.5 leases: renewed while held
    assert store.enter("ep", 2) is None
    assert store.enter("other", 1) is not None  # one budget per key
    store.leave("ep", b), store.leave("ep", c)
    assert store.enter("ep", 2) is not None


def test_a_killed_holders_slots_come_back_on_a_remote_store(remote_store_url):
    """A process killed (kill -9) while holding both slots of an endpoint: its slots come back once their lease
    runs out (nobody renews them), not before, and not never."""
    import signal
    import subprocess
    import sys
    import time

    lease = 1.0
    child = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom tests.test_endpoint_budget import _remote\n"
                              f"s = _remote({remote_store_url!r}, {lease})\n"
                              "print(s.enter('ep', 2), s.enter('ep', 2), flush=True)\ntime.sleep(600)"],
                             stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert "None" not in child.stdout.readline()
        store = _remote(remote_store_url, lease)
        time.sleep(2 * lease)  # the live child renews its slots
        assert store.enter("ep", 2) is None
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed = time.monotonic()
        got = None
        while got is None and time.monotonic() - killed < 5 * lease:
            got = store.enter("ep", 2)
            time.sleep(0.05)
        assert got is not None, "the dead holder's slots never came back"
        assert store.enter("ep", 2) is not None and store.enter("ep", 2) is None  # both of them
    finally:
        child.kill()
        child.wait(10)


def test_leases_are_renewed_in_a_forked_child():
    """A celery prefork worker forks after the store may have been used: the child renews its own slots (its own
    thread), and a slot given back is no longer renewed."""
    import time

    from evalpipe.store.ratelimit import _Renewer

    calls: list[tuple[int, dict]] = []
    renewer = _Renewer(lambda held: calls.append((os.getpid(), held)), lease_s=0.15)
    renewer.add("ep", "parent-slot")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread did not come along
        try:
            calls.clear()
            renewer.add("ep", "child-slot")
            time.sleep(0.4)
            ok = calls and all(p == os.getpid() and h == {"child-slot": "ep"} for p, h in calls)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    renewer.drop("parent-slot")
    time.sleep(0.1)
    calls.clear()
    time.sleep(0.3)
    assert not calls  # nothing held: nothing renewed
