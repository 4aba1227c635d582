"""`make bench`: run the speed benchmarks one after another, print their tables, and (`--write-readme`) put the
figures just measured into README.md's Speed section, so it never shows stale ones.

    .venv/bin/python benchmarks/readme_speed.py                  # measure and print (make bench)
    .venv/bin/python benchmarks/readme_speed.py --write-readme   # ... and regenerate README's tables (make bench-readme)
    .venv/bin/python benchmarks/readme_speed.py --results DIR --skip-run --write-readme   # from earlier results

Every benchmark writes its figures with `--json`: its table (ratios to a floor or peer from the same run first,
seconds with the machine named), its parameters, load average and date, and its target lines. Each table replaces
the block between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in README.md; at the end every target is printed
again beside its floor or peer, in one list.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GENERATED = ("rollouts", "light_run", "tools", "sandbox", "local_batch", "scale", "sweep")  # README shows each one's table
OTHERS: tuple[str, ...] = ()
# arguments a benchmark gets under `make bench` before the common ones (a later --repeat overrides its own)
ARGS = {"scale": ["--sizes", "10000", "--modes", "cold,warm", "--repeat", "3"]}


def run_all(results: Path, names: list[str], repeat: int | None, light_run_args: list[str]) -> None:
    for name in names:
        cmd = [sys.executable, str(ROOT / "benchmarks" / f"bench_{name}.py"), *ARGS.get(name, [])]
        if name in GENERATED:
            cmd += ["--json", str(results / f"{name}.json")]
        if repeat:
            cmd += ["--repeat", str(repeat)]
        if name == "light_run":
            cmd += light_run_args
        print(f"\n== {' '.join(cmd[1:])}", flush=True)
        if subprocess.run(cmd, cwd=ROOT).returncode != 0:
            raise SystemExit(f"bench_{name}.py failed (its output is above); README.md left as it was")


def print_targets(results: Path, names: list[str]) -> None:
    """Every target of the run, each beside its floor or peer (the benchmarks' own lines, gathered)."""
    lines = []
    for name in names:
        file = results / f"{name}.json"
        if file.exists():
            lines += [f"[{name}] {t.lstrip('- ')}" for t in json.loads(file.read_text()).get("targets", [])]
    if lines:
        print("\n== targets, each beside its floor or peer from the same run\n" + "\n".join(lines))


def write_readme(results: Path, names: list[str]) -> None:
    text = README.read_text()
    for name in names:
        if name not in GENERATED:
            continue
        file = results / f"{name}.json"
        if not file.exists():
            raise SystemExit(f"no results for {name} in {results}: run without --skip-run, or point --results at "
                             "the folder an earlier run wrote")
        block = json.loads(file.read_text())["markdown"]
        begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise SystemExit(f"README.md has no {begin} ... {end} block for the {name} table: add the two "
                             "markers in its Speed section")
        text = pattern.sub(lambda _: f"{begin}\n{block}\n{end}", text, count=1)
    README.write_text(text)
    print(f"\nREADME.md: Speed tables regenerated ({', '.join(n for n in names if n in GENERATED)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-readme", action="store_true", help="regenerate README.md's Speed tables")
    ap.add_argument("--only", default=",".join(GENERATED + OTHERS),
                    help=f"comma list of benchmarks to run (default: {','.join(GENERATED + OTHERS)})")
    ap.add_argument("--results", type=Path, default=None, help="folder for the JSON results (default: a temp one)")
    ap.add_argument("--skip-run", action="store_true", help="measure nothing; use the JSON already in --results")
    ap.add_argument("--repeat", type=int, default=None, help="rounds of every benchmark (default: theirs, 3)")
    ap.add_argument("--contenders", default=None, help="bench_light_run.py's --contenders")
    args = ap.parse_args()
    names = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = [x for x in names if x not in GENERATED + OTHERS]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}: choose from {', '.join(GENERATED + OTHERS)}")
    if args.skip_run and not args.results:
        raise SystemExit("--skip-run needs --results DIR (the folder an earlier run wrote its JSON to)")
    with tempfile.TemporaryDirectory() as tmp:
        results = args.results or Path(tmp)
        results.mkdir(parents=True, exist_ok=True)
        if not args.skip_run:
            run_all(results, names, args.repeat, ["--contenders", args.contenders] if args.contenders else [])
        print_targets(results, names)
        if args.write_readme:
            write_readme(results, names)


if __name__ == "__main__":
    main()
