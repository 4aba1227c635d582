"""Fixed cost of one whole run from the command line, evalpipe side by side with Inspect AI and lm-evaluation-harness
in the same invocation, all against the same mock server (benchmarks/mock_server.py, its own process):

- a 1-sample run start to finish (`--limit 1` of the N-sample file, nothing cached yet);
- a fully cached re-run of the N samples (evalpipe: its journal; Inspect: its generate cache, `--cache`; lm-eval:
  `--use_cache`), checked to send no request;
- the first run of the N samples (concurrency 100), in a fresh state each round;
- bytes written and fsyncs of one more 1-sample run, from `strace` (when installed): everything the tool writes
  under its own folders (evalpipe: the Dagster instance storage, split out, and the data: warehouse, journal;
  Inspect: its log, cache and trace files; lm-eval: its cache, results and the datasets cache of the JSONL file);
  for evalpipe also the instance storage written by one more cached re-run (issue 15's target is per run).

Contenders (`--contenders`, each a CLI in its own subprocess with its own interpreter):
- `import-floor`: `python -c 'import dagster, pandas, duckdb'`, the floor issue 24's cold-run targets are ratios
  to (a cold 1-sample run <= 1.5x its CPU, a cold cached re-run of 1000 <= 1.3x), in the same rounds;
- `dagster-floor`: `benchmarks/dagster_floor.py` on the same instance storage as `evalpipe` (this repository's
  dagster.yaml, the instance already created): the import floor, plus opening the instance and materializing one
  partition of a chain of six trivial assets in process. The least a tool that records its runs in Dagster pays,
  so a cold run's figure can be read as "the import floor, Dagster's run machinery, then evalpipe's own work";
- `evalpipe`: `python -m evalpipe.cli.main run` with an OpenAI-compatible model at the mock (the fast path), this
  repository's `dagster_home/dagster.yaml` (evalpipe/store/instance_storage.py);
- `evalpipe-stock`: the same on Dagster's default SQLite instance storage (the instance storage's baseline);
- `evalpipe-echo`: the echo runner (no HTTP at all), this repository's instance storage (not run by default);
- `evalpipe-warm`: `evalpipe` with `evalpipe serve` already listening in its DAGSTER_HOME (started before the
  clock, as a user who keeps it running would have it; evalpipe/cli/warm.py): the run is forked from the warm server,
  its CPU is the client's plus what the served child reports (the server's own imports are not counted), no strace
  figures (the child is not the client's); run by default when evalpipe has `serve`;
- `inspect`: `inspect eval benchmarks/peers/inspect_task.py` (Inspect AI, `openai-api/mock/mock-model`);
- `lm-eval`: `lm_eval --model local-chat-completions --tasks evalpipe_bench` (benchmarks/peers/lm_eval_bench.yaml).
The peers run from `.venv-peers/` (`make bench-peers`); without it they are skipped with a note.

    .venv/bin/python benchmarks/bench_light_run.py [--repeat 3] [--n 1000] [--json results.json]

Wall and CPU (user+sys of the CLI process and its children, from wait4) are medians over `--repeat` rounds, the
contenders in an order rotated each round so the machine's load hits them alike; ratios (to the import floor, to
`evalpipe`) are taken within each round, then their median. Seconds are printed with the machine named.
Every contender runs with `PYTHONDONTWRITEBYTECODE` unset, as a user's interpreter would (a sandbox that sets it makes
each CLI start recompile its sources: 0.5-0.7 s of CPU more per evalpipe run).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.common import (check_repeat, load, machine, rotated, served_cpu, start_warm_server,  # noqa: E402
                               stop_warm_server,
                               target_line, today, write_json)
from benchmarks.mock_server import start_subprocess as start_server  # noqa: E402
PEERS_BIN = ROOT / ".venv-peers" / "bin"
PEERS_DIR = ROOT / "benchmarks" / "peers"
FLOOR = "import-floor"  # what any Dagster + pandas + DuckDB tool pays before its first line of work
DAGSTER_FLOOR = "dagster-floor"  # ... plus the instance and one trivial six-asset run recorded in it
LABELS = {
    "evalpipe": "evalpipe, fast path, its instance storage",
    "evalpipe-stock": "evalpipe, fast path, Dagster's default SQLite storage",
    "evalpipe-echo": "evalpipe, echo runner (no HTTP), its instance storage",
    "evalpipe-warm": "evalpipe, fast path, `evalpipe serve` running (warm)",
    "inspect": "Inspect AI 0.3.285 (`inspect eval`)",
    "lm-eval": "lm-eval 0.4.13 (`lm_eval`)",
    FLOOR: "import floor: `python -c 'import dagster, pandas, duckdb'`",
    DAGSTER_FLOOR: "Dagster floor: import floor + open the instance + a trivial six-asset run (`dagster_floor.py`)",
}
PEERS = ("inspect", "lm-eval")
TARGETS = {"one_s": 2.0, "cached_s": 1.5, "written_mb": 2.0}  # issue 15, seconds on the machine named
FLOOR_TARGETS = {"one": 1.5, "cached": 1.3}  # issue 24: a cold run's CPU / the import floor's, same round
CONCURRENCY = 100
HAS_WARM = (ROOT / "evalpipe" / "cli" / "warm.py").exists()


def write_data(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"s{i}", "question": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n")


class Contender:
    """One tool: how to lay out a fresh state folder and the command line of a run in it."""

    def __init__(self, name: str, data: Path, base_url: str, work: Path):
        self.name, self.data, self.base_url, self.work = name, data, base_url, work
        self.servers: dict[Path, tuple[subprocess.Popen, Path]] = {}  # evalpipe-warm: state -> (server, its log)

    def prepare(self, state: Path) -> None:
        self.stop_server(state)
        shutil.rmtree(state, ignore_errors=True)
        (state / "home").mkdir(parents=True)
        if self.name.startswith("evalpipe") or self.name == DAGSTER_FLOOR:
            stock = self.name == "evalpipe-stock"
            if stock:
                (state / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
            else:
                shutil.copy(ROOT / "dagster_home" / "dagster.yaml", state / "dagster.yaml")
            model = ("  m: {runner: echo, reply: target}\n" if self.name == "evalpipe-echo" else
                     f"  m: {{runner: litellm, model: openai/mock-model, api_base: '{self.base_url}', "
                     "params: {temperature: 0, max_tokens: 16}}\n")
            (state / "evals.yaml").write_text(
                f"benchmarks:\n  bench:\n    adapter: file\n    splits: {{test: {{path: {self.data}}}}}\n"
                "    options: {columns: {prompt: question, target: answer, id: id}}\n    metrics: [exact_match]\n"
                f"models:\n{model}default_models: [m]\ndefault_benchmarks: [bench]\nartifacts: {{enabled: false}}\n")
            # An existing instance, as a user's would be: its one-time creation is not billed to the run.
            subprocess.run([sys.executable, "-c", "from dagster import DagsterInstance; DagsterInstance.get()"],
                           env=self.env(state), check=True, cwd=ROOT)
            if self.name == "evalpipe-warm":
                self.start_server(state)
        elif self.name == "lm-eval":
            shutil.copy(self.data, state / "bench.jsonl")  # the task YAML reads ./bench.jsonl

    def start_server(self, state: Path) -> None:
        log = state.parent / f"{state.name}.serve.log"
        self.servers[state] = (start_warm_server(self.env(state), ROOT, state, log), log)

    def stop_server(self, state: Path) -> None:
        if state in self.servers:
            server, _ = self.servers.pop(state)
            stop_warm_server(server)

    def served_cpu(self, state: Path, lines_before: int) -> float:
        """CPU of the child the warm server forked for the last run (it reports it in the server's log)."""
        return served_cpu(self.servers[state][1], lines_before)

    def log_lines(self, state: Path) -> int:
        return len(self.servers[state][1].read_text(errors="replace").splitlines()) if state in self.servers else 0

    def env(self, state: Path) -> dict[str, str]:
        home = state / "home"
        # Every cache and log of every tool inside the state folder: nothing shared between runs that shouldn't
        # be, nothing downloaded (HF offline), and strace sees all the bytes each one writes.
        env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
               "XDG_DATA_HOME": str(home / ".local" / "share"), "XDG_CONFIG_HOME": str(home / ".config"),
               "HF_HOME": str(home / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "NO_COLOR": "1"}
        # A user's interpreter writes and reuses .pyc files; a sandbox's PYTHONDONTWRITEBYTECODE=1 would make every
        # contender recompile its sources on each start (0.5-0.7 s of CPU per evalpipe run, less for the floor).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if self.name.startswith("evalpipe") or self.name == DAGSTER_FLOOR:
            env.update(DAGSTER_HOME=str(state), EVALS_CONFIG=str(state / "evals.yaml"), PYTHONPATH=str(ROOT),
                       LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true")
        elif self.name == "inspect":
            env.update(MOCK_API_KEY="no-key", INSPECT_CACHE_DIR=str(state / "cache"))
        elif self.name == "lm-eval":
            env.update(OPENAI_API_KEY="no-key")
        return env

    def cwd(self, state: Path) -> Path:
        return ROOT if self.name.startswith("evalpipe") or self.name in (FLOOR, DAGSTER_FLOOR) else state

    def command(self, state: Path, limit: int | None) -> list[str]:
        if self.name == FLOOR:
            return [sys.executable, "-c", "import dagster, pandas, duckdb"]
        if self.name == DAGSTER_FLOOR:
            return [sys.executable, str(ROOT / "benchmarks" / "dagster_floor.py")]
        if self.name.startswith("evalpipe"):
            cmd = [sys.executable, "-m", "evalpipe.cli.main", "run", "--no-progress", "--concurrency", str(CONCURRENCY)]
        elif self.name == "inspect":
            cmd = [str(PEERS_BIN / "inspect"), "eval", f"{PEERS_DIR / 'inspect_task.py'}@bench",
                   "-T", f"data={self.data}", "--model", "openai-api/mock/mock-model",
                   "--model-base-url", self.base_url, "--max-connections", str(CONCURRENCY), "--cache", "true",
                   "--temperature", "0", "--max-tokens", "16", "--display", "none", "--log-dir", str(state / "logs")]
        else:
            cmd = [str(PEERS_BIN / "lm_eval"), "--model", "local-chat-completions", "--model_args",
                   f"model=mock-model,base_url={self.base_url}/chat/completions,num_concurrent={CONCURRENCY},"
                   "max_retries=1,tokenizer_backend=None", "--include_path", str(PEERS_DIR),
                   "--tasks", "evalpipe_bench", "--apply_chat_template", "--use_cache", str(state / "cache" / "lm"),
                   "--output_path", str(state / "results")]
        return cmd + (["--limit", str(limit)] if limit else [])


def mock_requests(base_url: str) -> int:
    with urllib.request.urlopen(f"{base_url}/stats", timeout=10) as resp:
        return int(json.load(resp)["requests"])


def timed(c: Contender, state: Path, limit: int | None, prefix: list[str] | None = None) -> dict:
    """One run: wall, CPU (user+sys of the process and every child it waited for) and the requests it sent."""
    sent0 = mock_requests(c.base_url)
    log = state.parent / f"{state.name}.log"
    served0 = c.log_lines(state)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen((prefix or []) + c.command(state, limit), env=c.env(state), cwd=c.cwd(state),
                                stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{c.name} run failed (exit {proc.returncode}): {' '.join(c.command(state, limit))}\n"
                         + log.read_text(errors="replace")[-3000:])
    cpu = usage.ru_utime + usage.ru_stime
    if c.name == "evalpipe-warm":
        cpu += c.served_cpu(state, served0)
    return {"wall_s": wall, "cpu_s": cpu, "requests": mock_requests(c.base_url) - sent0}


def written(c: Contender, state: Path, limit: int | None = 1) -> dict | None:
    """Bytes written and fsyncs of one run, under the contender's state folder, from strace."""
    if not shutil.which("strace") or c.name in ("evalpipe-warm", FLOOR, DAGSTER_FLOOR):
        return None
    trace = state.parent / f"{state.name}.strace"
    timed(c, state, limit, ["strace", "-f", "-y", "-qq", "-o", str(trace), "-e",
                        "trace=write,pwrite64,writev,pwritev,fsync,fdatasync"])
    by, syncs = Counter(), 0
    root = str(state)
    for line in trace.read_text(errors="replace").splitlines():
        m = re.search(r"(?:write|pwrite64|writev|pwritev)\(\d+<([^>]*)>.*=\s+(\d+)$", line)
        if m and m.group(1).startswith(root + "/"):
            top = Path(m.group(1)).relative_to(root).parts[0]
            kind = "instance" if c.name.startswith("evalpipe") and top in ("history", "schedules", "storage") \
                else "other"
            by[kind] += int(m.group(2))
        if re.search(r"f(?:data)?sync\(\d+<" + re.escape(root) + "/", line):
            syncs += 1
    trace.unlink()
    return {"written_mb": (by["instance"] + by["other"]) / 1e6,
            "instance_mb": by["instance"] / 1e6 if c.name.startswith("evalpipe") else None, "fsyncs": syncs}




def measure(names: list[str], n: int, repeat: int, latency: float) -> dict:
    """Each round: every contender's 1-sample run, then its first run of the N samples in a fresh state, then its
    cached re-run of them; within each phase the contenders run in an order rotated by one per round. Every figure
    is the median over the rounds; a ratio to the import floor is taken within the round, then its median."""
    work = Path(tempfile.mkdtemp(prefix="evalpipe-light-"))
    server, url = start_server(latency)
    data = work / "bench.jsonl"
    write_data(data, n)
    rows: dict[str, dict] = {name: {"one": [], "first": [], "cached": []} for name in names}
    try:
        contenders = {name: Contender(name, data, url, work) for name in names}
        for r in range(repeat):
            order = rotated(names, r)
            for name in order:
                c = contenders[name]
                c.prepare(work / f"one-{name}")
                rows[name]["one"].append(timed(c, work / f"one-{name}", 1))
            for name in order:  # the state the cached re-run reads, fresh each round
                c = contenders[name]
                c.prepare(work / f"cached-{name}")
                rows[name]["first"].append(timed(c, work / f"cached-{name}", None))
            for name in order:
                rows[name]["cached"].append(timed(contenders[name], work / f"cached-{name}", None))
        for name, c in contenders.items():
            if name in (FLOOR, DAGSTER_FLOOR):
                continue
            c.prepare(work / f"io-{name}")
            rows[name]["io"] = written(c, work / f"io-{name}")
            if name in ("evalpipe", "evalpipe-stock", "evalpipe-echo"):  # the target is per run: a re-run too
                rows[name]["io_cached"] = written(c, work / f"cached-{name}", None)
    finally:
        for c in locals().get("contenders", {}).values():
            for state in list(c.servers):
                c.stop_server(state)
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)
    for name, r in rows.items():
        bad = [x["requests"] for x in r["cached"] if x["requests"]]
        if bad:
            raise SystemExit(f"{name}: the cached re-run sent {bad[0]} requests to the mock; its cache did not hold")
    for key in ("one", "first", "cached"):
        floor = rows[FLOOR][key] if FLOOR in rows else None
        dagster_floor = rows[DAGSTER_FLOOR][key] if DAGSTER_FLOOR in rows else None
        base = rows["evalpipe"][key] if "evalpipe" in rows else None
        for name, r in rows.items():
            runs = r[key]
            ratio = {}
            if floor:
                ratio["cpu_x_floor"] = statistics.median(x["cpu_s"] / f["cpu_s"] for x, f in zip(runs, floor))
                ratio["wall_x_floor"] = statistics.median(x["wall_s"] / f["wall_s"] for x, f in zip(runs, floor))
            if dagster_floor:
                ratio["cpu_x_dagster_floor"] = statistics.median(x["cpu_s"] / f["cpu_s"]
                                                                 for x, f in zip(runs, dagster_floor))
            if base:
                ratio["wall_x_evalpipe"] = statistics.median(x["wall_s"] / b["wall_s"] for x, b in zip(runs, base))
                ratio["cpu_x_evalpipe"] = statistics.median(x["cpu_s"] / b["cpu_s"] for x, b in zip(runs, base))
            r[key] = {"wall_s": statistics.median(x["wall_s"] for x in runs),
                      "cpu_s": statistics.median(x["cpu_s"] for x in runs), **ratio, "runs": runs}
    return rows


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def table(rows: dict, n: int) -> str:
    def x(r: dict, key: str, ratio: str) -> str:
        return fmt(r[key].get(ratio))

    lines = [f"| contender | 1-sample run: CPU x import floor | CPU x Dagster floor | wall x evalpipe | cached re-run of "
             f"{n}: CPU x import floor | CPU x Dagster floor | wall x evalpipe | first run of {n}: wall x evalpipe | wall / CPU (s): 1-sample; cached; first | "
             "written per 1-sample run (MB) | of which instance storage (MB) | fsyncs | instance storage written "
             "per cached re-run (MB) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        io, again = r.get("io") or {}, r.get("io_cached") or {}
        secs = "; ".join(f"{r[k]['wall_s']:.2f} / {r[k]['cpu_s']:.2f}" for k in ("one", "cached", "first"))
        lines.append(f"| {LABELS[name]} | {x(r, 'one', 'cpu_x_floor')} | {x(r, 'one', 'cpu_x_dagster_floor')} | "
                     f"{x(r, 'one', 'wall_x_evalpipe')} | {x(r, 'cached', 'cpu_x_floor')} | "
                     f"{x(r, 'cached', 'cpu_x_dagster_floor')} | {x(r, 'cached', 'wall_x_evalpipe')} | "
                     f"{x(r, 'first', 'wall_x_evalpipe')} | {secs} | {fmt(io.get('written_mb'))} | "
                     f"{fmt(io.get('instance_mb'))} | {io.get('fsyncs', '-')} | {fmt(again.get('instance_mb'))} |")
    return "\n".join(lines)


def verdicts(rows: dict, n: int) -> list[str]:
    """The targets, each beside its floor or peer from the same run: issue 24's cold runs against the import
    floor, issue 15's seconds (on the machine named) with `evalpipe serve` running, the bytes written."""
    ours = rows.get("evalpipe")
    if not ours:
        return []
    io, again = ours.get("io") or {}, ours.get("io_cached") or {}
    warm = rows.get("evalpipe-warm")

    def peers(key: str) -> str:
        got = [f"{LABELS[p].split(' (')[0]} {rows[p][key]['wall_x_evalpipe']:.2f}x evalpipe's wall"
               for p in PEERS if p in rows]
        return f"; same run: {', '.join(got)}" if got else ""

    def met(value: float | None, target: float) -> str:
        return "n/a" if value is None else ("met" if value <= target else "not met")

    lines = []
    for key, what in (("one", "cold 1-sample run, CPU"), ("cached", f"cold cached re-run of {n}, CPU")):
        if FLOOR in rows:
            beside = ""
            if DAGSTER_FLOOR in rows:  # how much of the ratio Dagster itself takes before evalpipe's own work
                beside = (f"; {ours[key]['cpu_x_dagster_floor']:.2f}x the Dagster floor, which is itself "
                          f"{rows[DAGSTER_FLOOR][key]['cpu_x_floor']:.2f}x the import floor")
            lines.append(target_line(what, ours[key]["cpu_x_floor"], "the import floor", FLOOR_TARGETS[key],
                                     detail=f"wall {ours[key]['wall_x_floor']:.2f}x" + beside + peers(key)))
    for key, what in (("one", "1-sample run"), ("cached", f"cached re-run of {n}")):
        target = TARGETS[key + "_s"]
        got = [f"evalpipe cold {ours[key]['wall_s']:.2f} s: {met(ours[key]['wall_s'], target)}"]
        if warm:
            got.append(f"with `evalpipe serve` running {warm[key]['wall_s']:.2f} s "
                       f"({warm[key]['wall_x_evalpipe']:.2f}x cold): {met(warm[key]['wall_s'], target)}")
        lines.append(f"- {what}, target <= {target:g} s on this machine: {'; '.join(got)}")
    lines.append(f"- written per run beyond the data (the instance storage), target <= {TARGETS['written_mb']:g} MB: "
                 f"{fmt(io.get('instance_mb'))} MB in a 1-sample run: {met(io.get('instance_mb'), TARGETS['written_mb'])}; "
                 f"{fmt(again.get('instance_mb'))} MB in a cached re-run: "
                 f"{met(again.get('instance_mb'), TARGETS['written_mb'])}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.1, help="mock server latency per request, seconds")
    ap.add_argument("--contenders", default=f"{FLOOR},{DAGSTER_FLOOR},evalpipe," + ("evalpipe-warm," if HAS_WARM else "")
                    + "evalpipe-stock,inspect,lm-eval",
                    help=f"comma list of: {', '.join(LABELS)}")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures and the table to this file")
    args = ap.parse_args()
    check_repeat(args.repeat)
    names = [x.strip() for x in args.contenders.split(",") if x.strip()]
    unknown = [x for x in names if x not in LABELS]
    if unknown:
        raise SystemExit(f"unknown contender {unknown[0]!r}: choose from {', '.join(LABELS)}")
    if any(p in names for p in PEERS) and not (PEERS_BIN / "inspect").exists():
        print(f"peers (Inspect AI, lm-eval) are not installed in {PEERS_BIN.parent.name}/: get them with "
              "`make bench-peers`; measuring evalpipe only", flush=True)
        names = [x for x in names if x not in PEERS]
    load_before = load()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the mock and the warm servers
    rows = measure(names, args.n, args.repeat, args.latency)
    load_after = load()
    header = (f"One whole run from the CLI, each figure the median of {args.repeat} rounds in a rotating order "
              f"(ratios taken within each round), mock latency {args.latency * 1000:g} ms, concurrency "
              f"{CONCURRENCY}; seconds on {machine()}, load average {load_before} before / {load_after} after, "
              f"{today()}")
    targets = verdicts(rows, args.n)
    md = f"{header}\n\n{table(rows, args.n)}\n\n" + "\n".join(targets)
    print(md.rstrip())
    write_json(args.json, "light_run", md.rstrip(), targets, n=args.n, repeat=args.repeat, latency_s=args.latency,
               load_before=load_before, load_after=load_after, rows=rows)


if __name__ == "__main__":
    main()
