"""Run artifacts: the folder each materialized partition leaves behind, and `export` writing the same."""
import json
import re

import pandas as pd
import pytest

from evalpipe.runners import register_runner
from evalpipe.runners.base import Runner
from evalpipe.core.types import Generation

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {path: {repo}/data/smoke/test.jsonl, limit: 4}
    options:
      columns: {prompt: question, target: answer, id: id}
      slice_by: [category]
    metrics: [exact_match]
models:
  agent: {runner: test-agent, params: {temperature: 0}}
"""


@register_runner("test-agent", replace=True)
class AgentRunner(Runner):
    """Answers with the ground truth after one tool call; sample s2 fails."""

    name = "test-agent"

    async def generate(self, request):
        if request.sample_id == "s2":
            raise ValueError("the tool server said no")
        return Generation(text=request.target, input_tokens=10, output_tokens=2, cost=0.001, trajectory=[
            {"type": "tool_calls", "tool_calls": [{"id": "c1", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "found it"},
            {"role": "assistant", "content": request.target},
        ])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def evaluated(home, write_config, instance, monkeypatch):
    monkeypatch.setenv("ACME_SERVICE_TOKEN", "tok-0123456789abcdef")  # must not show in the manifest's env
    monkeypatch.setenv("EVALS_SOMETHING", "kept")
    write_config(CONFIG)
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config

    result = evaluate(load_config(), ["smoke/extra"], ["agent"], instance=instance)
    assert result.success, result
    return result.partitions[0].run_id


def test_each_partition_leaves_an_auditable_folder(evaluated, home, instance, tmp_path):
    from dagster import AssetKey

    from evalpipe.store.warehouse import Warehouse

    run_id = evaluated
    folder = home / "artifacts" / "smoke" / "extra" / "agent" / run_id  # one folder per run (`latest` -> newest)
    assert (folder.parent / "latest").resolve() == folder
    ev = instance.get_latest_materialization_event(AssetKey("metrics"))
    assert ev.asset_materialization.metadata["artifacts"].value == str(folder)  # recorded for the UI
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["manifest.json", "samples.jsonl", "events.jsonl", "errors.jsonl", "summary.json", "summary.md"])

    m = json.loads((folder / "manifest.json").read_text())
    assert m["run_id"] == run_id and m["benchmark_split"] == "smoke/extra" and m["model"] == "agent"
    assert m["duration_s"] is not None and m["duration_s"] >= 0 and m["started_at"] < m["finished_at"]
    assert m["config"]["model"]["runner"] == "test-agent" and m["config"]["model"]["params"] == {"temperature": 0}
    assert m["config"]["benchmark_split"]["options"]["limit"] == 4
    assert m["git"]["sha"] is None or re.fullmatch(r"[0-9a-f]{40}", m["git"]["sha"])
    assert m["packages"]["dagster"] and m["packages"]["duckdb"]
    assert m["env"]["EVALS_SOMETHING"] == "kept" and "ACME_SERVICE_TOKEN" not in m["env"]  # not an allowed prefix
    fps = m["fingerprints"]
    assert all(fps[k] for k in ("dataset", "prompts", "prompt_template", "runner", "model", "rollouts"))
    assert m["counts"] == {"samples": 4, "ok": 3, "errors": 1, "from_journal": 0, "input_tokens": 30,
                           "output_tokens": 6, "cost_usd": 0.003}

    samples = _jsonl(folder / "samples.jsonl")
    assert [s["sample_id"] for s in samples] == ["s1", "s2", "s3", "s4"]
    s1 = samples[0]
    assert s1["prompt"] == [{"role": "user", "content": "What is the capital of France? Answer with one word."}]
    assert s1["target"] == "Paris" and s1["prediction"] == "Paris" and s1["metadata"] == {"category": "geography"}
    assert s1["scores"]["exact_match"]["correct"] is True and s1["usage"]["input_tokens"] == 10
    assert samples[1]["status"] == "error" and "the tool server said no" in samples[1]["error"]
    assert samples[1]["scores"]["exact_match"]["score"] == 0.0
    # counts stay integers though the batch holds an error row (pandas reads that column as floats)
    assert all(type(s["usage"][k]) is int for s in samples if s["status"] == "ok" for k in ("input_tokens", "attempts"))

    errors = _jsonl(folder / "errors.jsonl")
    assert [e["sample_id"] for e in errors] == ["s2"] and "the tool server said no" in errors[0]["error"]
    assert type(errors[0]["attempts"]) is int

    events = _jsonl(folder / "events.jsonl")
    e1 = [e for e in events if e["sample_id"] == "s1"]
    assert [e["event_index"] for e in e1] == [0, 1, 2] and e1[0]["type"] == "tool_calls"
    assert e1[1] == {"sample_id": "s1", "event_index": 1, "source": "trajectory", "role": "tool",
                     "tool_call_id": "c1", "content": "found it"}
    e2 = [e for e in events if e["sample_id"] == "s2"]  # no trajectory: the prompt and the error
    assert [e["type"] for e in e2] == ["message", "error"]

    summary = json.loads((folder / "summary.json").read_text())
    wh = Warehouse(home / "warehouse.duckdb").query(
        "select slice, value, n from metrics where metric = 'exact_match' order by slice")
    got = sorted((r["slice"], r["value"], r["n"]) for r in summary["metrics"] if r["metric"] == "exact_match")
    assert got == [tuple(r) for r in wh.itertuples(index=False)]
    md = (folder / "summary.md").read_text()
    assert "# smoke/extra x agent" in md and "## exact_match" in md and "| all | 0.7500 | 4 |" in md
    assert "| category=geography |" in md

    # export (the CLI's `evalpipe export`) writes the same folder anywhere, from the warehouse
    from evalpipe.store.artifacts import write_artifacts
    from evalpipe.core.config import warehouse_path
    from evalpipe.project import load_config

    out = write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config(), out_dir=tmp_path / "x")
    src = home / "artifacts" / "smoke" / "extra" / "agent" / "latest"
    for name in ("samples.jsonl", "events.jsonl", "errors.jsonl"):
        assert (out / name).read_text() == (src / name).read_text()
    # exporting again replaces the folder whole (no stale files survive)
    (out / "stale.txt").write_text("x")
    write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config(), out_dir=out)
    assert not (out / "stale.txt").exists()


def test_export_of_a_partition_never_run_is_a_one_line_error(home, write_config):
    from evalpipe.store.artifacts import write_artifacts
    from evalpipe.core.config import warehouse_path
    from evalpipe.project import load_config
    from evalpipe.core.errors import WarehouseError
    from evalpipe.store.warehouse import Warehouse

    write_config(CONFIG)
    with pytest.raises(WarehouseError, match="materialize the partition first"):
        write_artifacts("smoke/extra", "agent", Warehouse(warehouse_path()), load_config())


def test_artifacts_dir_from_config_and_env(tmp_path, write_config, monkeypatch):
    from evalpipe.store.artifacts import artifacts_enabled, artifacts_root
    from evalpipe.project import load_config

    cfg_path = write_config(CONFIG + "artifacts: {dir: runs/out}\n")
    assert artifacts_root(load_config()) == cfg_path.parent / "runs" / "out"
    monkeypatch.setenv("EVALS_ARTIFACTS", str(tmp_path / "elsewhere"))
    assert artifacts_root(load_config()) == tmp_path / "elsewhere"
    write_config(CONFIG + "artifacts: {enabled: false}\n")
    assert artifacts_enabled(load_config()) is False


# ---- the lines are the records, redacted (issue 15: put together from the stored JSON text, not from records) -----
P = {"benchmark_split": "b/test", "model": "m"}
SECRETS = ("sk-proj-abcdefghijklmnop1234", "another-plain-value-7", 'we"ird\\value77', "hidden-meta-1", "dotless-1",
           "Bearer-abcdefgh12345678", "sk-abcdefghijklmnop99999", "pw-in-trajectory", "tt-in-trace", "hunter22")
CONTENTS = ["What is 2+2?", "Ünïcödé ✓ 中文 🙂", 'quote " and \\ backslash\nnewline\ttab', "ctl \x01 char",
            "my key sk-proj-abcdefghijklmnop1234 here", "env another-plain-value-7 inside", 'we"ird\\value77 too',
            "visit https://bob:hunter22@example.com/x", "K\u212aEY and tokens are fine", "reply Bearer abcdefgh12345678", ""]
METADATA = [None, "{}", '{"category": "alpha"}', '{"nested": {"a": [1, {"b": "ü"}], "f": 1.5e-07}}',
            '{"api_key": "hidden-meta-1"}', '{"token_id": 5}', '{"authorızation": "dotless-1"}', '{"max_tokens": 5}',
            '{"k": "\\u00e9t\\u00e9"}', ' {"spaced" : [1,2]} ', '"just a string"']


def _messages(i):
    c = CONTENTS[i % len(CONTENTS)]
    return [json.dumps([{"role": "user", "content": c}], ensure_ascii=False),
            json.dumps([{"role": "system", "content": "be brief"}, {"role": "user", "content": c}]),  # \u escapes
            '[ {"role" : "user", "content" : ' + json.dumps(c) + '} ]', None, "[]",
            json.dumps([{"type": "custom", "role": "user", "content": c}, {}, {"source": "x", "content": c}])][i % 6]


def _expected_records(prompts, rollouts, judgements):
    """The records the artifact lines encode, as docs/reproducibility.md describes them (what artifacts.py built
    record by record before issue 15)."""
    from evalpipe.store.artifacts import SCORE_FIELDS, _with_tool_calls

    def loads(v, default):
        if isinstance(v, str) and v:
            try:
                return json.loads(v)
            except ValueError:
                return v
        return default

    roll = {r["sample_id"]: r for r in rollouts}
    scores = {}
    for j in judgements:
        scores.setdefault(j["sample_id"], {})[j["metric"]] = {k: j.get(k) for k in SCORE_FIELDS}
    samples, events, errors = [], [], []
    for p in prompts:
        sid, r = p["sample_id"], roll.get(p["sample_id"], {})
        messages = loads(p.get("messages"), [])
        trajectory, tool_calls = loads(r.get("trajectory"), None), loads(r.get("tool_trace"), None)
        samples.append({
            "sample_id": sid, "sample_index": p["sample_index"], "prompt": messages, "target": p.get("target"),
            "metadata": loads(p.get("metadata"), {}), "slices": loads(p.get("slices"), {}),
            "prediction": r.get("prediction"), "raw_output": r.get("raw_output"), "status": r.get("status"),
            "error": r.get("error"), "scores": scores.get(sid, {}),
            "usage": {k: r.get(k) for k in ("input_tokens", "output_tokens", "cost", "latency_s", "attempts", "cached")},
            "finish_reason": r.get("finish_reason"), "final_answer": r.get("prediction"),
            "files": loads(p.get("files"), []), "trajectory": trajectory, "tool_calls": tool_calls})
        if r.get("status") not in (None, "ok"):
            errors.append({"sample_id": sid, "error": r.get("error"), "attempts": r.get("attempts"),
                           "latency_s": r.get("latency_s")})
        if isinstance(trajectory, list) and trajectory:
            source, evs = "trajectory", _with_tool_calls(trajectory, tool_calls)
        else:
            source, evs = "conversation", [{"type": "message", **m} for m in messages]
            if r.get("status") == "ok":
                evs.append({"type": "message", "role": "assistant", "content": r.get("raw_output")})
            elif r.get("status") is not None:
                evs.append({"type": "error", "error": r.get("error")})
        for i, ev in enumerate(evs):
            flat = ev if isinstance(ev, dict) else {"type": "value", "value": ev}
            events.append({"sample_id": sid, "event_index": i, "source": source, **flat})
    return {"samples.jsonl": samples, "events.jsonl": events, "errors.jsonl": errors}


def test_lines_are_the_records_redacted_with_secrets_everywhere(home, tmp_path, monkeypatch):
    """Secrets planted unmasked in the warehouse (prompts, metadata keys and values, replies, errors, trajectories,
    tool traces), with unicode, escapes, JSON in other spellings, missing and duplicate rows, in batches of 4: every
    line is `json.dumps(redact_obj(record))` of its record, and no secret is in any file."""
    import pyarrow.parquet as pq

    from evalpipe.store.artifacts import write_artifacts
    from evalpipe.core.redact import get_redactor
    from evalpipe.store.warehouse import Warehouse, to_arrow

    monkeypatch.setenv("MY_SERVICE_TOKEN", "another-plain-value-7")  # literal secrets (a secret-like env name)
    monkeypatch.setenv("OTHER_SECRET", 'we"ird\\value77')
    n = 30
    prompts = [{"sample_id": f"s{i:02d}", "sample_index": i, "messages": _messages(i),
                "target": None if i % 7 == 0 else CONTENTS[(3 * i) % len(CONTENTS)],
                "metadata": METADATA[i % len(METADATA)], "slices": json.dumps({"category": "ab"[i % 2]}),
                "files": json.dumps(["a.csv", "ü.txt"], ensure_ascii=False) if i % 3 == 0 else None} for i in range(n)]
    rollouts = []
    for i in range(n):
        if i == 5:
            continue  # a sample without a rollout
        status = ["ok", "ok", "error", None][i % 4]
        trajectory = json.dumps([{"role": "user", "content": "q"}, {"role": "tool", "content": "42"}, "plain event",
                                 {"type": "note", "password": "pw-in-trajectory"}]) if i % 9 == 0 else None
        rollouts.append({"sample_id": f"s{i:02d}", "status": status, "fingerprint": f"f{i}",
                         "prediction": CONTENTS[(5 * i) % len(CONTENTS)] if status == "ok" else None,
                         "raw_output": CONTENTS[(7 * i) % len(CONTENTS)] if status == "ok" else None,
                         "error": "boom sk-abcdefghijklmnop99999" if status == "error" and i % 3 else
                         ("plain failure ü" if status == "error" else None),
                         "finish_reason": "stop" if status == "ok" else None, "latency_s": [0.5, 1e-05, 3.0][i % 3],
                         "input_tokens": i, "output_tokens": 2 * i, "cost": [0.0, 0.001, None][i % 3],
                         "attempts": 1 + i % 2, "cached": [True, False, None][i % 3], "trajectory": trajectory,
                         "tool_trace": json.dumps([{"name": "calc", "api_key": "tt-in-trace"}]) if trajectory else None})
    rollouts.insert(4, dict(rollouts[3], prediction="a later row of the same sample wins"))
    judgements = []
    for i in range(n):
        judgements.append({"sample_id": f"s{i:02d}", "metric": "exact_match", "score": [1.0, 0.0, None][i % 3],
                           "correct": [True, False, None][i % 3], "status": "scored", "reason": CONTENTS[i % len(CONTENTS)],
                           "normalized_prediction": "x", "normalized_target": None, "judge_fingerprint": "j1"})
        if i % 4 == 0:
            judgements.append({"sample_id": f"s{i:02d}", "metric": "f1", "score": 0.5, "status": "unscored",
                               "reason": None, "judge_fingerprint": "j2"})
    wh = Warehouse(home / "warehouse.duckdb")
    for table, rows in (("prompts", prompts), ("rollouts", rollouts), ("judgements", judgements)):
        path = wh.partition_file(table, P)  # written as is: the artifacts' own redaction is what is tested
        path.parent.mkdir(parents=True)
        pq.write_table(to_arrow(table, pd.DataFrame(rows), fill=P), path)

    out = write_artifacts("b/test", "m", wh, run={"run_id": "r1"}, out_dir=tmp_path / "art", batch_rows=4)
    r = get_redactor()
    for name, records in _expected_records(prompts, rollouts, judgements).items():
        text = (out / name).read_text(encoding="utf-8")
        assert text.splitlines() == [json.dumps(r.redact_obj(rec), ensure_ascii=False) for rec in records], name
        assert not [s for s in SECRETS if s in text], name
    assert "[REDACTED]" in (out / "events.jsonl").read_text() and "K\u212aEY and tokens" in (out / "samples.jsonl").read_text()
