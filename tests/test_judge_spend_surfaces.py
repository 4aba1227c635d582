"""Judges' usage shown beside the rollouts' (issue 34) on every surface: the `evalpipe run` summary, the run
folder's summary.json/summary.md, the results file (`--output-path`), `evalpipe export`, `evalpipe summarize
--run-dir`, `evalpipe view` and the web viewer. One priced run (rollouts and an `llm_judge` on the same priced
loopback endpoint), read every way; the judges' figures must add up to the metrics' `judge_*` usage rows."""
import json
from pathlib import Path

import pytest

from benchmarks.mock_server import serve_in_thread
from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark
from tests.helpers.priced import PRICING, PricedMock

VERDICT = '{"rationale": "same answer as the reference", "verdict": "correct"}'
SPLIT, MODEL = "smoke/extra", "m"


class Mock(PricedMock):
    def answer_for(self, prompt: str) -> str:
        return VERDICT


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(the CLI, the `evalpipe run` result, the results file path, the warehouse usage rows), once per module."""
    tmp = tmp_path_factory.mktemp("spend")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\ncompute_logs:\n  module: "
                                       "dagster._core.storage.noop_compute_log_manager\n  class: NoOpComputeLogManager\n")
    with pytest.MonkeyPatch.context() as mp, serve_in_thread(Mock()) as (mock, url):
        mp.setenv("DAGSTER_HOME", str(home))
        mp.delenv("EVALS_WAREHOUSE", raising=False)
        priced = f"{{runner: litellm, model: openai/mock, api_base: {url}, options: {{pricing: {json.dumps(PRICING)}}}}}"
        cfg = tmp / "evals.yaml"
        cfg.write_text(smoke_benchmark(limit=3, metrics="[exact_match, {name: llm_judge, judge: j}]")
                       + f"models:\n  {MODEL}: {priced}\njudges:\n  j: {priced}\n")
        mp.setenv("EVALS_CONFIG", str(cfg))
        cli = cli_in_process(mp)
        out = tmp / "results.json"
        r = cli("run", "--model", MODEL, "--no-progress", "--output-path", str(out))
        assert r.exit_code == 0, r.output
        from evalpipe.cli.helpers import warehouse

        rows = warehouse().query("SELECT metric, value FROM metrics WHERE slice = 'usage'")
        usage = dict(zip(rows["metric"], rows["value"]))
        assert usage["judge_calls"] == 3 and usage["judge_cost_usd_total"] > 0 and usage["cost_usd_total"] > 0
        # the endpoint served 3 rollouts and 3 judge calls: together, what it counted
        assert usage["cost_usd_total"] + usage["judge_cost_usd_total"] == pytest.approx(mock.cost())
        yield cli, r, out, usage, home


def _money(v: float) -> str:
    return f"${round(v, 6)}"


def test_run_summary_prints_judge_cost_beside_the_rollouts(run):
    _, r, _, usage, _ = run
    line = next(x for x in r.output.splitlines() if x.startswith(f"{SPLIT} x {MODEL} spend:"))
    assert _money(usage["cost_usd_total"]) in line.split("; judges")[0]
    assert f"judges 3 call(s), {int(usage['judge_input_tokens_total'])} input / " \
           f"{int(usage['judge_output_tokens_total'])} output tokens, {_money(usage['judge_cost_usd_total'])}" in line


def _run_folder(home: Path) -> Path:
    return next(p.parent for p in (home / "artifacts").rglob("summary.json") if p.parent.name != "latest")


def test_run_folder_summary_carries_judge_usage(run):
    _, _, _, usage, home = run
    folder = _run_folder(home)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["judge_usage"]["calls"] == 3
    assert summary["judge_usage"]["cost_usd"] == pytest.approx(usage["judge_cost_usd_total"])
    assert summary["judge_usage"]["input_tokens"] == usage["judge_input_tokens_total"]
    assert "judges 3 call(s)" in (folder / "summary.md").read_text()


def test_results_file_carries_judge_usage(run):
    _, _, out, usage, _ = run
    entry = json.loads(out.read_text())["partitions"][0]
    assert entry["judge_usage"]["calls"] == 3
    assert entry["judge_usage"]["cost_usd"] == pytest.approx(usage["judge_cost_usd_total"])
    assert entry["judge_usage"]["output_tokens"] == usage["judge_output_tokens_total"]


def test_export_carries_judge_usage(run, tmp_path):
    cli, _, _, usage, _ = run
    r = cli("export", "--split", SPLIT, "--model", MODEL, "--out", str(tmp_path / "x"))
    assert r.exit_code == 0, r.output
    summary = json.loads(next((tmp_path / "x").rglob("summary.json")).read_text())
    assert summary["judge_usage"]["cost_usd"] == pytest.approx(usage["judge_cost_usd_total"])


def test_summarize_run_dir_prints_judge_cost(run):
    cli, _, _, usage, home = run
    r = cli("summarize", "--run-dir", str(_run_folder(home)))
    assert r.exit_code == 0, r.output
    assert f"judges 3 call(s)" in r.output and _money(usage["judge_cost_usd_total"]) in r.output


def test_view_prints_judge_cost_beside_the_rollouts(run):
    cli, _, _, usage, _ = run
    r = cli("view", "--split", SPLIT, "--model", MODEL, "--metric", "llm_judge")
    assert r.exit_code == 0, r.output
    assert "spend: rollouts" in r.output and _money(usage["judge_cost_usd_total"]) in r.output
    d = cli("view", "--split", SPLIT, "--model", MODEL, "--metric", "llm_judge", "--detailed", "--limit", "1")
    assert "judge (llm_judge): 1 call(s), tokens in/out:" in d.output


def test_web_viewer_shows_judge_cost_beside_rollout_cost(run):
    from starlette.testclient import TestClient

    from evalpipe.cli.helpers import warehouse
    from evalpipe.viewer.app import create_app

    _, _, _, usage, _ = run
    client = TestClient(create_app(warehouse()), base_url="http://127.0.0.1:8585")
    page = client.get("/charts", params={"split": SPLIT, "metric": "llm_judge"})
    assert page.status_code == 200
    table = page.text.split('id="spend"')[1].split("</table>")[0]
    assert f"{usage['judge_cost_usd_total']:.6f}" in table and f"{usage['cost_usd_total']:.6f}" in table
    rows = client.get("/charts.json", params={"split": SPLIT, "metric": "llm_judge"}).json()["cost"]
    assert rows[0]["judge_cost_usd"] == pytest.approx(usage["judge_cost_usd_total"])
    sid = warehouse().query("SELECT sample_id FROM judgements WHERE metric = 'llm_judge' LIMIT 1")["sample_id"][0]
    sample = client.get("/sample", params={"split": SPLIT, "model": MODEL, "id": sid})
    assert sample.status_code == 200 and "judge llm_judge: calls" in sample.text


def test_the_spend_lines_of_many_partitions_come_from_one_query():
    """`evalpipe run` prints a spend line per partition; a sweep reads them all in one query, each line its own
    partition's (a pair outside the ones asked for, made by crossing splits and models, is left out)."""
    import duckdb
    import pandas as pd

    from evalpipe.cli.view import partitions_spend

    rows = []
    for split, model, tokens, cost in [("a/x", "m1", 10, 0.5), ("b/y", "m2", 20, 0.25), ("a/x", "m2", 99, 9.0)]:
        rows += [{"benchmark_split": split, "model": model, "metric": "input_tokens_total", "slice": "usage",
                  "value": float(tokens)},
                 {"benchmark_split": split, "model": model, "metric": "output_tokens_total", "slice": "usage",
                  "value": 1.0},
                 {"benchmark_split": split, "model": model, "metric": "cost_usd_total", "slice": "usage",
                  "value": cost},
                 {"benchmark_split": split, "model": model, "metric": "exact_match", "slice": "all", "value": 1.0}]
    metrics = pd.DataFrame(rows)

    class Source:
        queries = 0

        def query(self, sql, params):
            Source.queries += 1
            con = duckdb.connect()
            con.register("metrics", metrics)
            return con.execute(sql, params).df()

    got = partitions_spend(Source(), [("a/x", "m1"), ("b/y", "m2"), ("c/z", "m3")])
    assert Source.queries == 1
    assert got == {("a/x", "m1"): "spend: rollouts 10 input / 1 output tokens, $0.5",
                   ("b/y", "m2"): "spend: rollouts 20 input / 1 output tokens, $0.25"}
