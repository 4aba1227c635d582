"""One peer's whole evaluation in-process, timed like benchmarks/bench_rollouts.py times evalpipe's rollouts stage:
imports and a 20-sample warm-up before the clock, then N samples at concurrency C against the mock, no cache.
Run by bench_rollouts.py with .venv-peers/bin/python (the peers' own venv); prints one JSON line.

    .venv-peers/bin/python benchmarks/peers/rollouts_peer.py --peer inspect --base-url http://127.0.0.1:<port>/v1 \
        --data bench.jsonl --concurrency 100

Inspect AI: `inspect_ai.eval` of benchmarks/peers/inspect_task.py (generate, exact scorer, its .eval log written).
lm-eval: `lm_eval.simple_evaluate` of benchmarks/peers/lm_eval_bench.yaml with `local-chat-completions`.
Both do a little more than evalpipe's rollouts stage (their scoring and log), which costs them little next to
their generation.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_inspect(data: Path, base_url: str, concurrency: int, log_dir: str):
    from inspect_ai import eval as inspect_eval

    sys.path.insert(0, str(HERE))
    from inspect_task import bench

    os.environ.setdefault("MOCK_API_KEY", "no-key")

    def go(limit: int | None) -> int:
        [log] = inspect_eval(bench(data=str(data)), model="openai-api/mock/mock-model", model_base_url=base_url,
                             max_connections=concurrency, temperature=0, max_tokens=16, display="none",
                             log_dir=log_dir, limit=limit)
        if log.status != "success":
            raise SystemExit(f"inspect eval ended {log.status}: {log.error}")
        return sum(1 for s in log.samples or [] if s.output and s.output.completion and not s.error)
    return go


def run_lm_eval(data: Path, base_url: str, concurrency: int, log_dir: str):
    import lm_eval
    from lm_eval.tasks import TaskManager

    os.environ.setdefault("OPENAI_API_KEY", "no-key")
    os.chdir(data.parent)  # the task YAML reads ./bench.jsonl
    manager = TaskManager(include_path=str(HERE), include_defaults=False)
    args = (f"model=mock-model,base_url={base_url}/chat/completions,num_concurrent={concurrency},max_retries=1,"
            "tokenizer_backend=None")

    def go(limit: int | None) -> int:
        out = lm_eval.simple_evaluate(model="local-chat-completions", model_args=args, tasks=["evalpipe_bench"],
                                      task_manager=manager, apply_chat_template=True, limit=limit, log_samples=True)
        return sum(1 for s in out["samples"]["evalpipe_bench"] if s["resps"] and s["resps"][0][0])
    return go


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", choices=["inspect", "lm-eval"], required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--data", type=Path, required=True, help="the JSONL file (id, question, answer); lm-eval reads "
                    "it as bench.jsonl in its folder")
    ap.add_argument("--concurrency", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as logs:
        go = (run_inspect if args.peer == "inspect" else run_lm_eval)(args.data.resolve(), args.base_url,
                                                                     args.concurrency, logs)
        go(20)  # warm-up (not timed)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        ok = go(None)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(json.dumps({"ok": ok, "wall_s": wall, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
