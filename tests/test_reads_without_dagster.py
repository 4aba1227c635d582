"""Commands that only read never import Dagster (issue 31): `evalpipe list`, `sql`, `leaderboard`, `view`,
`compare`, `summarize` run in a fresh process over a small warehouse, and Dagster must not be among the modules
that process imported. (Dagster alone costs ~1 s of a read command's start.) `sql` and `leaderboard` don't check
the config either: the redaction reads the secrets it needs from the raw YAML (evalpipe/project/redaction.py),
so neither pydantic's schema nor the adapter, runner and metric registries are imported (~0.5 s)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_reads import synthetic_metrics

ROOT = Path(__file__).resolve().parents[1]
# runs the CLI as `python -m evalpipe.cli.main ...` does, then names the Dagster modules it imported, and which of the
# modules named by its second argument
PROBE = ("import json, runpy, sys\n"
         "heavy = json.loads(sys.argv[2])\n"
         "sys.argv = ['evalpipe', *json.loads(sys.argv[1])]\n"
         "code = 0\n"
         "try:\n"
         "    runpy.run_module('evalpipe.cli.main', run_name='__main__')\n"
         "except SystemExit as exc:\n"
         "    code = exc.code or 0\n"
         "print('\\nDAGSTER=' + json.dumps(sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.'))[:5]))\n"
         "print('\\nHEAVY=' + json.dumps(sorted(m for m in sys.modules if m in heavy)))\n"
         "sys.exit(code)\n")


@pytest.fixture(scope="module")
def small_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("reads_home")
    synthetic_metrics(home / "warehouse.duckdb", models=2, splits=2)
    return home


# what checking a config, or running an evaluation, imports: a command that only reads results needs none of it
HEAVY = ("pydantic", "evalpipe.project.schema", "evalpipe.project.loader", "evalpipe.benchmarks", "evalpipe.runners",
         "evalpipe.pipeline.stages", "evalpipe.sandbox", "evalpipe.tools", "evalpipe.metrics.code_execution",
         "evalpipe.metrics.llm_judge", "rich")


def _probe(home: Path, *argv: str, config: Path | None = None) -> tuple[dict[str, list[str]], str]:
    """Run `evalpipe *argv` in a fresh process: ({"DAGSTER": Dagster modules, "HEAVY": HEAVY modules}, output)."""
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("EVALS_WAREHOUSE", None)
    if config is not None:
        env["EVALS_CONFIG"] = str(config)
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(list(argv)), json.dumps(HEAVY)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    found = {}
    for name in ("DAGSTER", "HEAVY"):
        marker = [line for line in proc.stdout.splitlines() if line.startswith(name + "=")]
        assert marker, proc.stdout + proc.stderr
        found[name] = json.loads(marker[-1].split("=", 1)[1])
    return found, proc.stdout + proc.stderr


def _dagster_modules(home: Path, *argv: str) -> tuple[list[str], str]:
    found, output = _probe(home, *argv)
    return found["DAGSTER"], output


@pytest.mark.parametrize("argv", [
    ("sql", "select count(*) AS n FROM metrics"),
    ("list",),
    ("leaderboard",),
    ("summarize",),
    ("compare", "model-000", "model-001", "--split", "bench0/split0"),
    ("view", "--split", "bench0/split0", "--model", "model-000"),
], ids=lambda a: a[0])
def test_read_commands_do_not_import_dagster(small_home, argv):
    imported, output = _dagster_modules(small_home, *argv)
    assert imported == [], f"evalpipe {' '.join(argv)} imported Dagster: {imported}\n{output[-2000:]}"


@pytest.mark.parametrize("argv", [("sql", "select count(*) AS n FROM metrics"), ("leaderboard",)], ids=lambda a: a[0])
def test_sql_and_leaderboard_check_no_config(small_home, argv):
    """The config is read for its secrets only (raw YAML), and the leaderboard comes from its own light module."""
    found, output = _probe(small_home, *argv, config=ROOT / "evals.yaml")
    assert found["HEAVY"] == [], f"evalpipe {' '.join(argv)} imported {found['HEAVY']}\n{output[-2000:]}"
    assert ("24" if argv[0] == "sql" else "model-000") in output, output[-2000:]


def test_a_repeated_list_checks_nothing_it_already_knows(small_home, tmp_path):
    """`evalpipe list` remembers that the config passed its check, the metrics of its splits and the samples of its
    files (evalpipe/project/listing.py): a second list of the same config, code and files imports neither the schema
    nor a registry, nor rich for its tables, and prints the same."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(small_home, home)
    first, out1 = _probe(home, "list", config=ROOT / "evals.yaml")
    second, out2 = _probe(home, "list", config=ROOT / "evals.yaml")
    assert "pydantic" in first["HEAVY"]  # the first one checked the config
    # (the loader parses the config it knows passed: parse_config, no schema)
    heavy = [m for m in second["HEAVY"] if m != "evalpipe.project.loader"]
    assert heavy == [], f"the second list imported {heavy}\n{out2[-2000:]}"
    assert second["DAGSTER"] == []
    strip = lambda out: out.split("\nDAGSTER=")[0]  # noqa: E731
    assert strip(out1) == strip(out2) and "gaia/validation" in out2 and " 29 " in out2


def test_sql_reads_the_warehouse(small_home):
    _, output = _dagster_modules(small_home, "sql", "select count(*) AS n FROM metrics", "--json")
    assert '"n":24' in output.replace(" ", "")  # 2 models x 2 splits x 3 metrics x 2 slices


# ---- the redaction reads the raw config: the same secrets masked as with the validated one ----------------------------
SECRETS_CONFIG = """
benchmarks:
  smoke: {adapter: file, splits: {test: {path: data/smoke/test.jsonl}}, options: {columns: {prompt: question, target: answer}}}
models:
  plain: {runner: echo}
  keyed: {runner: litellm, model: openai/gpt-x, api_key_env: ACME_CREDS}
  inline: {runner: litellm, model: openai/gpt-y, api_base: 'https://h.example/v1?key=query-secret-123',
           params: {extra_headers: {X-Custom-Auth: header-secret-456}, api_key: literal-secret-789}}
  exp: {runner: echo, api_key_env: OTHER_CREDS, options: {experiment: e1}}
tracing: {connection_string_env: MONITOR_CONN}
redact_patterns: ['INTERNAL-[0-9]{6}']
pii: {entities: [email]}
"""
PLANTED = {"ACME_CREDS": "plain-looking-value-42", "OTHER_CREDS": "second-plain-value-43",
           "MONITOR_CONN": "InstrumentationKey=conn-value-44"}


def _masked(text: str) -> str:
    from evalpipe.core.redact import redact

    return redact(text)


def test_redaction_from_the_raw_config_equals_the_validated_config(write_config, monkeypatch):
    """The secret source reads the config file as YAML (no schema, no registries); what it hands the redactor is
    what the validated config says: the same api_key_env names, tracing secret, patterns, PII setting and values."""
    import yaml

    from evalpipe.core.redact import MASK, secrets_in_config
    from evalpipe.project import load_config
    from evalpipe.project.redaction import ConfigFileSecrets, install_redaction

    for k, v in PLANTED.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("EVALS_REDACT_PATTERNS", "")
    path = write_config(SECRETS_CONFIG)
    cfg = load_config(path)  # the validated config: what the redactor was handed before
    secrets, names, patterns = ConfigFileSecrets().inputs()
    assert sorted(set(names)) == sorted({m.api_key_env for m in cfg.models.values() if m.api_key_env}
                                        | {"APPLICATIONINSIGHTS_CONNECTION_STRING", "MONITOR_CONN"})
    assert list(patterns) == cfg.raw["redact_patterns"]
    assert ConfigFileSecrets().pii() == cfg.raw["pii"]
    assert set(secrets) >= secrets_in_config(yaml.safe_load(path.read_text()))
    assert {"query-secret-123", "header-secret-456", "literal-secret-789"} <= set(secrets)
    install_redaction()
    text = ("a plain-looking-value-42 b second-plain-value-43 c InstrumentationKey=conn-value-44 d query-secret-123 "
            "e header-secret-456 f literal-secret-789 g INTERNAL-123456 h ann@example.com i zebra-9")
    masked = _masked(text)
    for planted in [*PLANTED.values(), "query-secret-123", "header-secret-456", "literal-secret-789",
                    "INTERNAL-123456", "ann@example.com"]:
        assert planted not in masked, (planted, masked)
    assert MASK in masked and "zebra-9" in masked


def test_an_invalid_config_still_has_its_secrets_masked(write_config, monkeypatch):
    """An invalid config (the CLI's error about it included) is masked too: its values, and now its api_key_env
    names and patterns as well (the validated config gave none of those when it failed)."""
    from evalpipe.project.redaction import install_redaction

    for k, v in PLANTED.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("EVALS_REDACT_PATTERNS", "")
    write_config(SECRETS_CONFIG + "not_a_key: 1\n")
    install_redaction()
    masked = _masked("plain-looking-value-42 literal-secret-789 INTERNAL-123456")
    assert "plain-looking-value-42" not in masked and "literal-secret-789" not in masked
    assert "INTERNAL-123456" not in masked
    write_config("models: [not, a, mapping\n")  # not even YAML: the name and shape rules still apply
    assert "sk-" + "a" * 20 not in _masked("sk-" + "a" * 20)


# ---- the leaderboard at scale: metrics and gates read through a rollup (evalpipe/store/rollup.py) ------------------
def _direct(wh, table: str, where: str = "TRUE"):
    return wh.query(f"SELECT * FROM {table} WHERE {where}")


def _same_rows(a, b) -> None:
    import pandas as pd

    cols = ["benchmark_split", "model", "metric", "slice"]
    a, b = (x.sort_values(cols).reset_index(drop=True)[sorted(x.columns)] for x in (a, b))
    pd.testing.assert_frame_equal(a, b, check_dtype=False)


def test_rollup_follows_new_replaced_and_forgotten_partitions(tmp_path):
    import pandas as pd

    from evalpipe.store.rollup import rollup_path, table_rows
    from evalpipe.store.warehouse import Warehouse

    synthetic_metrics(tmp_path / "warehouse.duckdb", models=3, splits=2)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    _same_rows(table_rows(wh, "metrics"), _direct(wh, "metrics"))
    assert rollup_path(wh, "metrics").exists()
    # a partition replaced (a re-run), one added, one forgotten: each seen at the next read
    part = {"benchmark_split": "bench0/split0", "model": "model-000"}
    old = wh.read("metrics", part)
    wh.write("metrics", old.assign(value=0.999), part)
    wh.write("metrics", old.assign(model="model-new"), {"benchmark_split": "bench0/split0", "model": "model-new"})
    wh.delete("metrics", {"benchmark_split": "bench0/split1", "model": "model-002"})
    got = table_rows(wh, "metrics", "slice = 'all'")
    _same_rows(got, _direct(wh, "metrics", "slice = 'all'"))
    assert set(got.loc[(got["model"] == "model-000") & (got["benchmark_split"] == "bench0/split0"), "value"]) == {0.999}
    assert "model-new" in set(got["model"])
    assert not ((got["model"] == "model-002") & (got["benchmark_split"] == "bench0/split1")).any()
    # a damaged rollup is rebuilt, never trusted
    rollup_path(wh, "metrics").write_bytes(b"not parquet")
    _same_rows(table_rows(wh, "metrics"), _direct(wh, "metrics"))
    # a table with no partition yet: no rows, the table's columns
    assert list(table_rows(wh, "gates").columns) == list(_direct(wh, "gates").columns)
    assert len(table_rows(wh, "gates")) == 0 and isinstance(table_rows(wh, "gates"), pd.DataFrame)


def test_leaderboard_through_the_rollup_equals_the_direct_one(tmp_path):
    import pandas as pd

    from evalpipe.pipeline.stages import build_leaderboard, leaderboard_from
    from evalpipe.store.warehouse import Warehouse

    synthetic_metrics(tmp_path / "warehouse.duckdb", models=4, splits=3)
    wh = Warehouse(tmp_path / "warehouse.duckdb")
    wh.write("gates", pd.DataFrame([{"benchmark_split": "bench0/split1", "model": "model-002",
                                     "check": "samples_accounted", "passed": False, "severity": "ERROR",
                                     "description": "2 samples missing", "checked_at": "2026-11-27"}]),
             {"benchmark_split": "bench0/split1", "model": "model-002"})
    direct = build_leaderboard(wh.read_table("metrics"), gates=wh.read_table("gates"))
    for _ in range(2):  # the rollup built, then read as is
        pd.testing.assert_frame_equal(leaderboard_from(wh), direct, check_dtype=False)
    assert direct["gate"].notna().sum() == 3  # the gated partition's three metrics, listed unranked
