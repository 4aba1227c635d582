"""Speed benchmark of the rollouts stage: N samples at concurrency C against a mock server with fixed latency.

    .venv/bin/python benchmarks/bench_rollouts.py            # N=1000, C=100, 100 ms; both API paths
    .venv/bin/python benchmarks/bench_rollouts.py --n 5000 --concurrency 200 --paths fast

It times `evalpipe.pipeline.stages.run_rollouts` (what the `rollouts` asset calls: runner + driver + SQLite journal +
the output DataFrame) on a generated benchmark, once from scratch and once more when every sample is already in
the journal. The mock server runs in its own process, so the client's process CPU time is the framework's alone.
Reported: wall time and client CPU per sample as ratios to a bare aiohttp loop in the same round (the floor), the
ratio to the ideal N x latency / C, absolute figures with the machine named, the journaled re-run. Every path,
floor and peer runs `--repeat` rounds (default 3) in an order rotated each round; each figure is the median over
the rounds. The litellm path is compared with a bare `litellm.acompletion` loop passing the same per-token prices
and retry settings as the path (a like-for-like floor). Imports, runner construction and a 20-sample warm-up
happen before the clock starts (litellm's import alone costs seconds); the mock server's own CPU is not counted.

The peers, when `.venv-peers/` exists (`make bench-peers`), in the same rounds: Inspect AI's `eval` and lm-eval's
`simple_evaluate` of the same samples in-process (benchmarks/peers/rollouts_peer.py, their own interpreter, same
warm-up), no cache; their whole evaluation (generation, scoring, log) against our rollouts stage.
`--json FILE` also writes the figures and the printed table (benchmarks/readme_speed.py reads it).
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
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"
PEER_LABELS = {"inspect": "Inspect AI 0.3.285 in-process (eval)",
               "lm-eval": "lm-eval 0.4.13 in-process (simple_evaluate)"}
FLOOR = "bare aiohttp loop (floor)"
BARE_LITELLM = "bare litellm.acompletion loop (same prices, no retries)"
TARGETS = {"fast_cpu": 1.2, "litellm": 1.1}  # issue 24: fast path client CPU / bare loop; issue 15: litellm path
sys.path.insert(0, str(ROOT))
from benchmarks.common import check_repeat, load, machine, median_row, rounds, target_line, today, write_json  # noqa: E402
from benchmarks.mock_server import start_subprocess as start_server  # noqa: E402
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


def bench(path: str, base_url: str, n: int, concurrency: int, latency: float, work: Path) -> dict:
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.runners import RunSettings, build_runner

    data = work / f"data-{path}.jsonl"
    with data.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"s{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n")
    cfg_file = work / f"evals-{path}.yaml"
    cfg_file.write_text(
        f"benchmarks:\n  bench:\n    adapter: file\n    splits: {{test: {{path: {data}}}}}\n"
        f"    options: {{columns: {{prompt: question, target: answer, id: id}}}}\n"
        f"models:\n  m:\n    runner: litellm\n    model: openai/mock-model\n    api_base: {base_url}\n"
        f"    params: {{temperature: 0, max_tokens: 16}}\n    fast_path: {'true' if path == 'fast' else 'false'}\n")
    cfg = load_config(cfg_file)
    split, model = cfg.split("bench/test"), cfg.model("m")
    prompts = pipeline.build_prompts(split, "m", pipeline.build_dataset(split))
    runner = build_runner(model)
    settings = RunSettings(concurrency=concurrency, timeout_s=60)
    journal = work / f"journal-{path}.sqlite"
    # Warm-up (not timed): 20 samples through the same code, so lazy imports and first-use setup of the
    # process are not billed to the N samples; what remains is the per-sample cost.
    pipeline.run_rollouts(split, model, prompts.head(20), build_runner(model), settings,
                          journal_file=work / f"warmup-{path}.sqlite")

    wall0, cpu0 = time.perf_counter(), time.process_time()
    df = pipeline.run_rollouts(split, model, prompts, runner, settings, journal_file=journal)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ok = int((df["status"] == "ok").sum())

    wall0 = time.perf_counter()
    again = pipeline.run_rollouts(split, model, prompts, build_runner(model), settings, journal_file=journal)
    rerun = time.perf_counter() - wall0
    assert int(again["cached"].sum()) == ok, (again["cached"].sum(), ok, df["error"].dropna().head(3).tolist())
    ideal = n * latency / concurrency
    return {"path": path, "n": n, "c": concurrency, "ok": ok, "ideal_s": ideal, "wall_s": wall,
            "ratio": wall / ideal, "cpu_ms_per_sample": 1000 * cpu / n, "rerun_s": rerun}


def bench_bare(base_url: str, n: int, concurrency: int, latency: float) -> dict:
    """The floor: a bare aiohttp loop (one session, C workers, parse the JSON reply, keep the text), with no
    framework at all. Measured in the same run, so our ratio to it is independent of the machine's load."""
    import asyncio

    import aiohttp

    async def go(count: int) -> list[str]:
        body = {"model": "mock-model", "max_tokens": 16, "temperature": 0}
        out: list[str] = []
        it = iter(range(count))
        conn = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=conn) as session:
            async def worker() -> None:
                for i in it:
                    payload = {**body, "messages": [{"role": "user", "content": f"What is {i} plus {i}?"}]}
                    async with session.post(f"{base_url}/chat/completions", json=payload) as resp:
                        out.append((await resp.json())["choices"][0]["message"]["content"])
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out

    asyncio.run(go(20))  # warm-up
    wall0, cpu0 = time.perf_counter(), time.process_time()
    got = asyncio.run(go(n))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ideal = n * latency / concurrency
    return {"path": FLOOR, "n": n, "c": concurrency, "ok": len(got), "ideal_s": ideal,
            "wall_s": wall, "ratio": wall / ideal, "cpu_ms_per_sample": 1000 * cpu / n, "rerun_s": float("nan")}


def bench_bare_litellm(base_url: str, n: int, concurrency: int, latency: float) -> dict:
    """The litellm path's own floor: a bare `litellm.acompletion` loop (C workers, keep the text), same server,
    same run, like for like: the same per-token prices the litellm path passes (so litellm skips its cost-map
    search in both) and no retries inside litellm (`num_retries=0`, `max_retries=0`, as the path sets them).
    The litellm path's target is <= 1.1x this."""
    import asyncio

    from evalpipe.runners.pricing import import_litellm, token_prices

    litellm = import_litellm()
    pin, pout = token_prices("openai/mock-model", "openai")  # what LiteLLMRunner.prices() finds for this model

    async def go(count: int) -> list[str]:
        out: list[str] = []
        it = iter(range(count))

        async def worker() -> None:
            for i in it:
                resp = await litellm.acompletion(
                    model="openai/mock-model", api_base=base_url, api_key="no-key", max_tokens=16, temperature=0,
                    messages=[{"role": "user", "content": f"What is {i} plus {i}?"}], num_retries=0, max_retries=0,
                    input_cost_per_token=pin, output_cost_per_token=pout)
                out.append(resp.choices[0].message.content)
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out

    asyncio.run(go(20))  # warm-up
    wall0, cpu0 = time.perf_counter(), time.process_time()
    got = asyncio.run(go(n))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    ideal = n * latency / concurrency
    return {"path": BARE_LITELLM, "n": n, "c": concurrency, "ok": len(got), "ideal_s": ideal,
            "wall_s": wall, "ratio": wall / ideal, "cpu_ms_per_sample": 1000 * cpu / n, "rerun_s": float("nan")}


def bench_peer(peer: str, base_url: str, n: int, concurrency: int, latency: float, work: Path) -> dict:
    """A peer's evaluation of the same N samples in-process, in its own venv (benchmarks/peers/rollouts_peer.py)."""
    folder = work / f"peer-{peer}"
    folder.mkdir()
    data = folder / "bench.jsonl"
    with data.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"s{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n")
    home = folder / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
           "XDG_DATA_HOME": str(home / ".local" / "share"), "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "INSPECT_CACHE_DIR": str(home / "inspect-cache")}
    out = subprocess.run([str(PEERS_PYTHON), str(ROOT / "benchmarks" / "peers" / "rollouts_peer.py"), "--peer", peer,
                          "--base-url", base_url, "--data", str(data), "--concurrency", str(concurrency)],
                         env=env, cwd=folder, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{peer} in-process run failed: {out.stderr[-2000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ideal = n * latency / concurrency
    return {"path": PEER_LABELS[peer], "n": n, "c": concurrency, "ok": got["ok"], "ideal_s": ideal,
            "wall_s": got["wall_s"], "ratio": got["wall_s"] / ideal, "cpu_ms_per_sample": 1000 * got["cpu_s"] / n,
            "rerun_s": float("nan")}


def with_ratios(rounds_by_path: dict[str, list[dict]]) -> list[dict]:
    """Each path's medians, and its ratios to the floor (wall, CPU) taken round by round (the floor ran in the same
    round, so both saw the same load) before the median."""
    floor = rounds_by_path[FLOOR]
    out = []
    for rows in rounds_by_path.values():
        for r, f in zip(rows, floor):
            r["x_floor_wall"] = r["wall_s"] / f["wall_s"]
            r["x_floor_cpu"] = r["cpu_ms_per_sample"] / f["cpu_ms_per_sample"]
        out.append(median_row(rows, ("wall_s", "ratio", "cpu_ms_per_sample", "rerun_s", "x_floor_wall",
                                     "x_floor_cpu")) | {"ok": min(r["ok"] for r in rows)})
    return out


def pair_ratio(rounds_by_path: dict[str, list[dict]], a: str, b: str, key: str) -> float:
    """Median over the rounds of a's figure / b's figure in the same round."""
    import statistics

    return statistics.median(x[key] / y[key] for x, y in zip(rounds_by_path[a], rounds_by_path[b]))


def main() -> None:
    ap = argparse.ArgumentParser(description="Time rollouts through the real runner + driver + journal.")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--latency", type=float, default=0.1, help="mock server latency per request, seconds")
    ap.add_argument("--paths", default="fast,litellm,inspect,lm-eval",
                    help="comma list: fast (aiohttp), litellm (acompletion), and the peers inspect, lm-eval")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every path, floor and peer (medians)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    args = ap.parse_args()
    check_repeat(args.repeat)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    peers = [p for p in paths if p in PEER_LABELS]
    if peers and not PEERS_PYTHON.exists():
        print("peers (Inspect AI, lm-eval) are not installed in .venv-peers/: get them with `make bench-peers`; "
              "measuring evalpipe and the bare loops only", flush=True)
        peers = []
    paths = [p for p in paths if p not in PEER_LABELS]
    from evalpipe.runners.pricing import import_litellm

    if "litellm" in paths:
        import_litellm()  # outside the clock
    load_before = load()
    proc, url = start_server(args.latency)
    a = (url, args.n, args.concurrency, args.latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            os.environ["DAGSTER_HOME"] = tmp

            def work(r: int) -> Path:
                folder = Path(tmp) / f"round-{r}"
                folder.mkdir(exist_ok=True)
                return folder

            jobs = {FLOOR: lambda r: bench_bare(*a)}
            jobs |= {p: (lambda r, p=p: bench(p, *a, work(r))) for p in paths}
            if "litellm" in paths:
                jobs[BARE_LITELLM] = lambda r: bench_bare_litellm(*a)
            # the peers are contenders like any other: in every round, in the rotation, not once after the rest
            jobs |= {PEER_LABELS[p]: (lambda r, p=p: bench_peer(p, *a, work(r))) for p in peers}
            by_path = rounds(jobs, args.repeat)
            results = with_ratios(by_path)
    finally:
        proc.kill()
        proc.wait()
    header = (f"N={args.n}, concurrency={args.concurrency}, mock latency={args.latency * 1000:g} ms "
              f"(ideal {args.n * args.latency / args.concurrency:.2f} s); every row the median of {args.repeat} "
              f"rounds in a rotating order, peers included; ratios to the floor taken within each round; seconds "
              f"on {machine()}, load average before {load_before}, {today()}")
    lines = ["| path | ok | x floor, wall | x floor, client CPU | x ideal | wall (s) | client CPU (ms/sample) | "
             "journaled re-run (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        rerun = "-" if r["rerun_s"] != r["rerun_s"] else f"{r['rerun_s']:.2f}"
        lines.append(f"| {r['path']} | {r['ok']}/{r['n']} | {r['x_floor_wall']:.2f} | {r['x_floor_cpu']:.2f} | "
                     f"{r['ratio']:.2f} | {r['wall_s']:.2f} | {r['cpu_ms_per_sample']:.2f} | {rerun} |")
    by = {r["path"]: r for r in results}
    targets = []
    if "fast" in by:
        targets.append(target_line("fast path, client CPU per sample", by["fast"]["x_floor_cpu"], "the bare aiohttp "
                                   "loop", TARGETS["fast_cpu"], detail=f"wall {by['fast']['x_floor_wall']:.2f}x"))
    if "litellm" in by and BARE_LITELLM in by:
        targets.append(target_line("litellm path, wall", pair_ratio(by_path, "litellm", BARE_LITELLM, "wall_s"),
                                   "the bare litellm loop", TARGETS["litellm"],
                                   detail="CPU " f"{pair_ratio(by_path, 'litellm', BARE_LITELLM, 'cpu_ms_per_sample'):.2f}x"))
    for p in peers:
        if "fast" in by:
            label = PEER_LABELS[p]
            targets.append(f"- fast path beside {label.split(' in-process')[0]} (same rounds): "
                           f"{pair_ratio(by_path, 'fast', label, 'wall_s'):.2f}x its wall, "
                           f"{pair_ratio(by_path, 'fast', label, 'cpu_ms_per_sample'):.2f}x its CPU")
    md = header + "\n\n" + "\n".join(lines) + ("\n\n" + "\n".join(targets) if targets else "")
    print("\n" + md)
    write_json(args.json, "rollouts", md, targets, n=args.n, concurrency=args.concurrency, latency_s=args.latency,
               repeat=args.repeat, load_before=load_before, rows=results)


if __name__ == "__main__":
    main()
