"""The benchmarks' shared rules (benchmarks/common.py) and README regeneration (benchmarks/readme_speed.py):
contenders rotate each round, figures are medians, every table lands between its markers."""
from __future__ import annotations

import json
import re

import pytest

from benchmarks import common, readme_speed


def test_every_contender_runs_each_round_in_a_rotated_order():
    seen: list[tuple[int, str]] = []
    jobs = {name: (lambda r, name=name: seen.append((r, name)) or {"wall_s": float(r)}) for name in "abc"}
    out = common.rounds(jobs, 3)
    assert [n for r, n in seen] == list("abc" "bca" "cab")  # each one first once: no fixed slot for the peers
    assert [x["wall_s"] for x in out["c"]] == [0.0, 1.0, 2.0]


def test_median_row_takes_the_median_and_skips_nan():
    rows = [{"path": "fast", "wall_s": 3.0, "rerun_s": float("nan")}, {"path": "fast", "wall_s": 1.0,
            "rerun_s": 0.2}, {"path": "fast", "wall_s": 2.0, "rerun_s": 0.4}]
    row = common.median_row(rows, ("wall_s", "rerun_s"))
    assert (row["wall_s"], row["rerun_s"], row["rounds"]) == (2.0, pytest.approx(0.3), 3)


def test_target_line_names_the_floor_and_the_verdict():
    assert common.target_line("x", 1.25, "the bare loop", 1.2) == "- x: 1.25x the bare loop (target <= 1.2x): not met"
    assert common.target_line("y", 3.6, "unbatched", 3.5, higher_is_better=True).endswith(": met")
    assert "CPUs" in common.machine()


def test_write_readme_fills_speed_md_tables_and_readme_headline_and_says_which_marker_is_missing(tmp_path,
                                                                                                   monkeypatch):
    speed, readme = tmp_path / "speed.md", tmp_path / "README.md"
    speed.write_text("# Speed\n<!-- bench:rollouts -->\nold\n<!-- /bench:rollouts -->\ntail\n")
    readme.write_text("## Speed\n<!-- headline:rollouts -->\n- old\n<!-- /headline:rollouts -->\nmore\n")
    monkeypatch.setattr(readme_speed, "SPEED", speed)
    monkeypatch.setattr(readme_speed, "README", readme)
    monkeypatch.setitem(readme_speed.HEADLINE, "rollouts", (1,))
    (tmp_path / "rollouts.json").write_text(json.dumps({"markdown": "new table\n\n- a: 1x\n- b: 2x",
                                                         "targets": ["- a: 1x", "- b: 2x"]}))
    readme_speed.write_readme(tmp_path, ["rollouts"])
    assert speed.read_text() == "# Speed\n<!-- bench:rollouts -->\nnew table\n\n- a: 1x\n- b: 2x\n" \
                                "<!-- /bench:rollouts -->\ntail\n"
    assert readme.read_text() == "## Speed\n<!-- headline:rollouts -->\n- b: 2x\n<!-- /headline:rollouts -->\nmore\n"
    (tmp_path / "sandbox.json").write_text(json.dumps({"markdown": "m", "targets": []}))
    with pytest.raises(SystemExit, match="docs/speed.md has no <!-- bench:sandbox -->"):
        readme_speed.write_readme(tmp_path, ["sandbox"])
    speed.write_text("<!-- bench:sandbox -->\n<!-- /bench:sandbox -->\n")
    monkeypatch.setitem(readme_speed.HEADLINE, "sandbox", (0,))
    with pytest.raises(SystemExit, match="README.md has no <!-- headline:sandbox -->"):
        readme_speed.write_readme(tmp_path, ["sandbox"])


def test_docs_speed_has_a_block_for_every_generated_benchmark_and_readme_none():
    text = readme_speed.SPEED.read_text()
    for name in readme_speed.GENERATED:
        assert f"<!-- bench:{name} -->" in text and f"<!-- /bench:{name} -->" in text
    assert "<!-- bench:" not in readme_speed.README.read_text()  # README keeps headlines only, the tables live in docs


def test_readme_headline_lines_are_the_target_lines_of_the_docs_speed_tables():
    """README's Speed summary is what `--write-readme` writes: each headline is one target line of docs/speed.md's
    table of the same benchmark, so the front door can't show a figure the tables don't."""
    readme, speed = readme_speed.README.read_text(), readme_speed.SPEED.read_text()
    for name, picks in readme_speed.HEADLINE.items():
        head = re.search(rf"<!-- headline:{name} -->\n(.*?)<!-- /headline:{name} -->", readme, re.S)
        table = re.search(rf"<!-- bench:{name} -->\n(.*?)<!-- /bench:{name} -->", speed, re.S)
        assert head and table, name
        targets = [line for line in table.group(1).splitlines() if line.startswith("- ")]
        assert head.group(1).splitlines() == [targets[i] for i in picks], name


def test_light_run_contenders_write_bytecode_like_a_user_interpreter(tmp_path, monkeypatch):
    from benchmarks import bench_light_run

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # what this sandbox sets
    for name in ("evalpipe", bench_light_run.FLOOR, "inspect"):
        env = bench_light_run.Contender(name, tmp_path / "d.jsonl", "http://x", tmp_path).env(tmp_path / "s")
        assert "PYTHONDONTWRITEBYTECODE" not in env, name
