"""The GAIA lab's `samples/gaia_sample.py` (docs/design_refs.md, document 003) in evalpipe: a custom evaluator,
telemetry, and ONE agent created once and reused by every sample, evaluated on a GAIA-format set.

    python examples/gaia_sample.py                    # offline: the shipped data/gaia_sample, a loopback model
    python examples/gaia_sample.py --api-base https://host/v1 --model gpt-4o-mini --api-key-env OPENAI_API_KEY
    python examples/gaia_sample.py --otlp-endpoint http://collector:4318/v1/traces
    python examples/gaia_sample.py --azure-connection-string-env APPLICATIONINSIGHTS_CONNECTION_STRING

The lab's pieces and ours:
- `evaluate_task(task, prediction) -> Evaluation` -> `@evalpipe.metric def contains_answer(prediction, target)`,
  scored beside the official GAIA scorer (`"gaia"`);
- `GAIATelemetryConfig(enable_tracing=True, trace_to_file=True, file_path=...)` -> `EVALS_TRACING=jsonl:<file>`
  (`otlp:<endpoint>` / `azure_monitor:<ENV_VAR>` for the lab's OTLP and Azure Monitor exporters): one `model_call`
  span per sample, with the run id and the sample id (docs/operations.md, Tracing);
- the agent, created once in a context manager and reused -> `GaiaAgent`, whose bound `run_task` is the agent:
  its cumulative token usage is read before and after each sample and the difference stored as that sample's usage
  (docs/api.md, usage deltas);
- `GAIA().run(run_task, level=, max_n=, parallel=, timeout=, out=)` -> `Evaluator(...).evaluate(...)` on
  `DatasetRegistry.load("gaia", path=..., levels=..., max_n=...)`; `--out` gets `samples.jsonl`, `metrics.json`
  and DSGym's layout; `evalpipe view <out>/samples.jsonl --detailed` is the lab's viewer.

Offline, the model is a loopback OpenAI-compatible server (benchmarks/mock_server.py) that knows the answers of
every other task and says "I don't know" to the rest, so the scores are neither 0 nor 1. Results land in
$DAGSTER_HOME like every evalpipe run (a re-run of unchanged code resumes from the journal: no model calls).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # benchmarks.mock_server for the offline model

import evalpipe  # noqa: E402
from evalpipe.api.wrappers import SHIPPED_GAIA, DatasetRegistry, Evaluator  # noqa: E402


@evalpipe.metric
def contains_answer(prediction: str, target: str) -> bool:
    """The lab sample's evaluator: the expected answer appears in the prediction (case-insensitive)."""
    return (target or "").lower() in (prediction or "").lower()


class GaiaAgent:
    """One chat agent for the whole run (an OpenAI-compatible endpoint), keeping cumulative usage like an SDK client.
    Use it as a context manager: it is created once, reused by every sample, and closed at the end."""

    def __init__(self, api_base: str, model: str, api_key: str | None = None, timeout_s: float = 60.0):
        self.url = api_base.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout_s = model, api_key, timeout_s
        self.usage = {"input_tokens": 0, "output_tokens": 0}  # running totals over every sample
        self.calls = 0

    def __enter__(self) -> "GaiaAgent":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.url = None  # closed: a late call fails loudly

    def run(self, message: str) -> dict[str, Any]:
        body = {"model": self.model, "messages": [{"role": "user", "content": message}], "temperature": 0}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            reply = json.loads(resp.read())
        self.calls += 1
        usage = reply.get("usage") or {}
        self.usage["input_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["output_tokens"] += int(usage.get("completion_tokens") or 0)
        return reply["choices"][0]["message"]

    def run_task(self, task: Any) -> dict[str, Any]:
        """The lab's `run_task`: one user turn with the task, the reply as the prediction (and the conversation)."""
        message = f"Task: {task.question}"
        reply = self.run(message)
        return {"prediction": reply.get("content") or "",
                "messages": [{"role": "user", "content": message},
                             {"role": "assistant", "content": reply.get("content")}]}


def offline_model(stack: ExitStack, gaia_path: Path, split: str) -> str:
    """A loopback chat server answering every other task right (the rest: "I don't know"); its base URL."""
    import pandas as pd

    from benchmarks.mock_server import MockLLM, serve_in_thread

    tasks = pd.read_parquet(gaia_path / "2023" / split / "metadata.parquet")
    known = [(row["Question"], f"FINAL ANSWER: {row['Final answer']}" if i % 2 == 0 else "I don't know")
             for i, row in enumerate(tasks.to_dict("records"))]

    class KnowsHalf(MockLLM):
        def answer_for(self, prompt: str) -> str:  # the prompt holds the question (and a note on attachments)
            return next((answer for question, answer in known if question in prompt), "I don't know")

    _, base_url = stack.enter_context(serve_in_thread(KnowsHalf(latency=0.0, keep_bodies=False)))
    return base_url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gaia-path", type=Path, default=SHIPPED_GAIA, help="a GAIA folder (default: the shipped sample)")
    p.add_argument("--split", default="validation")
    p.add_argument("--level", type=int, action="append", help="GAIA level(s) to run (repeatable; default: all)")
    p.add_argument("--max-n", type=int, default=None, help="at most this many tasks per level")
    p.add_argument("--api-base", default=None, help="an OpenAI-compatible endpoint (default: the offline model)")
    p.add_argument("--model", default="gaia-sample-model")
    p.add_argument("--api-key-env", default=None, help="env var holding the endpoint's key")
    p.add_argument("--parallel", type=int, default=1, help="samples at once (the agent's usage deltas need 1)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per task")
    p.add_argument("--out", type=Path, default=Path("gaia_results"), help="results folder")
    p.add_argument("--trace-file", type=Path, default=None, help="spans as JSONL (default: <out>/gaia_traces.jsonl)")
    p.add_argument("--otlp-endpoint", default=None)
    p.add_argument("--azure-connection-string-env", default=None)
    a = p.parse_args(argv)

    # telemetry: the lab's GAIATelemetryConfig, as evalpipe's tracing setting for this process
    if a.azure_connection_string_env:
        os.environ["EVALS_TRACING"] = f"azure_monitor:{a.azure_connection_string_env}"
    elif a.otlp_endpoint:
        os.environ["EVALS_TRACING"] = f"otlp:{a.otlp_endpoint}"
    else:
        trace_file = (a.trace_file or a.out / "gaia_traces.jsonl").resolve()
        os.environ["EVALS_TRACING"] = f"jsonl:{trace_file}"

    options: dict[str, Any] = {"path": str(a.gaia_path)}
    if a.level:
        options["levels"] = a.level
    if a.max_n is not None:
        options["max_n"] = a.max_n
    tasks = DatasetRegistry.load("gaia", **options).load(a.split)

    with ExitStack() as stack:
        api_base = a.api_base or offline_model(stack, a.gaia_path, a.split)
        api_key = os.environ.get(a.api_key_env) if a.api_key_env else None
        agent = stack.enter_context(GaiaAgent(api_base, a.model, api_key, a.timeout))
        evaluator = Evaluator(metrics=[contains_answer, "gaia"], concurrency=a.parallel, timeout_s=a.timeout,
                              name="gaia_sample", model_name=a.model)
        results = evaluator.evaluate(agent.run_task, tasks, config={"output_dir": str(a.out)}, save_results=True)

    for row in results.samples.to_dict("records"):
        print(f"{row['sample_id']}: {str(row.get('prediction'))[:60]!r} gaia={row.get('gaia_score', row.get('score'))} "
              f"tokens={row.get('input_tokens')}/{row.get('output_tokens')}")
    print(results.metrics[["metric", "slice", "value", "n"]].to_string(index=False))
    print(f"agent calls: {agent.calls}; results: {a.out}; traces: {os.environ['EVALS_TRACING']}")
    return 0 if results.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
