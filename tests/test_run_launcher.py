"""[sweeps] The default instance's run launcher (evalpipe/store/run_launcher.py): runs forked from a warm forkserver
with the libraries imported, stopped by the UI's Terminate, and sent to the code server as before once evalpipe's
own files have changed since the forkserver imported them."""
import time

import pytest

from evalpipe.store import run_launcher
from evalpipe.store.run_launcher import PID_TAG, source_signature


def test_changed_evalpipe_files_send_runs_to_a_fresh_process(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(run_launcher, "PACKAGE", str(pkg))
    monkeypatch.setattr(run_launcher, "_context", None)
    monkeypatch.setattr(run_launcher, "_imported", None)
    monkeypatch.setattr(run_launcher, "source_signature", lambda root=str(pkg): source_signature(root))
    first = run_launcher._forkserver()
    assert first is not None and run_launcher._forkserver() is first  # unchanged: the same warm server
    time.sleep(0.01)
    (pkg / "a.py").write_text("x = 22\n")
    assert run_launcher._forkserver() is None  # a changed file: runs go to the code server, freshly spawned
    (pkg / "b.py").write_text("")
    assert run_launcher._forkserver() is None


@pytest.mark.slow
def test_a_ui_backfills_run_is_forked_warm_and_terminates_canceled(tmp_path, monkeypatch):
    from dagster import DagsterInstance, DagsterRunStatus

    import psutil

    from benchmarks.bench_sweep import keys_of, prepare, sweep_config
    from benchmarks.bench_ui import CHAIN, DagsterDev, launch_backfill, make_home
    from tests.helpers.mock_servers import mock_server_process
    from tests.helpers.services import free_port

    with mock_server_process(latency=30) as port:  # every request waits 30 s: the run is still going when stopped
        model = (f"  slow: {{runner: litellm, model: hosted_vllm/mock, api_base: 'http://127.0.0.1:{port}/v1', "
                 "params: {max_tokens: 8}, timeout_s: 120}")
        config = sweep_config(tmp_path, 1, samples=2, models=model)
        env = make_home(tmp_path, config)
        splits, models = keys_of(config)
        prepare(env, splits, models)
        monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
        with DagsterDev(env, free_port(), log=tmp_path / "dev.log") as dev, DagsterInstance.get() as inst:
            launch_backfill(dev.url, [f"{splits[0]}|{models[0]}"], CHAIN)
            deadline = time.monotonic() + 120
            run = None
            while time.monotonic() < deadline:
                runs = [r for r in inst.get_runs() if r.status == DagsterRunStatus.STARTED and PID_TAG in r.tags]
                if runs:
                    run = runs[0]
                    break
                time.sleep(0.5)
            assert run is not None, (tmp_path / "dev.log").read_text()[-3000:]
            proc = psutil.Process(int(run.tags[PID_TAG]))
            # forked from the forkserver the daemon started, not spawned by the code server
            assert "forkserver" in " ".join(proc.parent().cmdline())
            time.sleep(3)  # inside its model call
            assert inst.run_launcher.terminate(run.run_id)
            deadline = time.monotonic() + 60
            while not inst.get_run_by_id(run.run_id).is_finished and time.monotonic() < deadline:
                time.sleep(0.5)
            assert inst.get_run_by_id(run.run_id).status == DagsterRunStatus.CANCELED
            psutil.wait_procs([proc], timeout=30)
            assert not proc.is_running()
