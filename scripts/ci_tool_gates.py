"""The tool-integration harness's CI hooks, offline on the shipped set (`make ci-runner-parity`, `make ci-locale`,
`make ci-teacher-heavy`; `make ci-broker-smoke` is `evalpipe tools check`). docs/tools.md "CI gates".

    python scripts/ci_tool_gates.py runner-parity [--max-delta 0.03]
    python scripts/ci_tool_gates.py locale [--max-delta 0.05]
    python scripts/ci_tool_gates.py teacher-heavy [--min-f1 F] [--min-results 2]
    python scripts/ci_tool_gates.py locale teacher-heavy      # several gates on one run of the set

Each run happens in a temp DAGSTER_HOME (nothing of the user's is read or written) on `--items` with tools replayed
from `--fixtures`, answering with `--predictions` (recorded outputs and tool calls, the `replay` runner: the local
runner). runner-parity also plays the same recordings through the OpenAI-compatible runner (`runner: litellm` with
`api_base`, its aiohttp fast path) against a loopback chat-completions server, so both go through the same tool
loop, broker and scorer, and compares their macro F1. Prints one line per gate and the JSON (`--out` writes it: a
list of the gates); exits 1 when a gate fails, 0 otherwise ("warn" and "insufficient" print but pass).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks.mock_server, when run as a file
DATA = REPO / "data" / "tool_integration"
SPLIT = "tool_integration/shipped"

CONFIG = """benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {{path: {items}}}
    options:
      tools: {{fixtures: {fixtures}, allowlist: {allowlist}}}
    metrics: [tool_integration]
models:
  local: {{runner: replay, path: {predictions}}}
  openai-compatible:
    runner: litellm
    model: openai/recorded
    api_base: {api_base}
    api_key_env: CI_TOOL_GATES_KEY
"""


def _recorded_turns(items: Path, predictions: Path) -> dict[str, list[dict[str, Any]]]:
    """prompt -> the assistant turns the recording implies: its tool calls (wire names), then its final output."""
    from evalpipe.tools.schema import wire_names

    prompts = {}
    for line in items.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else {}
        if "id" in row:
            prompts[row["id"]] = (row["prompt"], row.get("tools") or [])
    script = {}
    for line in predictions.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        prompt, offered = prompts[rec["sample_id"]]
        wire = wire_names(list(offered))
        calls = [{"name": wire.get(c["name"], c["name"]), "arguments": c.get("arguments") or {}}
                 for c in rec.get("tool_calls") or []]
        turns = [{"content": None, "tool_calls": calls}] if calls else []
        script[prompt] = turns + [{"content": rec.get("output") or ""}]
    return script


@contextmanager
def _chat_server(script: dict[str, list[dict[str, Any]]]) -> Iterator[str]:
    from benchmarks.mock_server import MockLLM, serve_in_thread

    mock = MockLLM(latency=0.0, keep_bodies=False)
    mock.tool_script = script
    with serve_in_thread(mock) as (_, base_url):
        yield base_url


def _run(model_key: str, workdir: Path) -> list[dict[str, Any]]:
    """One isolated run of the split with `model_key`; its per-sample result records."""
    from evalpipe.pipeline.tool_report import judged_results
    from evalpipe.repro.validate_sharding import run_phase

    phase = run_phase(model_key, workdir / model_key, SPLIT, model_key)
    errors = [e for e in phase.gates_failed if "check" not in e]  # a failed dataset gate is the report's business
    if errors:
        raise SystemExit(f"error: {errors[0]}")
    results = judged_results(phase.judgements)
    if not results:
        raise SystemExit(f"error: {model_key}: no tool_integration judgements (is {SPLIT} scored by tool_integration?)")
    return results


def _report(results: list[dict[str, Any]], model_key: str) -> dict[str, Any]:
    from evalpipe.tooleval.report import summarize

    cap = int((results[0].get("settings") or {}).get("integration_span_cap") or 8)
    s = summarize(results, cap)
    return {"model": model_key, "macro": {k: v for k, v in s["metrics"].items() if k.endswith("_macro")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="ci_tool_gates", description=__doc__.split("\n\n")[0])
    p.add_argument("gates", nargs="+", choices=["runner-parity", "locale", "teacher-heavy"], metavar="GATE",
                   help="runner-parity, locale, teacher-heavy (several: one run of the set serves them all)")
    p.add_argument("--items", type=Path, default=DATA / "items.jsonl")
    p.add_argument("--fixtures", type=Path, default=DATA / "fixtures")
    p.add_argument("--allowlist", type=Path, default=DATA / "allowlist.txt")
    p.add_argument("--predictions", type=Path, default=DATA / "predictions_clean_controls.jsonl",
                   help="recorded answers (replay format) the runners play")
    p.add_argument("--openai-predictions", type=Path, default=None,
                   help="runner-parity: what the OpenAI-compatible runner plays (default: --predictions)")
    p.add_argument("--max-delta", type=float, default=None, help="parity 0.03, locale 0.05 (one gate per call)")
    p.add_argument("--min-f1", type=float, default=None, help="teacher-heavy: default the header's f1_strict_macro min")
    p.add_argument("--min-results", type=int, default=None, help="teacher-heavy: tool results per item (default 2)")
    p.add_argument("--out", type=Path, default=None, help="write the gate JSON here")
    a = p.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore", module="dagster")  # its preview notices, once per asset check
    warnings.filterwarnings("ignore", message=".*preview.*")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    os.environ["CI_TOOL_GATES_KEY"] = "not-a-real-key"  # the loopback server checks nothing
    from evalpipe.pipeline import tool_report as tr

    with tempfile.TemporaryDirectory(prefix="evalpipe-ci-") as tmp:
        work = Path(tmp)
        openai_script = _recorded_turns(a.items, a.openai_predictions or a.predictions)
        with _chat_server(openai_script) as base_url:
            cfg = work / "evals.yaml"
            cfg.write_text(CONFIG.format(items=a.items.resolve(), fixtures=a.fixtures.resolve(),
                                         allowlist=a.allowlist.resolve(), predictions=a.predictions.resolve(),
                                         api_base=base_url))
            saved = os.environ.get("EVALS_CONFIG")
            os.environ["EVALS_CONFIG"] = str(cfg)
            try:
                local = _run("local", work)
                gates = []
                for name in dict.fromkeys(a.gates):
                    if name == "runner-parity":
                        remote = _run("openai-compatible", work)
                        gates.append(tr.runner_parity_gate(
                            _report(remote, "openai-compatible"), _report(local, "local"),
                            tr.PARITY_MAX_DELTA if a.max_delta is None else a.max_delta))
                    elif name == "locale":
                        gates.append(tr.locale_gate(local, tr.LOCALE_MAX_DELTA if a.max_delta is None else a.max_delta))
                    else:
                        gates.append(tr.teacher_heavy_gate(
                            local, tr.header_min_f1(local) if a.min_f1 is None else a.min_f1,
                            a.min_results or tr.TEACHER_HEAVY_MIN_RESULTS))
            finally:
                if saved is None:
                    os.environ.pop("EVALS_CONFIG", None)
                else:
                    os.environ["EVALS_CONFIG"] = saved
    text = json.dumps(gates, indent=2, default=str)
    print(text)
    for gate in gates:  # the verdicts last, where a CI log ends
        value = "n/a" if gate["value"] is None else f"{gate['value']:.4g}"
        print(f"{gate['gate']}: {gate['status']} (value {value}, limit {gate['limit']})")
    if a.out:
        a.out.write_text(text + "\n")
    return 1 if any(g["status"] == "fail" for g in gates) else 0


if __name__ == "__main__":
    raise SystemExit(main())
