"""The tool-integration report and results lines through `evalpipe run` (issue 22, the harness document): `gates_ok`
and `gates_failed`, fixture misses as a gate, performance budgets as gates (judged in the report), `decoding` and
`seed` filled for a replay run from the harness's `--seed/--temperature` equivalents, and the run's fingerprints on
every line of `tool_integration_results.jsonl`."""
import json
from pathlib import Path

import pytest

import partitions  # noqa: F401  (partition keys come from the test config, read now)

from evalpipe.tooleval import report
from tests.helpers.cli import invoke as cli

REPO = Path(__file__).parents[1]
DATA = REPO / "data" / "tool_integration"


def _dataset(tmp_path: Path, extra_gates: dict) -> Path:
    """The shipped set with more gates in its header (tools.json beside it, as the header names it)."""
    lines = (DATA / "items.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    head["__header__"]["gates"].update(extra_gates)
    out = tmp_path / "data"
    out.mkdir()
    (out / "tools.json").write_text((DATA / "tools.json").read_text())
    (out / "items.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    return out / "items.jsonl"


CONFIG = """
benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {{path: {items}}}
    options:
      tools: {{fixtures: {repo}/data/tool_integration/fixtures, allowlist: {repo}/data/tool_integration/allowlist.txt}}
    metrics: [tool_integration]
models:
  clean: {{runner: replay, path: {repo}/data/tool_integration/predictions_clean_controls.jsonl}}
default_models: [clean]
"""


@pytest.mark.slow
def test_report_gates_budgets_decoding_and_results_lines(home, write_config, tmp_path):
    items = _dataset(tmp_path, {"wall_time_s": {"max": 1e-6}, "latency_s_p95": {"max": 3600}})
    write_config(CONFIG.format(items=items, repo=REPO))
    # the harness's `--seed 42 --temperature 0.0`
    r = cli("run", "--model", "clean", "--no-progress",
            "--runner-option", "params.seed=42", "--runner-option", "params.temperature=0.0")
    assert r.exit_code == 0, r.output  # only non-blocking gates fail: the run passes, the report says why
    assert "fixture_misses: fail" in r.output  # the asset check names the fixture-miss gate
    # the CI gates' asset check warns (the shipped multi-call slice is under the header's F1), never blocks
    assert "tool_integration_ci_gates" in r.output and "teacher_heavy: fail" in r.output

    folder = next((home / "artifacts" / "tool_integration" / "shipped" / "clean").glob("*/tool_integration_report.json")).parent
    rep = json.loads((folder / "tool_integration_report.json").read_text())
    gates = {g["gate"]: g for g in rep["gates"]}
    # the CI gates one partition can judge (runner parity needs two runs), reported beside the gates
    ci = {g["gate"]: g for g in rep["ci_gates"]}
    assert ci["locale_strict_lax"]["status"] == "pass" and ci["teacher_heavy"]["status"] == "fail"
    # fixture misses: the shipped set's deliberate misses (error recovery items) fail the gate
    assert gates["fixture_misses"]["status"] == "fail" and gates["fixture_misses"]["value"] >= 1
    assert rep["metrics"]["fixture_misses"] == gates["fixture_misses"]["value"]
    # budgets: judged against the measured performance
    assert gates["wall_time_s"]["status"] == "fail" and gates["wall_time_s"]["value"] == rep["performance"]["wall_time_s"]
    assert gates["latency_s_p95"]["status"] == "pass" and rep["performance"]["samples_timed"] == 60
    assert rep["gates_ok"] is False and sorted(rep["gates_failed"]) == ["fixture_misses", "wall_time_s"]
    assert gates["controls_with_integration"]["status"] == "pass"
    # decoding and seed: the run's params, for a replay model that configures none
    assert rep["decoding"] == {"temperature": 0.0} and rep["seed"] == 42

    lines = [json.loads(x) for x in (folder / "tool_integration_results.jsonl").read_text().splitlines()]
    assert len(lines) == 60 and [x["id"] for x in lines] == sorted(x["id"] for x in lines)
    rec = next(x for x in lines if x["id"] == "int-recover-01")
    assert [c["error"] for c in rec["tool_trace"]] == ["fixture_miss", None]
    assert rec["scores"]["calls"]["fixture_misses"] == 1 and rec["score"] == 1.0
    for x in lines:
        fp = x["fingerprints"]
        for k in ("dataset_sha256", "tool_registry_sha256", "runner_fingerprint", "model_fingerprint",
                  "rollout_fingerprint", "judge_fingerprint"):
            assert isinstance(fp[k], str) and len(fp[k]) >= 16, (x["id"], k)
        assert fp["model_fingerprint"] == rep["model_fingerprint"] and fp["seed"] == 42


def test_unknown_gate_names_the_known_ones_and_budgets_are_known(tmp_path):
    from evalpipe.core.errors import DataError
    from evalpipe.tooleval.dataset import read_dataset

    ok = _dataset(tmp_path, {"latency_s_mean": {"max": 2.0}, "fixture_misses": {"max": 0, "blocking": True}})
    header, _, _ = read_dataset(ok)
    assert header["gates"]["fixture_misses"]["blocking"] is True
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"__header__": {"gates": {"walltime": {"max": 1}}}}) + "\n"
                   + ok.read_text().splitlines()[1] + "\n")
    with pytest.raises(DataError, match=r"unknown gate\(s\) \['walltime'\].*wall_time_s"):
        read_dataset(bad)


def test_gates_ok_rule():
    g = lambda status, blocking: {"gate": "x", "status": status, "blocking": blocking}  # noqa: E731
    assert report.gates_ok([g("pass", True), g("insufficient", False)])
    assert not report.gates_ok([g("pass", True), g("fail", False)])        # any failed gate
    assert not report.gates_ok([g("insufficient", True)])                   # a blocking gate not judged is not ok
