"""Document 004 (the tool-integration harness, ../shared/design_refs/004_*): its commands and calls as the
document writes them, each one that docs/design_refs.md says works, under evalpipe's names (the flag table of
docs/tools.md, "Coming from the tool-integration harness"). Only names of data that must be local are adapted: the
dataset is the shipped 60-item set, `gpt-xyz` is a model that replays the recorded clean predictions, and the
fixtures folder and prompt wrapper are written from the document's own examples."""
import json
from pathlib import Path

import pytest

from tests.helpers.cli import cli_in_process

REPO = Path(__file__).parents[1]
TI = REPO / "data" / "tool_integration"
CONFIG = f"""benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {{path: {TI}/items.jsonl}}
    options:
      tools: {{fixtures: {TI}/fixtures, allowlist: {TI}/allowlist.txt}}
    metrics: [tool_integration]
models:
  gpt-xyz: {{runner: replay, path: {TI}/predictions_clean_controls.jsonl}}
default_models: [gpt-xyz]
artifacts: {{dir: {{runs}}}}
"""
# the document's Jinja2 wrapper, character for character
WRAPPER_J2 = '{\n  "system": "{{ system }}",\n  "user": "{{ user }}"\n}\n'


@pytest.fixture
def cli(home, write_config, tmp_path, monkeypatch):
    write_config(CONFIG.replace("{runs}", str(tmp_path / "eval")))
    return cli_in_process(monkeypatch)


def test_the_openai_compatible_run_writes_results_and_report(cli, tmp_path):
    wrapper = tmp_path / "eval" / "prompt_wrappers" / "minimal_system_user.j2"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(WRAPPER_J2)
    # "3) Run Evaluation", OpenAI-compatible endpoint: --in/--fixtures are the config's split, --out/--report the
    # run folder's files, --seed/--temperature runner params, --fail-on-fingerprint-mismatch the header's default
    r = cli("run", "--benchmark", "tool_integration", "--model", "gpt-xyz",
            "--runner-option", "params.seed=42", "--runner-option", "params.temperature=0.0",
            "--benchmark-option", "min_eligible_for_gates=15", "--prompt-wrapper", str(wrapper),
            "--run-id", "s0", "--no-progress")
    assert r.exit_code == 0, r.output
    run_dir = tmp_path / "eval" / "tool_integration" / "shipped" / "gpt-xyz" / "s0"
    results = [json.loads(line) for line in (run_dir / "tool_integration_results.jsonl").read_text().splitlines()]
    assert len(results) == 60
    first = results[0]
    assert {"model_output", "tool_trace", "scores"} <= set(first) and first["tool_trace"] is not None
    assert all(t.get("result") is not None for x in results for t in x["tool_trace"])  # the broker's results
    report = json.loads((run_dir / "tool_integration_report.json").read_text())
    assert report["report_version"] == "1.0.0" and report["seed"] == 42
    assert report["decoding"]["temperature"] == 0.0 and report["min_eligible_for_gates"] == 15
    for field in ("dataset_sha256", "tool_registry_sha256", "tokenizer_fingerprint", "runner_fingerprint",
                  "model_fingerprint", "integration_span_cap", "fail_on_fingerprint_mismatch", "gates_ok"):
        assert field in report, field
    # the clean recordings pass every blocking gate (exit 0); the shipped set's fixture miss fails the non-blocking
    # fixture_misses gate, and gates_ok says so
    assert (report["gates_ok"], report["gates_failed"]) == (False, ["fixture_misses"])
    assert all(line["fingerprints"]["runner_fingerprint"] == report["runner_fingerprint"] for line in results)
    # the wrapper's SHA is part of the runner fingerprint: another wrapper, another fingerprint
    wrapper.write_text(WRAPPER_J2.replace("system", "sys", 1))
    r = cli("run", "--benchmark", "tool_integration", "--model", "gpt-xyz", "--prompt-wrapper", str(wrapper),
            "--run-id", "s1", "--no-progress")
    assert r.exit_code == 0, r.output
    other = json.loads((run_dir.parent / "s1" / "tool_integration_report.json").read_text())
    assert other["runner_fingerprint"] != report["runner_fingerprint"]


def test_fixture_normalization_as_the_document_writes_it(tmp_path):
    # "2) Provide Fixtures" and "Fixture Normalization": the four spellings resolve to the one fixture line
    from evalpipe.tools.replay import ToolBroker, normalized_key

    folder = tmp_path / "fixtures"
    folder.mkdir()
    (folder / "web.search.jsonl").write_text(
        '{"name":"web.search","key":{"q":"what is rope precision", "top_k":3},"result":{"ok":true,"hits":[{"title":'
        '"...", "snippet":"...", "url":"https://..."}]}}\n'
        '{"name":"web.search","key":{"q":"rope precision"},"result":{"ok":true,"hits":[]}}\n')
    (folder / "read_file.jsonl").write_text(json.dumps(
        {"name": "read_file", "key": {"path": "README.md"}, "result": {"ok": True, "content": "# Project\n..."}},
        ) + "\n")  # one line per fixture (JSONL); the document prints it spread over lines
    broker = ToolBroker.from_paths(folder, None)

    def call(name, arguments):  # the document's broker.call
        return broker.lookup(name, normalized_key(name, arguments))

    for arguments in ({"q": "  ROPE  Precision  "}, {"q": "rope precision"}, {"q": "ROPE PRECISION", "top_k": None},
                      {"q": "rope precision", "top_k": 3}):
        assert call("web.search", arguments) == (True, {"ok": True, "hits": []}), arguments
    assert call("read_file", {"path": "README.md"})[1]["content"] == "# Project\n..."
    hit, miss = call("web.search", {"q": "embedding gemma pooling fp16"})
    assert not hit and miss["error"] == "fixture_miss"  # "Troubleshooting: fixture_miss"


def test_ci_broker_smoke(cli):
    # "CI Hooks": make ci-broker-smoke is `evalpipe tools check --min-hit-rate 0.95` on the shipped fixtures
    makefile = (REPO / "Makefile").read_text()
    assert "evalpipe tools check --split tool_integration/shipped --min-hit-rate 0.95" in makefile
    r = cli("tools", "check", "--split", "tool_integration/shipped", "--min-hit-rate", "0.95")
    assert r.exit_code == 0, r.output
    assert "105/105 variants of 35 fixtures hit (100.0%) ok" in r.output
