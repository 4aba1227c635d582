"""`evalpipe tools` and `evalpipe tools check` (the broker smoke check as a command)."""
import json
from pathlib import Path

from click.testing import CliRunner

from evalpipe.cli.main import main
from tests.helpers.configs import tooluse_benchmark

TOOLUSE = Path(__file__).resolve().parents[1] / "data" / "tooluse"


def test_tools_lists_each_split_and_check_passes_on_the_shipped_fixtures(write_config):
    write_config(tooluse_benchmark(python=True, metrics=None) + """models:
  m: {runner: echo}
""")
    r = CliRunner().invoke(main, ["tools"])
    assert r.exit_code == 0, r.output
    listed = r.output.split("registered tools: ", 1)[1].split("\n", 1)[0].split(", ")
    # the built-ins, plus any `@evalpipe.tool` functions an earlier test in this process defined (`name@fingerprint`)
    assert [t for t in listed if "@" not in t] == ["bash", "python"]
    assert "schemas:   web.search, weather.current, math.factorial, stocks.quote, python" in r.output
    assert "fixtures:  22 in" in r.output and "tool_registry_sha256: " in r.output
    r = CliRunner().invoke(main, ["tools", "check"])
    assert r.exit_code == 0 and "tooluse/test: 117/117 variants of 22 fixtures hit (100.0%) ok" in r.output


def test_check_fails_when_fixture_keys_do_not_survive_normalization(tmp_path, write_config):
    fx = tmp_path / "fx"
    fx.mkdir()
    # a lookup that spells keys inconsistently (a normalization bug) must fail the check with exit 1
    (fx / "a.jsonl").write_text(json.dumps({"name": "web.search", "key": {"q": "x"}, "result": 1}) + "\n")
    write_config(f"""
benchmarks:
  b:
    adapter: file
    splits: {{test: {{path: {TOOLUSE}/test.jsonl}}}}
    options: {{columns: {{prompt: question, target: answer, id: id}}}}
    tools: {{fixtures: {fx}}}
models:
  m: {{runner: echo}}
""")
    import evalpipe.tools.replay as replay

    real = replay.normalized_key
    calls = {"n": 0}

    def flaky(name, args):  # every other lookup spelled differently: half the variants miss
        calls["n"] += 1
        return real(name, args) + ("x" if calls["n"] % 2 == 0 and calls["n"] > 1 else "")

    replay.normalized_key = flaky
    try:
        r = CliRunner().invoke(main, ["tools", "check"])
    finally:
        replay.normalized_key = real
    assert r.exit_code == 1, r.output
    assert "FAILED" in r.output and "miss: " in r.output


def test_run_the_tooluse_benchmark_from_the_cli(home, write_config):
    write_config(tooluse_benchmark() + f"""models:
  tooluse-scripted: {{runner: echo, reply: script, script: {TOOLUSE}/script.jsonl}}
""")
    r = CliRunner().invoke(main, ["run", "--benchmark", "tooluse", "--model", "tooluse-scripted", "--no-progress",
                                  "--tools-mode", "live"])
    assert r.exit_code == 0, r.output
    assert "exact_match" in r.output and "1.0" in r.output
    r = CliRunner().invoke(main, ["run", "--benchmark", "tooluse", "--model", "tooluse-scripted", "--tools-mode", "x"])
    assert r.exit_code == 2 and "'x' is not one of 'replay', 'live'" in r.output
