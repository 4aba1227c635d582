"""Plugins: the example package installed with pip (entry points) adds an adapter and a metric that the CLI lists
and that run through the Dagster assets; a `plugins:` module in the config does the same without installing."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "evalpipe_plugin_example"

CONFIG = """
{plugins}
benchmarks:
  smoke:                      # the split key the test config declares; the data come from the plugin adapter
    adapter: inline_qa
    splits:
      extra:
        items:
          - {{id: a, q: "Capital of France?", a: Paris}}
          - {{id: b, q: "Capital of Italy?", a: Rome}}
          - {{id: c, q: "Say Paris twice", a: paris}}
models:
  fixed: {{runner: echo, reply: fixed, text: "I think PARIS."}}
default_models: [fixed]
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`pip install --no-deps` of the example into its own folder (the venv itself is left alone); PYTHONPATH
    makes it an installed distribution for the child processes, entry points included."""
    target = tmp_path_factory.mktemp("site")
    src = tmp_path_factory.mktemp("src") / "evalpipe_plugin_example"
    shutil.copytree(EXAMPLE, src)
    p = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (target / "evalpipe_plugin_example-0.1.0.dist-info" / "entry_points.txt").exists()
    return target


def _run(args, home, config, pythonpath):
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(config), "PYTHONPATH": str(pythonpath)}
    env.pop("EVALS_WAREHOUSE", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli.main", *args], env=env, capture_output=True, text=True,
                          cwd=REPO, timeout=600)


def test_installed_plugin_lists_and_runs_through_dagster(installed, home, tmp_path):
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(CONFIG.format(plugins=""))
    a = _run(["adapters"], home, cfg, installed)
    assert a.returncode == 0 and "| inline_qa" in a.stdout and "written in the config" in a.stdout
    m = _run(["metrics"], home, cfg, installed)
    assert m.returncode == 0 and "| contains_answer" in m.stdout
    r = _run(["run", "--split", "smoke/extra", "--model", "fixed", "--no-progress"], home, cfg, installed)
    assert r.returncode == 0, r.stdout + r.stderr
    q = _run(["sql", "--json", "select metric, value, n from metrics where slice = 'all' and metric = 'contains_answer'"],
             home, cfg, installed)
    assert json.loads(q.stdout) == [{"metric": "contains_answer", "value": pytest.approx(2 / 3), "n": 3}]
    # the Dagster instance recorded the materializations (what the UI shows)
    from dagster import AssetKey, DagsterInstance

    with DagsterInstance.get() as inst:
        ev = inst.get_latest_materialization_event(AssetKey("metrics"))
    assert "contains_answer" in ev.asset_materialization.metadata
    # the code location the UI loads accepts the plugin's benchmark (partitions come from the config at import)
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(cfg), "PYTHONPATH": str(installed)}
    d = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                       env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert d.returncode == 0, d.stdout + d.stderr
    # without the package the same config is a one-line config error naming the adapter
    gone = _run(["run", "--split", "smoke/extra", "--no-progress"], home, cfg, tmp_path)
    assert gone.returncode == 2 and "inline_qa" in gone.stderr and len(gone.stderr.strip().splitlines()) == 1


def test_plugins_key_imports_a_module_without_installing(home, tmp_path):
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(CONFIG.format(plugins="plugins: [evalpipe_plugin_example.register]"))
    a = _run(["adapters"], home, cfg, EXAMPLE)
    assert a.returncode == 0 and "| inline_qa" in a.stdout
    r = _run(["run", "--split", "smoke/extra", "--model", "fixed", "--no-progress"], home, cfg, EXAMPLE)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "contains_answer" in r.stdout


def _env_without_pythonpath(home, config):
    env = {**os.environ, "DAGSTER_HOME": str(home), "EVALS_CONFIG": str(config)}
    for key in ("PYTHONPATH", "EVALS_WAREHOUSE"):
        env.pop(key, None)
    return env


def test_plugin_module_next_to_the_config_loads_in_the_code_location_without_pythonpath(home, tmp_path):
    """The webserver, daemon and workers load the code location with no PYTHONPATH (`make dev`): a `plugins:` module
    in the config file's folder must still import there."""
    shutil.copytree(EXAMPLE / "evalpipe_plugin_example", tmp_path / "evalpipe_plugin_example")
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(CONFIG.format(plugins="plugins: [evalpipe_plugin_example.register]"))
    d = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
                       env=_env_without_pythonpath(home, cfg), capture_output=True, text=True, cwd=REPO, timeout=600)
    assert d.returncode == 0, d.stdout[-2000:] + d.stderr[-3000:]
    assert "inline_qa" not in d.stderr  # no "unknown adapter" and no import error on the way


def test_plugin_that_registers_nothing_is_named_in_the_unknown_adapter_error(home, tmp_path):
    (tmp_path / "my_plugins").mkdir()
    (tmp_path / "my_plugins" / "__init__.py").write_text('"""The registrations live in my_plugins.register."""\n')
    cfg = tmp_path / "evals.yaml"
    cfg.write_text(CONFIG.format(plugins="plugins: [my_plugins]"))
    env = _env_without_pythonpath(home, cfg)
    r = subprocess.run([sys.executable, "-m", "evalpipe.cli.main", "run", "--split", "smoke/extra", "--no-progress"],
                       env=env, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert "unknown adapter 'inline_qa'" in err
    assert "plugin module my_plugins loaded but registered no adapter" in err
    # the registry's own lookup (what a worker hits) says the same
    code = ("from evalpipe.project.plugins import load_plugins; load_plugins()\n"
            "from evalpipe.benchmarks import get_adapter\n"
            "try:\n    get_adapter('inline_qa')\nexcept Exception as exc:\n    print(exc)\n")
    g = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert "unknown benchmark adapter 'inline_qa'" in g.stdout, g.stdout + g.stderr
    assert "my_plugins loaded but registered no adapter" in g.stdout, g.stdout
