"""`make bench`: run the speed benchmarks one after another, print their tables, and (`--write-readme`) put the
figures just measured into docs/speed.md's tables and README.md's Speed headlines, so neither shows stale ones.

    .venv/bin/python benchmarks/readme_speed.py                  # measure and print (make bench)
    .venv/bin/python benchmarks/readme_speed.py --write-readme   # ... and docs/speed.md, README's headlines
    .venv/bin/python benchmarks/readme_speed.py --results DIR --skip-run --write-readme   # from earlier results

Every benchmark writes its figures with `--json`: its table (ratios to a floor or peer from the same run first,
seconds with the machine named), its parameters, load average and date, and its target lines. Each table replaces
the block between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` in docs/speed.md, and the target lines that
HEADLINE picks replace the block between `<!-- headline:NAME -->` and `<!-- /headline:NAME -->` in README.md's
Speed summary; at the end every target is printed again beside its floor or peer, in one list.
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
SPEED = ROOT / "docs" / "speed.md"
GENERATED = ("rollouts", "light_run", "tools", "sandbox", "local_batch", "scale", "sweep")  # docs/speed.md: each table
# README's Speed summary: which of a benchmark's target lines (by position) it shows as headlines
HEADLINE: dict[str, tuple[int, ...]] = {"light_run": (0, 1), "rollouts": (0,), "sandbox": (0,), "local_batch": (0,),
                                         "sweep": (1, 2, 3, 5)}
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
            raise SystemExit(f"bench_{name}.py failed (its output is above); docs/speed.md and README.md left as "
                             "they were")


def print_targets(results: Path, names: list[str]) -> None:
    """Every target of the run, each beside its floor or peer (the benchmarks' own lines, gathered)."""
    lines = []
    for name in names:
        file = results / f"{name}.json"
        if file.exists():
            lines += [f"[{name}] {t.lstrip('- ')}" for t in json.loads(file.read_text()).get("targets", [])]
    if lines:
        print("\n== targets, each beside its floor or peer from the same run\n" + "\n".join(lines))


def _replace_block(text: str, file: str, tag: str, name: str, block: str) -> str:
    begin, end = f"<!-- {tag}:{name} -->", f"<!-- /{tag}:{name} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{file} has no {begin} ... {end} block for the {name} figures: add the two markers "
                         "where they belong (docs/speed.md: a table; README.md: its Speed summary)")
    return pattern.sub(lambda _: f"{begin}\n{block}\n{end}", text, count=1)


def write_readme(results: Path, names: list[str]) -> None:
    """docs/speed.md's table of each benchmark run, and README.md's headline lines picked from its targets; both
    files are checked for every marker before either is written."""
    speed, readme = SPEED.read_text(), README.read_text()
    written = [n for n in names if n in GENERATED]
    for name in written:
        file = results / f"{name}.json"
        if not file.exists():
            raise SystemExit(f"no results for {name} in {results}: run without --skip-run, or point --results at "
                             "the folder an earlier run wrote")
        figures = json.loads(file.read_text())
        speed = _replace_block(speed, "docs/speed.md", "bench", name, figures["markdown"])
        if name in HEADLINE:
            targets = figures.get("targets", [])
            lines = [targets[i] for i in HEADLINE[name] if i < len(targets)]
            readme = _replace_block(readme, "README.md", "headline", name, "\n".join(lines))
    SPEED.write_text(speed)
    README.write_text(readme)
    print(f"\ndocs/speed.md: tables regenerated ({', '.join(written)}); README.md: headlines of "
          f"{', '.join(n for n in written if n in HEADLINE) or 'none'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-readme", action="store_true",
                    help="regenerate docs/speed.md's tables and README.md's Speed headlines")
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
