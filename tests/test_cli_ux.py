"""The CLI habits of issue 14: `list` (and `--tasks list`), `compare`, an ad-hoc `--model <litellm string>`
against a loopback server, `--limit` runs kept apart, `summarize --format`, the teaching lines, progress."""
import io
import json

import pandas as pd
import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from tests.helpers.cli import cli_in_process

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    description: Eight one-word questions.
    splits:
      extra: {path: {repo}/data/smoke/test.jsonl}
    options:
      columns: {prompt: question, target: answer, id: id}
      slice_by: [category]
    metrics: [exact_match, includes]
models:
  perfect: {runner: echo, reply: target, description: Always right.}
  parrot: {runner: echo, description: Repeats the question.}
default_models: [perfect]
"""


@pytest.fixture
def cli(home, write_config, monkeypatch):
    write_config(CONFIG)
    return cli_in_process(monkeypatch)


def test_list_shows_benchmarks_with_counts_and_models(cli):
    r = cli("list", "--format", "json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    b = data["benchmarks"][0]
    assert (b["benchmark_split"], b["samples"], b["metrics"], b["description"]) == (
        "smoke/extra", 8, "exact_match, includes", "Eight one-word questions.")
    assert {m["model"]: m["description"] for m in data["models"]} == {"perfect": "Always right.",
                                                                      "parrot": "Repeats the question."}
    t = cli("list")
    assert "smoke/extra" in t.output and "Always right." in t.output and "litellm model string" in t.output
    tasks = cli("run", "--tasks", "list")  # lm-evaluation-harness habit
    assert tasks.exit_code == 0 and "smoke/extra" in tasks.output and "perfect" not in tasks.output


@pytest.mark.slow
def test_limited_runs_are_kept_apart_and_compare(cli):
    full = cli("run", "--model", "perfect", "--model", "parrot", "--no-progress")
    assert full.exit_code == 0, full.output
    lim = cli("run", "--model", "parrot", "--limit", "2", "--no-progress")
    assert lim.exit_code == 0, lim.output
    assert "smoke/extra       | parrot@limit2" in lim.output  # its own partition in the run's summary
    from evalpipe.cli.main import _warehouse

    wh = _warehouse()
    n = wh.query("SELECT model, n FROM metrics WHERE slice = 'all' AND metric = 'exact_match' ORDER BY model")
    assert dict(zip(n["model"], n["n"])) == {"parrot": 8, "parrot@limit2": 2, "perfect": 8}  # full results intact
    board = wh.query("SELECT DISTINCT model FROM leaderboard")["model"].tolist()
    assert sorted(board) == ["parrot", "perfect"]  # not ranked
    s = json.loads(cli("summarize", "--format", "json").output)
    assert {x["model"] for x in s} == {"parrot", "perfect"}
    s = json.loads(cli("summarize", "--format", "json", "--include-limited").output)
    assert "parrot@limit2" in {x["model"] for x in s}
    assert "parrot@limit2" in cli("run", "--model", "parrot", "--limit", "2", "--include-limited",
                                  "--no-progress").output.split("leaderboard")[1]

    csv = cli("summarize", "--format", "csv")
    df = pd.read_csv(io.StringIO(csv.output))
    assert list(df.columns[:4]) == ["benchmark_split", "model", "metric", "slice"] and len(df) == 4
    table = cli("summarize", "--format", "table")
    assert "0.0000" in table.output and "1.0000" in table.output and "|" not in table.output

    c = cli("compare", "perfect", "parrot", "--format", "json")
    assert c.exit_code == 0, c.output
    cmp = json.loads(c.output)
    assert (cmp["metric"], cmp["n_paired"], cmp["only_a"], cmp["only_b"]) == ("exact_match", 8, 8, 0)
    assert cmp["mcnemar_p"] == pytest.approx(2 * 0.5 ** 8)
    t = cli("compare", "perfect", "parrot", "--split", "smoke/extra")
    assert "McNemar (exact): p = 0.0078, significant at 5%" in t.output and "perfect right, parrot wrong (8" in t.output
    bad = cli("compare", "perfect", "nobody")
    assert bad.exit_code == 2 and "pick a split" in bad.output


@pytest.mark.slow
def test_adhoc_litellm_model_against_a_loopback_server(cli, monkeypatch):
    monkeypatch.setenv("MOCK_KEY", "not-a-real-key")
    answers = {"What is the capital of France? Answer with one word.": "The capital of France is Paris."}
    with serve_in_thread(MockLLM(answers=answers)) as (mock, url):
        r = cli("run", "--model", "openai/mock-model", "--api-base", url, "--api-key-env", "MOCK_KEY",
                "--limit", "3", "--no-progress")
        assert r.exit_code == 0, r.output
        assert mock.requests == 3
    assert "adhoc:openai/mock-model@limit3" in r.output
    from evalpipe.cli.main import _warehouse

    m = _warehouse().query("SELECT metric, value, n FROM metrics WHERE slice = 'all' AND model = ?",
                           ["adhoc:openai/mock-model@limit3"])
    got = dict(zip(m["metric"], m["value"]))
    assert got["exact_match"] == 0.0 and got["includes"] == pytest.approx(1 / 3)  # Paris is in the reply
    # the official/lenient gap is explained in two lines
    lines = [ln for ln in r.output.splitlines() if "lenient includes" in ln]
    assert lines and "official exact_match 0.000 (0/3)" in lines[0] and "(1/3)" in lines[0]
    assert "does not follow the benchmark's answer format" in r.output
    assert "evalpipe view --web" in r.output and "evalpipe sql" in r.output and "models:" in r.output
    e = cli("run", "--model", "perfect", "--api-key-env", "MOCK_KEY")
    assert e.exit_code == 2 and "only apply to an ad-hoc --model" in e.output
    bad = cli("run", "--model", "nonesuch")
    assert bad.exit_code == 2 and "unknown model 'nonesuch'" in bad.output


def test_progress_counts_samples_across_partitions_rate_eta_errors():
    from evalpipe.cli.progress import PlainProgress, SampleProgress, fmt_duration, reporter

    t = [0.0]
    seen = []
    p = SampleProgress(render=lambda label, pr: seen.append(pr.line()), clock=lambda: t[0])
    p.sample("a/b", "m1", 0, 10)
    p.sample("a/b", "m2", 0, 30)
    t[0] = 10.0
    p.sample("a/b", "m1", 10, 10, errors=2)
    p.sample("a/b", "m2", 10, 30, errors=1)
    assert (p.done, p.total, p.errors, p.partitions) == (20, 40, 3, 2)
    assert p.rate() == pytest.approx(2.0) and p.eta_s() == pytest.approx(10.0)
    assert "20/40 samples | 2.0/s | ETA 0:10 | 3 error(s) | 2 partition(s)" in p.line()
    p.step(1, 4, "a/b x m3 failed: boom")
    assert "1 failed run(s)" in p.line() and seen
    assert fmt_duration(3725) == "1:02:05" and fmt_duration(None) == "-"
    from evalpipe.cli.progress import fmt_rate

    assert (fmt_rate(2.0), fmt_rate(0.05), fmt_rate(None)) == ("2.0/s", "3.0/min", "-/s")
    out = io.StringIO()
    with PlainProgress(out, every_s=0) as pp:
        pp.sample("a/b", "m", 1, 2)
    assert out.getvalue().startswith("... a/b x m: 1/2 samples")
    assert type(reporter(enabled=True, stream=io.StringIO())).__name__ == "PlainProgress"  # not a TTY
    assert type(reporter(enabled=False)).__name__ == "NoProgress"


def test_a_partitions_progress_reaches_its_listener_at_most_every_interval_and_always_at_the_end():
    """The rollouts asset reports every sample; the listener hears the first, then at most one per interval, and
    the last one (done == total) whenever it comes, with its error count."""
    from evalpipe.pipeline import sample_progress

    now = [100.0]
    heard = []
    sample_progress.listen("s|m", lambda d, t, e=None: heard.append((d, t, e)))
    try:
        report = sample_progress.reporter("s|m", interval_s=0.05, clock=lambda: now[0])
        for done in range(1, 1001):  # 1000 samples within one interval: the first and the last
            report(done, 1000, done // 10)
        assert heard == [(1, 1000, 0), (1000, 1000, 100)]
        heard.clear()
        report = sample_progress.reporter("s|m", interval_s=0.05, clock=lambda: now[0])
        for done in range(1, 11):  # one sample every 30 ms: every other one, and the last
            now[0] += 0.03
            report(done, 10)
        assert [d for d, _, _ in heard] == [1, 3, 5, 7, 9, 10]
    finally:
        sample_progress.unlisten("s|m")


def test_render_wraps_long_text_and_prints_missing_values_the_same():
    from evalpipe.cli.view import MISSING, render

    df = pd.DataFrame([{"model": "m", "value": float("nan"), "note": "word " * 60}])
    out = render(df, "table", width=60)
    assert all(len(line) <= 60 for line in out.splitlines()) and len(out.splitlines()) > 3
    assert f" {MISSING} " in out or out.split("\n")[1].strip().split()[1] == MISSING
    from evalpipe.viewer.app import MISSING as WEB_MISSING, fmt

    assert WEB_MISSING == MISSING and fmt(None) == fmt(float("nan")) == MISSING


@pytest.mark.slow
def test_errors_so_far_reach_the_progress_from_a_real_run(home, write_config):
    """driver -> rollouts asset -> evalpipe.pipeline.sample_progress -> launcher -> SampleProgress, in this process."""
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from evalpipe.cli.progress import SampleProgress
    from resources import ModelRunnerResource

    write_config(CONFIG.replace("default_models: [perfect]", """  unreachable:
    runner: litellm
    model: openai/nothing
    api_base: http://127.0.0.1:9/v1
default_models: [perfect]"""))
    seen = []
    p = SampleProgress(render=lambda label, pr: seen.append((pr.done, pr.total, pr.errors)))
    res = evaluate(load_config(), ["smoke/extra"], ["perfect", "unreachable"], on_sample=p.sample,
                   on_progress=p.step, resources={"model_runner": ModelRunnerResource(max_retries=0)})
    assert res.leaderboard_ok
    assert (p.done, p.total, p.errors) == (16, 16, 8)  # 8 samples each; every call to port 9 fails
    assert any(e and d < 16 for d, _, e in seen)  # errors were counted while the run was going


def test_keep_terminal_restores_stdout_after_a_step_leaves_it_redirected(tmp_path):
    """What concurrent in-process runs can do to fds 1/2 (a step's log capture left in place) is undone."""
    import os

    from evalpipe.cli.progress import keep_terminal

    before = os.fstat(1).st_ino, os.fstat(2).st_ino
    log = open(tmp_path / "step.log", "w")
    with keep_terminal() as term:
        os.dup2(log.fileno(), 1)  # a capture that was never undone
        os.dup2(log.fileno(), 2)
        assert os.fstat(term.fileno()).st_ino == before[1]  # the progress display still writes to the old fd 2
    log.close()
    assert (os.fstat(1).st_ino, os.fstat(2).st_ino) == before
