"""A generated warehouse for the viewer's tests, its speed check at 100k samples, and the screenshots in
docs/img/: every table the viewer reads, written through `Warehouse.write` like the assets write them.

    .venv/bin/python -m evalpipe.viewer.demo /tmp/demo/warehouse.duckdb 100000
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from evalpipe.metrics.aggregate import aggregate

QUESTIONS = [
    ("What is the chemical symbol of gold?", "Au", ["The chemical symbol of gold is Au.", "FINAL ANSWER: Au", "Ag"]),
    ("How many days does a leap year have?", "366", ["A leap year has 366 days.", "FINAL ANSWER: 366", "365"]),
    ("Name the three primary colours (RYB), alphabetically.", "blue, red, yellow",
     ["Red, blue and yellow.", "FINAL ANSWER: blue, red, yellow", "green"]),
    ("What is 6 times 7?", "42", ["6 * 7 = 42", "FINAL ANSWER: 42", "FINAL ANSWER: 48"]),
]


def build(path: str | Path, n: int = 60, models: tuple[str, ...] = ("smollm2-135m", "gpt-4o-mini"),
          split: str = "gaia/validation", seed: int = 0, with_tools: bool = True, with_judge: bool = False):
    """Write datasets/prompts/rollouts/tool_calls/judgements/metrics for `n` samples x `models`. `with_judge`: also
    a model-graded metric `llm_judge` (one judge, `judge-mini`, that reads as lenient as `includes`)."""
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(path)
    rng = random.Random(seed)
    ids = [f"task-{i:06d}" for i in range(n)]
    levels = [str(1 + i % 3) for i in range(n)]
    qs = [QUESTIONS[i % len(QUESTIONS)] for i in range(n)]
    targets = [q[1] if i % 10 else None for i, q in enumerate(qs)]  # every 10th: hidden answer (unscored)
    slices = [json.dumps({"level": lv}) for lv in levels]
    wh.write("datasets", pd.DataFrame({
        "benchmark_split": split, "sample_id": ids, "sample_index": range(n), "input": [q[0] for q in qs],
        "target": targets, "metadata": [json.dumps({"Level": lv}) for lv in levels], "slices": slices}),
        {"benchmark_split": split})
    for mi, model in enumerate(models):
        skill = 0.3 + 0.4 * mi  # later models are better
        outs, finish, correct_official, correct_lenient = [], [], [], []
        for i, q in enumerate(qs):
            r = rng.random()
            if r < skill:
                out, ok_off, ok_len = q[2][1], True, True
            elif r < skill + 0.25:
                out, ok_off, ok_len = q[2][0], False, True  # right in substance, wrong format
            else:
                out, ok_off, ok_len = q[2][2], False, False
            if i % 17 == 5:
                out, ok_off, ok_len = out + " and then" * 40, False, ok_len
                finish.append("length")
            else:
                finish.append("stop")
            outs.append(out)
            correct_official.append(ok_off)
            correct_lenient.append(ok_len)
        status = ["error" if i % 23 == 7 and mi == 0 else "ok" for i in range(n)]
        messages = [json.dumps([{"role": "system", "content": "Answer with FINAL ANSWER: <answer>."},
                                {"role": "user", "content": q[0]}]) for q in qs]
        part = {"benchmark_split": split, "model": model}
        wh.write("prompts", pd.DataFrame({
            "benchmark_split": split, "model": model, "sample_id": ids, "sample_index": range(n), "messages": messages,
            "prompt_text": [q[0] for q in qs], "target": targets, "metadata": [json.dumps({"Level": lv}) for lv in levels],
            "slices": slices, "prompt_fingerprint": "fp"}), part)
        tool_rows, trajectories, n_calls, misses, turns, stops = [], [], [], [], [], []
        for i, sid in enumerate(ids):
            if with_tools and i % 4 == 0:
                # every 4th sample calls math.eval (a fixture hit); every 12th from 8 first searches the web and
                # misses its fixture, and every 24th from 20 ends at max_turns
                calls = []
                if i % 12 == 8:
                    calls.append(("web.search", json.dumps({"query": qs[i][0], "max_results": 3}),
                                  {"ok": False, "error": "fixture_miss", "detail": "no recorded result for this call"},
                                  False, "fixture_miss", 0.0004))
                calls.append(("math.eval", json.dumps({"expression": "6*7"}), {"ok": True, "value": 42}, True, None,
                              0.002))
                traj = [{"role": "user", "content": qs[i][0]}]
                for k, (name, args, result, hit, error, latency) in enumerate(calls):
                    tool_rows.append({"benchmark_split": split, "model": model, "sample_id": sid, "turn": k,
                                      "call_index": k, "name": name, "arguments": args, "arguments_valid": True,
                                      "normalized_key": args, "result": json.dumps(result), "fixture_hit": hit,
                                      "error": error, "latency_s": latency})
                    traj += [{"role": "assistant", "content": None, "tool_calls": [
                                 {"id": f"c{k}", "type": "function", "function": {"name": name, "arguments": args}}]},
                             {"role": "tool", "tool_call_id": f"c{k}", "name": name, "content": json.dumps(result)}]
                traj.append({"role": "assistant", "content": outs[i]})
                trajectories.append(json.dumps(traj))
                n_calls.append(len(calls))
                misses.append(sum(1 for c in calls if c[3] is False))
                turns.append(len(calls) + 1)
                stops.append("max_turns" if i % 24 == 20 else "final")
            else:
                trajectories.append(None)
                n_calls.append(None)
                misses.append(None)
                turns.append(None)
                stops.append(None)
        out_tokens = [len(o.split()) * 2 for o in outs]
        wh.write("rollouts", pd.DataFrame({
            "benchmark_split": split, "model": model, "sample_id": ids, "fingerprint": "x", "status": status,
            "error": ["timeout after 30 s" if s != "ok" else None for s in status],
            "prediction": [o.split("FINAL ANSWER:")[-1].strip() if s == "ok" else None for o, s in zip(outs, status)],
            "raw_output": [o if s == "ok" else None for o, s in zip(outs, status)],
            "finish_reason": [f if s == "ok" else None for f, s in zip(finish, status)],
            "latency_s": [round(0.2 + rng.random(), 3) for _ in ids], "input_tokens": 40, "output_tokens": out_tokens,
            "cost": [t * (0.0 if mi == 0 else 6e-7) for t in out_tokens], "attempts": 1, "cached": False,
            "trajectory": trajectories, "tool_calls": n_calls, "fixture_misses": misses, "turns": turns,
            "stop_reason": stops}), part)
        if tool_rows:
            wh.write("tool_calls", pd.DataFrame(tool_rows), part)
        jrows = []
        graded = (("llm_judge", correct_lenient),) if with_judge else ()
        for metric, flags in (("gaia", correct_official), ("includes", correct_lenient), *graded):
            for i, sid in enumerate(ids):
                if targets[i] is None:
                    sc, ok, st, reason = None, None, "unscored", "no ground truth"
                elif status[i] != "ok":
                    sc, ok, st, reason = 0.0, False, "error", "rollout failed: timeout after 30 s"
                else:
                    ok = flags[i]
                    sc, st, reason = float(ok), "scored", ("equal" if ok else "different")
                judged = metric == "llm_judge" and st == "scored"
                jrows.append({"benchmark_split": split, "model": model, "sample_id": sid, "metric": metric, "score": sc,
                              "correct": ok, "status": st, "reason": reason,
                              "details": json.dumps({"judges": {"judge-mini": {"status": "scored", "score": sc}}})
                              if judged else None, "judge_fingerprint": "jfp-demo-0001" if judged else None,
                              "prediction": outs[i] if status[i] == "ok" else None, "target": targets[i],
                              "slices": slices[i]})
        j = pd.DataFrame(jrows)
        wh.write("judgements", j, part)
        roll = wh.read("rollouts", part)
        m = aggregate(j, seed=0, rollouts=roll)
        m["benchmark_split"], m["model"] = split, model
        wh.write("metrics", m, part)
    return wh


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "/tmp/evalpipe-demo/warehouse.duckdb"
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    build(target, count)
    print(target)
    _ = np  # numpy is imported for aggregate's sake


def build_large(path: str | Path, n: int = 100_000, models: tuple[str, ...] = ("model-a", "model-b"),
                split: str = "big/test", seed: int = 0):
    """A large warehouse, fast: vectorized columns written straight into the warehouse's Parquet layout
    (`Warehouse.partition_file`, the schemas of evalpipe/core/schema.py); datasets, prompts (narrow), rollouts,
    judgements, metrics."""
    import pyarrow.parquet as pq

    from evalpipe.store.warehouse import Warehouse, to_arrow

    wh = Warehouse(path)
    rng = np.random.default_rng(seed)
    ids = np.char.add("s-", np.arange(n).astype(str).astype(object).astype(str)).astype(object)
    level = (np.arange(n) % 3 + 1).astype(str)
    slices = np.char.add('{"level": "', np.char.add(level, '"}')).astype(object)
    words = np.array(["gold", "leap year", "primary colours", "six times seven"], dtype=object)
    target = words[np.arange(n) % 4]

    def put(table: str, df: pd.DataFrame, part: dict[str, str]) -> None:
        f = wh.partition_file(table, part)
        f.parent.mkdir(parents=True, exist_ok=True)
        wh._ensure_schema_file(table)
        pq.write_table(to_arrow(table, df), f)

    put("datasets", pd.DataFrame({"benchmark_split": split, "sample_id": ids, "sample_index": np.arange(n),
                                  "input": "question about " + target, "target": target, "slices": slices}),
        {"benchmark_split": split})
    for mi, model in enumerate(models):
        part = {"benchmark_split": split, "model": model}
        correct = rng.random(n) < 0.3 + 0.3 * mi
        status = np.where(rng.random(n) < 0.01, "error", "ok").astype(object)
        pred = np.where(correct, target, "something else").astype(object)
        put("prompts", pd.DataFrame({"benchmark_split": split, "model": model, "sample_id": ids,
                                     "sample_index": np.arange(n), "target": target, "slices": slices,
                                     "prompt_text": "system: Answer briefly.\nuser: a question about " + target}),
            part)
        put("rollouts", pd.DataFrame({"benchmark_split": split, "model": model, "sample_id": ids, "status": status,
                                      "prediction": pred, "raw_output": pred,
                                      "finish_reason": np.where(rng.random(n) < 0.05, "length", "stop").astype(object),
                                      "latency_s": rng.random(n), "output_tokens": rng.integers(1, 200, n),
                                      "cost": 0.0}), part)
        j = pd.DataFrame({"benchmark_split": split, "model": model, "sample_id": ids, "metric": "exact_match",
                          "score": correct.astype(float), "correct": correct, "status": "scored",
                          "reason": np.where(correct, "equal", "different").astype(object), "prediction": pred,
                          "target": target, "slices": slices})
        put("judgements", j, part)
        m = aggregate(j, seed=0)
        m["benchmark_split"], m["model"] = split, model
        put("metrics", m, part)
    return wh
