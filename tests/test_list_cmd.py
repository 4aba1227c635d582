"""`evalpipe list` (issue 22): a JSONL set's header line is not counted as a sample before the first load, and
bracketed text in descriptions is shown as written (not read as rich markup)."""
import json

from tests.helpers.cli import cli_in_process


def test_list_counts_without_the_header_line_and_keeps_brackets(home, write_config, tmp_path, monkeypatch):
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"__header__": {"version": "1.0.0"}}) + "\n"
                    + "".join(json.dumps({"id": f"i{i}", "q": "?", "a": "x"}) + "\n" for i in range(3)) + "\n")
    write_config(f"""
benchmarks:
  da:
    adapter: file
    description: "answers as @name[value], [bold]kept[/bold]"
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo, description: "says [x]"}}
""")
    cli = cli_in_process(monkeypatch)
    b = json.loads(cli("list", "--format", "json").output)["benchmarks"][0]
    assert b["samples"] == 3
    table = cli("list").output
    assert "answers as @name[value], [bold]kept[/bold]" in table and "says [x]" in table
    assert " 3 " in table.splitlines()[2]
