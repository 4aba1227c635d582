"""`evalpipe validate-sharding`: N=4 shards equal one pass on the shipped GAIA sample with the echo runner,
the replay runner and a litellm model against the loopback mock server; planted differences turn the
corresponding report fields false."""
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from evalpipe.repro.validate_sharding import REPORT_FIELDS, collect, compare, validate

REPO = Path(__file__).resolve().parents[1]
SPLIT = "gaia/validation"  # the shipped GAIA-format sample: 29 questions, levels 1-3, attachments; GAIA scorer


def _config(write_config, models: str) -> Path:
    return write_config(f"""
benchmarks:
  gaia:
    adapter: gaia
    splits: [validation]
    options: {{path: {REPO}/data/gaia_sample}}
    metrics: [gaia]
models:
{models}
""")


def _samples():
    from evalpipe.benchmarks import adapter_for
    from evalpipe.project import load_config

    return list(adapter_for(load_config().split(SPLIT)).load())


def _assert_ok(report):
    assert tuple(report) == REPORT_FIELDS  # exactly these fields, in this order
    assert report["ok"], report
    assert report["num_shards"] == 4 and sum(report["shard_sizes"]) == 29 and all(report["shard_sizes"])
    assert report["duplicates"] == [] and report["missing"] == []
    assert report["per_example_mismatches"] == [] and report["metric_diffs"] == []
    assert all(len(report[k]) == 64 for k in ("dataset_sha256", "runner_fingerprint", "model_fingerprint"))


def test_cli_validate_sharding_echo_reports_ok(tmp_path, write_config, home):
    cfg = _config(write_config, "  fixed: {runner: echo, reply: fixed, text: Paris}")
    report_path = tmp_path / "report.json"
    env = {**os.environ, "EVALS_CONFIG": str(cfg)}
    p = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "validate-sharding", "--dataset", SPLIT,
                        "--model", "fixed", "--runner", "echo", "--shards", "4", "--report", str(report_path)],
                       env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith(f"ok: {SPLIT} x fixed, 4 shards")
    report = json.loads(report_path.read_text())
    _assert_ok(report)


def test_replay_runner_n4_reports_ok(tmp_path, write_config, home):
    preds = tmp_path / "preds.jsonl"
    _config(write_config, f"  replayed: {{runner: replay, path: {preds}}}")
    # half right, half wrong: the metrics to compare are not trivial
    preds.write_text("".join(json.dumps({"sample_id": s.id, "output": f"FINAL ANSWER: {s.target if i % 2 else 'nope'}"})
                             + "\n" for i, s in enumerate(_samples())))
    report = validate(SPLIT, "replayed", 4, workdir=tmp_path / "w")
    _assert_ok(report)


def test_litellm_against_the_mock_server_n4_reports_ok(tmp_path, write_config, home, monkeypatch):
    monkeypatch.setenv("MOCK_KEY", "not-a-real-key")
    _config(write_config, "  x: {runner: echo}")
    from evalpipe.benchmarks import adapter_for
    from evalpipe.project import load_config

    adapter = adapter_for(load_config().split(SPLIT))
    answers = {adapter.build_messages(s)[-1]["content"]: f"FINAL ANSWER: {s.target}"
               for i, s in enumerate(_samples()) if i % 3}  # two thirds right; the rest "answer: <prompt>"
    with serve_in_thread(MockLLM(answers=answers)) as (mock, url):
        _config(write_config, f"  mocked: {{runner: litellm, model: openai/mock, api_base: '{url}', api_key_env: MOCK_KEY}}")
        report = validate(SPLIT, "mocked", 4, workdir=tmp_path / "w")
        assert mock.requests == 2 * 29  # baseline + the 4 shards, each sample once
        assert all(b.get("temperature") == 0 and b.get("top_p") == 1 for b in mock.bodies)  # deterministic decoding
    _assert_ok(report)


def test_planted_differences_turn_the_corresponding_fields_false(tmp_path, write_config, home):
    _config(write_config, "  fixed: {runner: echo, reply: fixed, text: Paris}")
    # one shard run at another temperature: its fingerprints differ
    baseline, shards = collect(SPLIT, "fixed", 4, tmp_path / "w", shard_params={1: {"temperature": 0.7}})
    report = compare(baseline, shards, 4)
    assert report["fingerprints_match"] is False and report["ok"] is False
    assert report["coverage_ok"] and report["metrics_match"] and report["gates_ok"]
    assert shards[1].fingerprints["model_fingerprint"] != baseline.fingerprints["model_fingerprint"]

    shards[1].fingerprints = dict(baseline.fingerprints)  # from here on only the planted change differs
    assert compare(baseline, shards, 4)["ok"] is True

    # a duplicated sample: one shard also holds a sample of another shard
    dup = copy.deepcopy(shards)
    donor = next(i for i, s in enumerate(dup) if len(s.rollouts))
    taker = (donor + 1) % 4
    sid = dup[donor].rollouts["sample_id"].iloc[0]
    import pandas as pd

    for attr in ("rollouts", "judgements"):
        extra = getattr(dup[donor], attr)
        setattr(dup[taker], attr, pd.concat([getattr(dup[taker], attr), extra[extra["sample_id"] == sid]],
                                            ignore_index=True))
    r = compare(baseline, dup, 4)
    assert r["duplicates"] == [sid] and r["coverage_ok"] is False and r["ok"] is False
    assert r["fingerprints_match"] is True

    # a missing sample: one shard lost a sample
    miss = copy.deepcopy(shards)
    for attr in ("rollouts", "judgements"):
        df = getattr(miss[donor], attr)
        setattr(miss[donor], attr, df[df["sample_id"] != sid].reset_index(drop=True))
    r = compare(baseline, miss, 4)
    assert r["missing"] == [sid] and r["coverage_ok"] is False and r["metrics_match"] is False and r["ok"] is False
    assert any(m["sample_id"] == sid for m in r["per_example_mismatches"])
    assert any(d["field"] == "n" for d in r["metric_diffs"])

    # a verdict that differs beyond the tolerance, and one within it
    off = copy.deepcopy(shards)
    j = off[donor].judgements
    j.loc[j["sample_id"] == sid, "score"] = j.loc[j["sample_id"] == sid, "score"] + 1e-9
    # (per example only: a non-0/1 score switches the metric's interval method, which is a real difference)
    assert compare(baseline, off, 4)["per_example_mismatches"] == []
    j.loc[j["sample_id"] == sid, "score"] = j.loc[j["sample_id"] == sid, "score"] + 0.5
    r = compare(baseline, off, 4)
    assert r["metrics_match"] is False and r["per_example_mismatches"][0]["field"] == "score"

    # a failed gate in a shard
    gated = copy.deepcopy(shards)
    gated[2].gates_failed = ["shard 2: check error_rate on rollouts failed"]
    assert compare(baseline, gated, 4)["gates_ok"] is False
