"""What every benchmark shares, so none of them can flatter: rounds in a rotating order, medians, the machine named.

- `rounds(jobs, repeat)`: every contender (the product's paths, the floors, the peers) runs once per round, the
  order rotated by one each round, so a slow spell of a shared machine does not always hit the same one; each
  figure is then the median over the rounds (`median_row`).
- `machine()`: the CPU model and count, so absolute seconds are never printed without the machine they describe.
- `target_line(...)`: one target beside its floor or peer from the same run, as `make bench` prints it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Sequence

MIN_ROUNDS = 3  # the docs cite medians: one or two rounds are not a median


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """`names` in the order of round `round_index`: the first one moves to the back each round."""
    if not names:
        return []
    k = round_index % len(names)
    return list(names[k:]) + list(names[:k])


def rounds(jobs: dict[str, Callable[[int], dict]], repeat: int,
           after_each: Callable[[str, int, dict], None] | None = None) -> dict[str, list[dict]]:
    """Run every job once per round, `repeat` rounds, in an order rotated each round; {name: [its rounds' dicts]}.
    A job gets the round's index (for a fresh work folder)."""
    out: dict[str, list[dict]] = {name: [] for name in jobs}
    names = list(jobs)
    for r in range(repeat):
        for name in rotated(names, r):
            got = jobs[name](r)
            out[name].append(got)
            if after_each:
                after_each(name, r, got)
    return out


def median_row(rows: list[dict], keys: Iterable[str]) -> dict:
    """One contender's rounds as one row: the median of each of `keys` (NaN-free values only), the other fields of
    the first round, and how many rounds."""
    out = dict(rows[0])
    for key in keys:
        values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
        out[key] = statistics.median(values) if values else float("nan")
    out["rounds"] = len(rows)
    return out


def check_repeat(repeat: int) -> None:
    """Fewer than MIN_ROUNDS rounds is allowed (a quick check of the script) but said loudly."""
    if repeat < MIN_ROUNDS:
        print(f"note: --repeat {repeat} < {MIN_ROUNDS}: a quick check, not a median to cite", flush=True)


def machine() -> str:
    """The machine the absolute figures describe: CPU model, CPU count, OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} CPUs, {platform.system()} {platform.release().split('-')[0]}"


def load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def today() -> str:
    return datetime.date.today().isoformat()


def met(value: float, target: float, higher_is_better: bool = False) -> str:
    if value != value:
        return "n/a"
    return "met" if (value >= target if higher_is_better else value <= target) else "not met"


def target_line(what: str, value: float, floor: str, target: float, higher_is_better: bool = False,
                detail: str = "") -> str:
    """`- <what>: 1.07x <floor> (target <= 1.2x): met`, the ratio and its floor from the same run."""
    sign = ">=" if higher_is_better else "<="
    return (f"- {what}: {value:.2f}x {floor} (target {sign} {target:g}x): {met(value, target, higher_is_better)}"
            + (f"; {detail}" if detail else ""))


def write_json(path: Path | None, name: str, markdown: str, targets: list[str], **figures) -> None:
    """The figures, the printed table (README's block) and the target lines, for benchmarks/readme_speed.py."""
    if path is None:
        return
    path.write_text(json.dumps({"benchmark": name, "date": today(), "machine": machine(), "markdown": markdown,
                                "targets": targets, **figures}, indent=1, default=str))


# ---- `evalpipe serve` as a contender (bench_light_run's evalpipe-warm, bench_scale's warm mode) -----------------
SERVED = re.compile(r"evalpipe serve: pid (\d+) exited (-?\d+) after [\d.]+ s, CPU ([\d.]+) s")


def start_warm_server(env: dict[str, str], cwd: Path, home: Path, log: Path) -> subprocess.Popen:
    """`evalpipe serve` for DAGSTER_HOME `home`, returned once it listens (it warms up on a 1-sample run first):
    started before the clock, as a user who keeps it running would have it."""
    server = subprocess.Popen([sys.executable, "-m", "evalpipe.cli.main", "serve", "--idle-s", "3600"], env=env,
                              cwd=str(cwd), stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while not (home / ".evalpipe-warm.sock").exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit(f"evalpipe serve did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    return server


def served_cpu(log: Path, lines_before: int = 0) -> float:
    """CPU of the child the server forked for the last run, from the line it writes to its log on exit (the child
    tells the client its exit code first, then logs its CPU: wait up to 10 s for it)."""
    deadline = time.monotonic() + 10
    while True:
        lines = log.read_text(errors="replace").splitlines()[lines_before:]
        found = [m for m in map(SERVED.search, lines) if m]
        if found or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not found:
        raise SystemExit(f"the warm server did not serve the run (it ran cold): {log}\n"
                         + log.read_text(errors="replace")[-2000:])
    return float(found[-1].group(3))


def stop_warm_server(server: subprocess.Popen) -> None:
    """Stop a server from `start_warm_server`: SIGTERM (a run in flight finishes), then SIGKILL after 30 s."""
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
