"""Results files: `evalpipe view RESULTS.jsonl` (or a run folder) in the terminal and with --web, accuracy per slice
in every form of `evalpipe view`, and `summarize --run-dir` rebuilding a copied folder's lost summary.json."""
import json
import shutil

import pytest
from click.testing import CliRunner

from evalpipe.core.types import Generation, Score
from evalpipe.metrics import register_metric
from evalpipe.metrics.base import Metric
from evalpipe.runners import register_runner
from evalpipe.runners.base import Runner
from tests.helpers.configs import smoke_benchmark

CONFIG = smoke_benchmark(options="slice_by: [category]", metrics="[exact_match, test_view_prefix_share]") + """models:
  half: {runner: test-view-half}
"""
RIGHT = {"s1", "s3", "s4", "s7"}


@register_runner("test-view-half", replace=True)
class HalfRight(Runner):
    """Right on s1, s3, s4, s7; a near miss elsewhere; s2's rollout fails."""

    name = "test-view-half"

    async def generate(self, request):
        if request.sample_id == "s2":
            raise ValueError("the model server said no")
        text = request.target if request.sample_id in RIGHT else request.target[:-1] + "x"
        return Generation(text=text, input_tokens=7, output_tokens=3, cost=0.002)


@register_metric("test_view_prefix_share", replace=True)
class PrefixShare(Metric):
    """A continuous score (the share of the target's leading characters matched): its interval is a bootstrap."""

    name = "test_view_prefix_share"

    def score(self, item):
        t, p = item.target or "", item.prediction or ""
        n = next((i for i, (a, b) in enumerate(zip(t, p)) if a != b), min(len(t), len(p)))
        return Score(value=n / len(t) if t else 0.0, correct=None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One evaluated partition (8 samples, 3 categories, one failed rollout) and its run folder, for the module."""
    from pathlib import Path

    tmp = tmp_path_factory.mktemp("view")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    cfg = tmp / "evals.yaml"
    cfg.write_text(CONFIG.replace("{repo}", str(Path(__file__).parents[1])))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv("EVALS_CONFIG", str(cfg))
        mp.delenv("EVALS_WAREHOUSE", raising=False)
        for var in ("EVALS_REDACT_PATTERNS", "EVALS_DAGSTER_LOG_LEVEL"):
            mp.setenv(var, "")
        r = _cli("run", "--model", "half", "--no-progress", "--run-id", "first")
        assert r.exit_code == 3 and "1/8 rollouts failed" in r.output, r.output  # the error-rate gate; all written
        yield home / "artifacts" / "smoke" / "extra" / "half" / "first"


def _cli(*args):
    from evalpipe.cli.main import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _copy_without_summary(folder, dest):
    shutil.copytree(folder, dest)
    (dest / "summary.json").unlink()
    return dest


def test_summarize_rebuilds_a_copied_folder_without_summary_json_to_the_same_numbers(run, tmp_path):
    original = json.loads((run / "summary.json").read_text())
    metrics = {r["metric"] for r in original["metrics"]}
    assert {"exact_match", "test_view_prefix_share", "latency_s_p50"} <= metrics  # Wilson, bootstrap and usage rows
    copy = _copy_without_summary(run, tmp_path / "copied")

    r = _cli("summarize", "--run-dir", str(copy), "--json", "--slices")
    assert r.exit_code == 0, r.output
    assert "rebuilt from samples.jsonl" in r.stderr
    assert json.loads(r.stdout) == json.loads(json.dumps(original["metrics"]))  # every row, every number

    from evalpipe.cli.view import rebuilt_summary
    from evalpipe.store.results_file import load_results

    rebuilt = rebuilt_summary(load_results(copy))
    assert rebuilt["counts"] == original["counts"] and rebuilt["run_id"] == "first"

    table = _cli("summarize", "--run-dir", str(copy))
    assert table.exit_code == 0 and "smoke/extra | half | run first" in table.stdout and "0.5000" in table.stdout


def test_summarize_run_dir_with_neither_file_is_still_a_one_line_error(tmp_path):
    r = _cli("summarize", "--run-dir", str(tmp_path))
    assert r.exit_code == 2 and "no summary.json" in r.stderr and len(r.stderr.splitlines()) == 1


def test_view_of_the_warehouse_prints_accuracy_overall_and_per_slice(run):
    r = _cli("view", "--metric", "exact_match", "--limit", "3")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "smoke/extra | half | metric exact_match | 3 sample(s)" in out
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in out.splitlines() if ln.startswith("|")]
    rows = {c[0]: c[1:] for c in cells}
    # 4 right of 8 (s2 failed: counted wrong), Wilson's interval; per category with its own n
    assert rows["all"] == ["0.5000", "8", "0", "1", "0.215-0.785"]
    assert rows["category=geography"] == ["0.6667", "3", "0", "0", "0.208-0.939"]
    assert rows["category=arithmetic"] == ["0.0000", "2", "0", "1", "0.000-0.658"]
    assert [c[0] for c in cells if c[0].startswith(("all", "category="))][0] == "all"  # overall first


def test_view_of_a_results_file_and_of_a_run_folder(run, tmp_path):
    exported = tmp_path / "RESULTS.jsonl"  # a bare file, away from its folder: named after itself
    shutil.copy(run / "samples.jsonl", exported)
    bare = _cli("view", str(exported), "--metric", "exact_match", "--incorrect-only")
    assert bare.exit_code == 0, bare.output
    assert "file/RESULTS | results | metric exact_match | 4 sample(s)" in bare.stdout
    assert "0.5000" in bare.stdout and "category=common-sense" in bare.stdout  # rebuilt: no summary beside it
    assert "s2" in bare.stdout and "s1 " not in bare.stdout

    folder = _cli("view", str(run.parent / "latest"), "--metric", "test_view_prefix_share", "--json")
    rows = json.loads(folder.stdout)
    assert [r["sample_id"] for r in rows] == [f"s{i}" for i in range(1, 9)]
    assert rows[0]["score"] == 1.0 and rows[1]["status"] != "ok" and rows[1]["error"]

    d = _cli("view", str(run), "--detailed", "--limit", "1")
    assert "smoke/extra | half |" in d.stdout and "prompt:\n[user]\nWhat is the capital of France?" in d.stdout


def test_a_malformed_line_is_one_error_naming_file_and_line_and_the_rest_is_shown(run, tmp_path):
    lines = (run / "samples.jsonl").read_text().splitlines()
    bad = tmp_path / "results.jsonl"
    bad.write_text("\n".join([lines[0], '{"sample_id": "s2", "prompt": [', lines[2], '{"score": 1}', *lines[3:]])
                   + "\n")
    r = _cli("view", str(bad), "--metric", "exact_match")
    assert r.exit_code == 0, r.output
    errs = r.stderr.splitlines()
    assert len(errs) == 2 and errs[0].startswith(f"error: {bad}:2: not JSON")
    assert errs[1] == f"error: {bad}:4: no sample_id (a samples.jsonl line from `evalpipe export` has one)"
    assert "7 sample(s)" in r.stdout and "s8" in r.stdout


def test_view_web_serves_the_files_samples_without_the_warehouse(run, tmp_path, monkeypatch):
    from starlette.testclient import TestClient

    import evalpipe.viewer.app as app_module

    served = {}
    monkeypatch.setattr(app_module, "serve", lambda source, host, port: served.update(source=source, port=port))
    copy = _copy_without_summary(run, tmp_path / "copied")
    r = _cli("view", str(copy / "samples.jsonl"), "--web", "--port", "9123")
    assert r.exit_code == 0 and served["port"] == 9123 and f"over {copy / 'samples.jsonl'}" in r.stderr

    client = TestClient(app_module.create_app(served["source"]), base_url="http://127.0.0.1")
    index = client.get("/index.json").json()
    em = [p for p in index["partitions"] if p["metric"] == "exact_match"]
    assert [(p["benchmark_split"], p["model"], round(p["value"], 4), p["n"]) for p in em] == [
        ("smoke/extra", "half", 0.5, 8)]
    page = client.get("/samples.json", params={"split": "smoke/extra", "model": "half", "metric": "exact_match",
                                               "outcome": "correct"}).json()
    assert sorted(row["sample_id"] for row in page["page"]["rows"]) == sorted(RIGHT)
    one = client.get("/sample.json", params={"split": "smoke/extra", "model": "half", "id": "s2"})
    assert one.status_code == 200 and "the model server said no" in one.text
