"""Inspect AI logs out and in (docs/interop.md): a partition run here exported to `.eval`, read by inspect_ai's own
`read_eval_log`, imported back (`runner: replay` over the log, and the `inspect_log` adapter) and scored the same."""
import json

import pytest

from tests.helpers.cli import cli_in_process
from tests.helpers.configs import TOOLUSE, tooluse_benchmark

inspect_log = pytest.importorskip("inspect_ai.log")

# a scripted model: t17 calls a tool then answers right, t29 answers right, t03 answers wrong, the rest have no
# script (error rows): verdicts of every kind, and tool calls to carry as Inspect events
SCRIPT = """
  scripted:
    runner: echo
    options:
      reply: script
      script:
        - sample_id: t17
          turns: [{content: null, tool_calls: [{name: weather.current, arguments: {city: Nairobi}}]}, {content: Nairobi}]
        - {sample_id: t29, turns: [{content: "4"}]}
        - {sample_id: t03, turns: [{content: "42"}]}
"""


def verdicts(cli, split, model):
    out = cli("sql", "--json", f"SELECT sample_id, score, correct, status FROM judgements WHERE "
                               f"benchmark_split = '{split}' AND model = '{model}' AND metric = 'exact_match' "
                               f"ORDER BY sample_id")
    assert out.exit_code == 0, out.output
    return [(r["sample_id"], r["score"], r["correct"], r["status"]) for r in json.loads(out.output)]


def metric(cli, split, model):
    out = cli("sql", "--json", f"SELECT value, n, n_errors FROM metrics WHERE benchmark_split = '{split}' AND "
                               f"model = '{model}' AND metric = 'exact_match' AND slice = 'all'")
    return json.loads(out.output)


def test_a_partition_exported_to_inspect_and_imported_back_scores_the_same(home, write_config, monkeypatch,
                                                                           tmp_path):
    logs = tmp_path / "logs"
    log_path = logs / "tooluse_test__scripted.eval"
    write_config(tooluse_benchmark() + "models:" + SCRIPT + f"""
  theirs:
    runner: replay
    path: {log_path}
""")
    cli = cli_in_process(monkeypatch)
    assert cli("run", "--no-progress", "--model", "scripted").exit_code == 3  # error rows trip the error-rate gate
    out = cli("export", "--format", "inspect", "--split", "tooluse/test", "--model", "scripted", "--out", str(logs))
    assert out.exit_code == 0, out.output
    assert out.output.strip() == str(log_path)

    log = inspect_log.read_eval_log(str(log_path))  # Inspect's own reader
    assert log.status == "success" and log.eval.task == "tooluse/test" and log.eval.model == "scripted"
    assert log.eval.dataset.samples == 31 and len(log.samples) == 31
    by = {s.id: s for s in log.samples}
    t17 = by["t17"]
    assert t17.target == "Nairobi" and t17.input[0].text == "Which is warmer right now, Nairobi or Tokyo?"
    assert [m.role for m in t17.messages] == ["user", "assistant", "tool", "assistant"]
    assert t17.messages[1].tool_calls[0].function == "weather.current"
    assert t17.messages[1].tool_calls[0].arguments == {"city": "Nairobi"}
    assert t17.output.completion == "Nairobi"
    assert t17.scores["exact_match"].value == 1.0 and t17.scores["exact_match"].metadata["correct"] is True
    assert [e.event for e in t17.events] == ["model", "tool", "model"]
    tool = t17.events[1]
    assert tool.function == "weather.current" and json.loads(tool.result)["temp_c"] == 24
    assert by["t03"].scores["exact_match"].value == 0.0 and by["t03"].output.completion == "42"
    assert by["t01"].error.message == "echo script has no turns for sample t01"
    score, = log.results.scores
    assert score.name == "exact_match" and score.metrics["mean"].value == pytest.approx(2 / 31)
    assert score.metrics["ci_low"].value < 2 / 31 < score.metrics["ci_high"].value
    assert log.results.total_samples == 31 and log.results.completed_samples == 3
    assert log.eval.metadata["evalpipe"]["fingerprints"]["dataset"]

    # imported back: the log's outputs replayed on the same split, scored by our metric, beside the original
    assert cli("run", "--no-progress", "--model", "theirs").exit_code == 3
    assert verdicts(cli, "tooluse/test", "theirs") == verdicts(cli, "tooluse/test", "scripted")
    assert metric(cli, "tooluse/test", "theirs") == metric(cli, "tooluse/test", "scripted")
    assert metric(cli, "tooluse/test", "theirs")[0]["value"] == pytest.approx(2 / 31)
    tools = cli("sql", "--json", "SELECT model, name, fixture_hit FROM tool_calls ORDER BY model")
    assert [(r["model"], r["name"], r["fixture_hit"]) for r in json.loads(tools.output)] == [
        ("scripted", "weather.current", True), ("theirs", "weather.current", True)]
    compare = cli("compare", "scripted", "theirs", "--split", "tooluse/test")
    assert compare.exit_code == 0, compare.output  # McNemar over the same samples: they never disagree
    assert "McNemar (exact): no disagreements" in compare.output

    # the inspect_log adapter: the log alone as the benchmark (its samples, targets), the replayed outputs scored
    write_config(f"""benchmarks:
  their_task:
    adapter: inspect_log
    splits: {{test: {{path: {log_path}}}}}
    metrics: [exact_match]
models:
  theirs:
    runner: replay
    path: {log_path}
""")
    assert cli("run", "--no-progress", "--model", "theirs").exit_code == 3
    imported = [(s, sc, c, st) for s, sc, c, st in verdicts(cli, "their_task/test", "theirs")]
    assert [v[1:] for v in imported] == [v[1:] for v in verdicts(cli, "tooluse/test", "scripted")]
    assert metric(cli, "their_task/test", "theirs")[0]["value"] == pytest.approx(2 / 31)


def test_a_missing_or_broken_log_is_a_one_line_error(home, write_config, monkeypatch, tmp_path):
    bad = tmp_path / "bad.eval"
    bad.write_text("not a zip")
    write_config(tooluse_benchmark() + f"models:\n  gone: {{runner: replay, path: {tmp_path / 'gone.eval'}}}\n"
                 f"  bad: {{runner: replay, path: {bad}}}\n")
    cli = cli_in_process(monkeypatch)
    out = cli("run", "--no-progress", "--model", "gone")
    assert "Inspect log" in out.output and "gone.eval not found" in out.output
    out = cli("run", "--no-progress", "--model", "bad")
    assert "bad.eval: not a readable Inspect eval log" in out.output


def test_export_needs_out_for_artifacts_only_and_a_materialized_partition(home, write_config, monkeypatch, tmp_path):
    write_config(tooluse_benchmark() + "models:\n  echo: {runner: echo}\n")
    cli = cli_in_process(monkeypatch)
    out = cli("export", "--split", "tooluse/test", "--model", "echo")
    assert out.exit_code == 2 and "--format artifacts needs --out DIR" in out.output
    out = cli("export", "--format", "inspect", "--split", "tooluse/test", "--model", "echo",
              "--out", str(tmp_path / "l"))
    assert out.exit_code == 2 and "materialize the partition first" in out.output and not (tmp_path / "l").exists()


def test_a_log_written_by_inspect_itself_reads_back(tmp_path):
    """Shaped as `inspect eval` writes them: integer ids, text input, a list target, two epochs, a failed sample, a
    tool call in the messages (no evalpipe run needed: the reading side alone)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalError, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser, ModelOutput
    from inspect_ai.tool import ToolCall

    from evalpipe.interop.inspect_log import read_outputs, read_samples

    call = ToolCall(id="c1", function="search", arguments={"q": "Paris"})
    samples = [
        EvalSample(id=1, epoch=1, input="Capital of France?", target=["Paris", "paris"],
                   messages=[ChatMessageUser(content="Capital of France?"),
                             ChatMessageAssistant(content="", tool_calls=[call]),
                             ChatMessageTool(content="Paris is...", tool_call_id="c1", function="search"),
                             ChatMessageAssistant(content="Paris")],
                   output=ModelOutput.from_content("mockllm/model", "Paris")),
        EvalSample(id=1, epoch=2, input="Capital of France?", target=["Paris", "paris"],
                   output=ModelOutput.from_content("mockllm/model", "Lyon")),
        EvalSample(id=2, epoch=1, input="2+3?", target="5", output=ModelOutput(model="mockllm/model"),
                   error=EvalError(message="RateLimitError: 429", traceback="", traceback_ansi="")),
    ]
    path = tmp_path / "2026-01-01T00-00-00_task_abc.eval"
    write_eval_log(EvalLog(status="success", samples=samples, eval=EvalSpec(
        created="2026-01-01T00:00:00+00:00", task="task", dataset=EvalDataset(name="d", samples=2),
        model="mockllm/model", config=EvalConfig(epochs=2))), str(path))

    outputs = read_outputs(path)
    assert set(outputs) == {"1", "1#epoch2", "2"}  # epoch 2 answers our row `1#epoch2`
    assert outputs["1"]["output"] == "Paris" and outputs["1"]["tool_calls"] == [{"name": "search",
                                                                                 "arguments": {"q": "Paris"}}]
    assert outputs["1#epoch2"]["output"] == "Lyon" and outputs["2"]["error"] == "RateLimitError: 429"
    rows = read_samples(path)
    assert [(r["id"], r["input"], r["target"]) for r in rows] == [("1", "Capital of France?", "Paris"),
                                                                  ("2", "2+3?", "5")]
    assert rows[0]["metadata"] == {"inspect_targets": ["Paris", "paris"]}


def test_an_epoch_row_is_inspects_sample_and_epoch():
    from evalpipe.interop.inspect_log import eval_sample

    record = {"sample_id": "t1#epoch3", "prompt": [{"role": "user", "content": "q"}], "target": "a",
              "status": "ok", "raw_output": "a", "prediction": "a",
              "usage": {"input_tokens": 5, "output_tokens": 2, "cost": 0.01},
              "scores": {"exact_match": {"score": None, "reason": "no target"}}}
    s = eval_sample(record, "m")
    assert (s.id, s.epoch) == ("t1", 3) and s.output.completion == "a"
    assert s.model_usage["m"].total_tokens == 7 and s.model_usage["m"].total_cost == 0.01
    assert s.scores is None and s.metadata["evalpipe_unscored"] == {"exact_match": "no target"}


def _scored_log(path):
    """A log as `inspect eval` writes it with scorer match(): C/I values, accuracy and stderr in its results, made
    with inspect_ai's own types and writer; sample 3 has a list target (any item is right)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalMetric, EvalResults, EvalSample, EvalScore, EvalSpec
    from inspect_ai.log import write_eval_log
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import SampleScore, Score, accuracy, stderr

    rows = [("1", "2+2?", "4", "4", "C"), ("2", "Capital of France?", "Paris", "paris, I think", "I"),
            ("3", "A primary colour?", ["red", "blue"], "blue", "C"), ("4", "3*3?", "9", "6", "I")]
    samples = [EvalSample(id=i, epoch=1, input=q, target=t, output=ModelOutput.from_content("m", out),
                          scores={"match": Score(value=v, answer=out)}) for i, q, t, out, v in rows]
    ss = [SampleScore(score=s.scores["match"]) for s in samples]
    results = EvalResults(total_samples=4, completed_samples=4, scores=[EvalScore(
        name="match", scorer="match", scored_samples=4,
        metrics={"accuracy": EvalMetric(name="accuracy", value=accuracy()(ss)),
                 "stderr": EvalMetric(name="stderr", value=stderr()(ss))})])
    log = EvalLog(status="success", eval=EvalSpec(created="2026-01-01T00:00:00+00:00", task="t", model="m",
                                                  config=EvalConfig(), dataset=EvalDataset(name="t", samples=4)),
                  samples=samples, results=results)
    write_eval_log(log, str(path), format="eval")
    return log


def test_an_import_keeps_the_logs_own_scores_beside_ours(home, write_config, monkeypatch, tmp_path):
    log = _scored_log(tmp_path / "their.eval")
    write_config(f"""
benchmarks:
  theirs:
    adapter: inspect_log
    splits: {{test: {{path: {tmp_path / 'their.eval'}}}}}
    metrics: [exact_match]
models:
  replayed: {{runner: replay, path: {tmp_path / 'their.eval'}}}
  parrot: {{runner: echo}}
""")
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--no-progress", "--split", "theirs/test", "--model", "replayed")
    assert r.exit_code == 0, r.output
    out = cli("sql", "--json", "SELECT metric, value, stderr, higher_is_better FROM metrics WHERE slice = 'all' "
                               "AND model = 'replayed' ORDER BY metric")
    rows = {m["metric"]: m for m in json.loads(out.output)}
    own = log.results.scores[0].metrics
    assert rows["inspect_scores_match"]["value"] == pytest.approx(own["accuracy"].value) == 0.5
    assert rows["inspect_scores_match"]["stderr"] == pytest.approx(own["stderr"].value)
    assert rows["inspect_scores_match.accuracy"]["value"] == pytest.approx(own["accuracy"].value)
    assert rows["inspect_scores_match"]["higher_is_better"] is True
    assert rows["exact_match"]["value"] == pytest.approx(0.25)  # our metric beside theirs, not instead of it
    v = cli("sql", "--json", "SELECT sample_id, score FROM judgements WHERE metric = 'inspect_scores' AND "
                             "model = 'replayed' ORDER BY sample_id")
    assert [(x["sample_id"], x["score"]) for x in json.loads(v.output)] == \
        [("1", 1.0), ("2", 0.0), ("3", 1.0), ("4", 0.0)]  # the list target: scored as the log's scorer scored it
    p = cli("sql", "--json", "SELECT metadata FROM prompts WHERE sample_id = '3' AND model = 'replayed'")
    assert json.loads(json.loads(p.output)[0]["metadata"])["inspect_targets"] == ["red", "blue"]


def _tool_log(path, task="agentic", model="mockllm/model", ids=("1", "2")):
    """A log with tool calls and their results, as `inspect eval` writes an agent's: sample 1 calls search (its
    result), then calculator (an error), then answers; sample 2 answers at once. Scored by match()."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser, ModelOutput
    from inspect_ai.scorer import Score
    from inspect_ai.tool import ToolCall, ToolCallError

    a, b = ids
    c1 = ToolCall(id="c1", function="search", arguments={"q": "tallest mountain"})
    c2 = ToolCall(id="c2", function="calculator", arguments={"expr": "8848/0"})
    samples = [
        EvalSample(id=a, epoch=1, input="Tallest mountain?", target="Everest",
                   messages=[ChatMessageUser(content="Tallest mountain?"),
                             ChatMessageAssistant(content="", tool_calls=[c1]),
                             ChatMessageTool(content="Mount Everest, 8848 m", tool_call_id="c1", function="search"),
                             ChatMessageAssistant(content="Checking", tool_calls=[c2]),
                             ChatMessageTool(content="", tool_call_id="c2", function="calculator",
                                             error=ToolCallError("parsing", "division by zero")),
                             ChatMessageAssistant(content="Everest")],
                   output=ModelOutput.from_content(model, "Everest"), scores={"match": Score(value="C")}),
        EvalSample(id=b, epoch=1, input="2+2?", target="4",
                   messages=[ChatMessageUser(content="2+2?"), ChatMessageAssistant(content="5")],
                   output=ModelOutput.from_content(model, "5"), scores={"match": Score(value="I")}),
    ]
    write_eval_log(EvalLog(status="success", samples=samples, eval=EvalSpec(
        created="2026-01-01T00:00:00+00:00", task=task, dataset=EvalDataset(name=task, samples=2), model=model,
        config=EvalConfig())), str(path), format="eval")


def test_tool_results_round_trip_import_replay_export(home, write_config, monkeypatch, tmp_path):
    """import -> replay -> export -> inspect_ai's read_eval_log: each tool call with its result (or error), the
    scores kept, in the messages and the events `inspect view` shows."""
    _tool_log(tmp_path / "agent.eval")
    write_config(f"""
benchmarks:
  agentic:
    adapter: inspect_log
    splits: {{test: {{path: {tmp_path / 'agent.eval'}}}}}
    metrics: [exact_match]
models:
  replayed: {{runner: replay, path: {tmp_path / 'agent.eval'}}}
""")
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--no-progress", "--model", "replayed")
    assert r.exit_code == 0, r.output
    calls = cli("sql", "--json", "SELECT turn, name, result, error FROM tool_calls ORDER BY turn")
    assert [(c["turn"], c["name"], c["result"], c["error"]) for c in json.loads(calls.output)] == [
        (0, "search", "Mount Everest, 8848 m", None), (1, "calculator", "", "division by zero")]
    out = cli("export", "--format", "inspect", "--split", "agentic/test", "--model", "replayed",
              "--out", str(tmp_path / "out"))
    assert out.exit_code == 0, out.output
    log = inspect_log.read_eval_log(out.output.strip())
    s1 = {s.id: s for s in log.samples}["1"]
    assert [m.role for m in s1.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert s1.messages[1].tool_calls[0].arguments == {"q": "tallest mountain"}
    assert s1.messages[2].tool_call_id == "c1" and s1.messages[2].text == "Mount Everest, 8848 m"
    assert s1.messages[4].tool_call_id == "c2"
    tools = [e for e in s1.events if e.event == "tool"]
    assert [(t.function, t.arguments, t.result) for t in tools] == [
        ("search", {"q": "tallest mountain"}, "Mount Everest, 8848 m"), ("calculator", {"expr": "8848/0"}, "")]
    assert tools[0].error is None and tools[1].error.message == "division by zero"
    assert [e.event for e in s1.events] == ["model", "tool", "model", "tool", "model"]
    assert s1.output.completion == "Everest"
    assert s1.scores["exact_match"].value == 1.0 and s1.scores["inspect_scores"].value == 1.0
    assert {s.id: s.scores["inspect_scores"].value for s in log.samples} == {"1": 1.0, "2": 0.0}


def test_a_folder_of_logs_is_imported_in_one_command(home, write_config, monkeypatch, tmp_path):
    """An `inspect eval-set` log dir: two logs of one task (disjoint samples) and one of another task; the folder is
    the split's and the replay's `path:`, `inspect_task:` picks the task."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _tool_log(logs / "a.eval", ids=("1", "2"))
    _tool_log(logs / "b.eval", ids=("3", "4"))
    _tool_log(logs / "c.eval", task="other", ids=("1", "2"))
    (logs / "logs.json").write_text("{}")  # eval-set's own index beside the logs
    write_config(f"""
benchmarks:
  agentic:
    adapter: inspect_log
    splits: {{test: {{path: {logs}}}}}
    options: {{inspect_task: agentic}}
    metrics: [exact_match]
models:
  replayed: {{runner: replay, path: {logs}, options: {{inspect_task: agentic}}}}
  unchosen: {{runner: replay, path: {logs}}}
""")
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--no-progress", "--model", "replayed")
    assert r.exit_code == 0, r.output
    out = cli("sql", "--json", "SELECT sample_id, score FROM judgements WHERE metric = 'exact_match' "
                               "ORDER BY sample_id")
    assert [(x["sample_id"], x["score"]) for x in json.loads(out.output)] == [
        ("1", 1.0), ("2", 0.0), ("3", 1.0), ("4", 0.0)]
    r = cli("run", "--no-progress", "--model", "unchosen")
    assert r.exit_code != 0 and f"{logs} holds logs of 2 tasks (agentic, other); choose one with " \
        "`inspect_task: <task>` beside `path:`" in r.output


def test_a_log_streamed_into_duckdb_holds_what_inspects_reader_reads(tmp_path):
    """evalpipe/interop/inspect_stream.py: each sample member read on its own, the same ids, outputs, errors and
    score values (Inspect's value_to_float) as read_eval_log; a log over the size cap is refused before reading."""
    import duckdb

    from evalpipe.core.file_caps import FileCap, FileTooLarge
    from evalpipe.interop.inspect_stream import import_log

    path = tmp_path / "agent.eval"
    _tool_log(path)
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    assert import_log(path, con) == 2
    assert import_log(path, con) == 2  # again: the log's rows replaced, not added
    rows = con.execute("SELECT id, epoch, target, output FROM inspect_samples ORDER BY id").fetchall()
    theirs = inspect_log.read_eval_log(str(path))
    assert rows == [(str(s.id), s.epoch, s.target, s.output.completion) for s in theirs.samples]
    assert con.execute("SELECT id, scorer, value FROM inspect_scores ORDER BY id").fetchall() == [
        ("1", "match", 1.0), ("2", "match", 0.0)]
    with pytest.raises(FileTooLarge):
        import_log(path, con, FileCap(100, "max_file_mb"))
