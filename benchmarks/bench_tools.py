"""Speed benchmark of tool-using conversations: N three-turn conversations at concurrency C against the mock
server with fixed latency (turns 1-2 call a tool, turn 3 answers).

    .venv/bin/python benchmarks/bench_tools.py            # N=1000, C=100, 100 ms, 3 turns; the fast path
    .venv/bin/python benchmarks/bench_tools.py --n 200 --paths fast,litellm

It times `evalpipe.pipeline.stages.run_rollouts` (runner chat steps + the conversation loop + fixture-replayed tools +
driver + journal + the output frame) on a generated benchmark whose `web.search` fixtures answer every call.
The mock runs in its own process (`--tool-turns 3`), so the client's CPU time is the framework's alone.
Ideal wall time: turns x (N / C) waves x latency (3 x 10 x 100 ms = 3 s). Reported: wall time and its ratio to
the ideal and to a bare aiohttp loop doing the same three requests per conversation (the floor, same run),
client CPU per model turn, and the journaled re-run. Warm-up (20 conversations) is not timed. The floor and each
path run `--repeat` rounds (default 3) in an order rotated each round; every figure is the median over the rounds,
a ratio to the floor taken within its round first. Target (issue 24): a tool-using turn's client CPU within 1.2x
the bare loop's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import check_repeat, load, machine, median_row, rounds, target_line, today, write_json  # noqa: E402
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

FLOOR = "bare aiohttp loop (floor)"
TARGET_CPU = 1.2  # issue 24: client CPU per tool-using turn / the bare loop's
TOOLS = [{"type": "function", "function": {"name": "web.search", "description": "Search the web.", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "description": "query"}}, "required": ["q"]}}}]


def start_server(latency: float, turns: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.mock_server", "--latency", str(latency),
                             "--tool-turns", str(turns)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("port "):
        proc.kill()
        raise SystemExit(f"mock server failed to start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def question(i: int) -> str:
    return f"What is {i} plus {i}?"


def setup(work: Path, n: int, base_url: str, path: str) -> Path:
    data, fixtures = work / "data.jsonl", work / "fixtures"
    fixtures.mkdir(exist_ok=True)
    with data.open("w") as fh, (fixtures / "search.jsonl").open("w") as fx:
        for i in range(n + 20):
            fh.write(json.dumps({"id": f"s{i}", "question": question(i), "answer": str(2 * i)}) + "\n")
            fx.write(json.dumps({"name": "web.search", "key": {"q": question(i)},
                                 "result": {"ok": True, "results": [f"{i} plus {i} is {2 * i}"]}}) + "\n")
    (work / "tools.json").write_text(json.dumps(TOOLS))
    cfg = work / f"evals-{path}.yaml"
    cfg.write_text(
        f"benchmarks:\n  bench:\n    adapter: file\n    splits: {{test: {{path: {data}}}}}\n"
        f"    options: {{columns: {{prompt: question, target: answer, id: id}}}}\n"
        f"    tools: {{fixtures: {fixtures}, schemas: {work / 'tools.json'}}}\n"
        f"models:\n  m:\n    runner: litellm\n    model: openai/mock-model\n    api_base: {base_url}\n"
        f"    params: {{temperature: 0, max_tokens: 16}}\n    fast_path: {'true' if path == 'fast' else 'false'}\n")
    return cfg


def bench(path: str, base_url: str, n: int, concurrency: int, latency: float, turns: int, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.runners import RunSettings, build_runner

    cfg = load_config(setup(work, n, base_url, path))
    split, model = cfg.split("bench/test"), cfg.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    warm, prompts = prompts.tail(20), prompts.head(n)
    settings = RunSettings(concurrency=concurrency, timeout_s=60)
    pipeline.run_rollouts(split, model, warm, build_runner(model), settings, journal_file=work / f"warm-{path}.sqlite")
    runner = build_runner(model)
    journal = work / f"journal-{path}.sqlite"
    wall0, cpu0 = time.perf_counter(), time.process_time()
    df = pipeline.run_rollouts(split, model, prompts, runner, settings, journal_file=journal)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ok = int((df["status"] == "ok").sum())
    n_turns = int(df["turns"].sum())
    calls = pipeline.tool_calls_frame(df)
    assert n_turns == n * turns and len(calls) == n * (turns - 1) and calls["fixture_hit"].all(), \
        (n_turns, len(calls), df["error"].dropna().head(3).tolist())
    wall0 = time.perf_counter()
    again = pipeline.run_rollouts(split, model, prompts, build_runner(model), settings, journal_file=journal)
    rerun = time.perf_counter() - wall0
    assert int(again["cached"].sum()) == ok
    ideal = turns * (n / concurrency) * latency
    return {"path": path, "n": n, "ok": ok, "turns": n_turns, "ideal_s": ideal, "wall_s": wall,
            "ratio": wall / ideal, "cpu_ms_per_turn": 1000 * cpu / n_turns, "rerun_s": rerun}


def bench_bare(base_url: str, n: int, concurrency: int, latency: float, turns: int) -> dict:
    """The floor: a bare aiohttp loop, C workers, each conversation three requests with the growing message
    list and a canned tool result; no framework."""
    import asyncio

    import aiohttp

    async def go(count: int) -> int:
        done = 0
        it = iter(range(count))
        tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "web_search"}}]
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
            async def worker() -> None:
                nonlocal done
                for i in it:
                    messages = [{"role": "user", "content": question(i)}]
                    for _ in range(turns):
                        payload = {"model": "mock-model", "max_tokens": 16, "messages": messages, "tools": tools}
                        async with session.post(f"{base_url}/chat/completions", json=payload) as resp:
                            msg = (await resp.json())["choices"][0]["message"]
                        messages.append(msg)
                        for c in msg.get("tool_calls") or []:
                            messages.append({"role": "tool", "tool_call_id": c["id"], "content": '{"ok": true}'})
                    done += 1
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    asyncio.run(go(20))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    got = asyncio.run(go(n))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ideal = turns * (n / concurrency) * latency
    return {"path": FLOOR, "n": n, "ok": got, "turns": n * turns, "ideal_s": ideal,
            "wall_s": wall, "ratio": wall / ideal, "cpu_ms_per_turn": 1000 * cpu / (n * turns), "rerun_s": float("nan")}


def bench_loop_only(n: int, concurrency: int, turns: int) -> float:
    """CPU per model turn of the framework alone (loop, replayed tools, driver, redaction), with an in-process
    chat step that answers at once: no HTTP client, no journal."""
    import asyncio

    from evalpipe.runners.driver import RunSettings, run_requests
    from evalpipe.tools import ToolEnv
    from evalpipe.tools.base import ChatTurn, ToolCall
    from evalpipe.tools.replay import Fixture, ToolBroker, normalized_key
    from evalpipe.core.types import RolloutRequest

    class Instant:
        name, model, default_concurrency, retry_timeouts = "instant", None, concurrency, True

        async def start(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

        async def chat(self, messages, tools, request):
            k = sum(1 for m in messages if m.get("role") == "assistant")
            await asyncio.sleep(0)
            if k < turns - 1:
                args = json.dumps({"q": request.messages[-1]["content"]})
                return ChatTurn(None, [ToolCall("web_search", args, f"call_{k}")], "tool_calls", 10, 5, 0.0)
            return ChatTurn("answer", [], "stop", 10, 5, 0.0)

    env = ToolEnv({})
    env.broker = ToolBroker([Fixture("web.search", normalized_key("web.search", {"q": question(i)}),
                                     {"ok": True, "results": [str(2 * i)]}, "bench", {"q": question(i)})
                             for i in range(n)])
    reqs = [RolloutRequest(f"s{i}", [{"role": "user", "content": question(i)}], f"fp{i}", tools=TOOLS)
            for i in range(n)]
    asyncio.run(run_requests(Instant(), reqs[:20], None, RunSettings(concurrency=concurrency), tools=env))  # warm-up
    cpu0 = time.process_time()
    rows = asyncio.run(run_requests(Instant(), reqs, None, RunSettings(concurrency=concurrency), tools=env))
    cpu = time.process_time() - cpu0
    assert all(r["status"] == "ok" and r["turns"] == turns for r in rows)
    return 1000 * cpu / (n * turns)


def main() -> None:
    ap = argparse.ArgumentParser(description="Time multi-turn tool conversations through the real loop and driver.")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--turns", type=int, default=3, help="model turns per conversation (turns-1 tool calls)")
    ap.add_argument("--paths", default="fast", help="comma list: fast (aiohttp), litellm (acompletion)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the floor and every path (medians)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    args = ap.parse_args()
    check_repeat(args.repeat)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if "litellm" in paths:
        from evalpipe.runners.pricing import import_litellm

        import_litellm()
    load_before = load()
    loop_only = sorted(bench_loop_only(args.n, args.concurrency, args.turns) for _ in range(args.repeat))
    proc, url = start_server(args.latency, args.turns)
    a = (url, args.n, args.concurrency, args.latency, args.turns)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["DAGSTER_HOME"] = tmp
            jobs = {FLOOR: lambda r: bench_bare(*a)}
            jobs |= {p: (lambda r, p=p: bench(p, *a, Path(tmp) / f"round-{r}")) for p in paths}
            by_path = rounds(jobs, args.repeat)
    finally:
        proc.kill()
        proc.wait()
    results = []
    for rows in by_path.values():
        for r, f in zip(rows, by_path[FLOOR]):
            r["x_floor_wall"], r["x_floor_cpu"] = r["wall_s"] / f["wall_s"], r["cpu_ms_per_turn"] / f["cpu_ms_per_turn"]
        results.append(median_row(rows, ("wall_s", "ratio", "cpu_ms_per_turn", "rerun_s", "x_floor_wall",
                                         "x_floor_cpu")) | {"ok": min(r["ok"] for r in rows)})
    header = (f"N={args.n} conversations x {args.turns} turns, concurrency={args.concurrency}, mock latency="
              f"{args.latency * 1000:g} ms (ideal {args.turns * args.n / args.concurrency * args.latency:.2f} s); "
              f"every row the median of {args.repeat} rounds in a rotating order, ratios to the floor taken within "
              f"each round; seconds on {machine()}, load average before {load_before}, {today()}")
    lines = ["| path | ok | model turns | x floor, wall | x floor, client CPU | x ideal | wall (s) | "
             "client CPU (ms/turn) | journaled re-run (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        rerun = "-" if r["rerun_s"] != r["rerun_s"] else f"{r['rerun_s']:.2f}"
        lines.append(f"| {r['path']} | {r['ok']}/{r['n']} | {r['turns']} | {r['x_floor_wall']:.2f} | "
                     f"{r['x_floor_cpu']:.2f} | {r['ratio']:.2f} | {r['wall_s']:.2f} | {r['cpu_ms_per_turn']:.2f} | "
                     f"{rerun} |")
    by = {r["path"]: r for r in results}
    floor_cpu = by[FLOOR]["cpu_ms_per_turn"]
    median_loop = loop_only[len(loop_only) // 2]
    targets = [target_line(f"{p} path, client CPU per tool-using turn", by[p]["x_floor_cpu"], "the bare aiohttp loop",
                           TARGET_CPU, detail=f"wall {by[p]['x_floor_wall']:.2f}x") for p in paths]
    note = (f"The framework alone (loop, replayed tools, driver, redaction; an in-process chat step, no HTTP client, "
            f"no journal): {median_loop:.2f} ms CPU per model turn, {median_loop / floor_cpu:.2f}x the bare loop's "
            f"client CPU per turn (median of {args.repeat}).")
    md = header + "\n\n" + "\n".join(lines) + "\n\n" + note + "\n\n" + "\n".join(targets)
    print("\n" + md)
    write_json(args.json, "tools", md, targets, n=args.n, turns=args.turns, repeat=args.repeat,
               load_before=load_before, rows=results, loop_only_ms_per_turn=median_loop)


if __name__ == "__main__":
    main()
