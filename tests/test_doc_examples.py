"""Every ```python block of docs/*.md and README.md, and every examples/*.py, is executed by a test or listed here
with the reason it is not (and where its calls are tested instead). A new block fails
`test_every_block_is_run_or_listed` until it is one or the other."""
import asyncio
import re
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def blocks() -> dict[str, str]:
    """{"<file>#<n>": code} of every python block, numbered from 1 per file."""
    out = {}
    for md in sorted([*REPO.glob("docs/*.md"), REPO / "README.md"]):
        for n, code in enumerate(FENCE.findall(md.read_text(encoding="utf-8")), 1):
            out[f"{md.relative_to(REPO)}#{n}"] = code
    return out


# not run here, with the reason and where the calls are tested
LISTED = {
    "docs/api.md#4": "DatasetRegistry.load('qrdata') downloads from the Hub (offline here); the same calls on local "
                     "copies: tests/test_design_ref_002.py, tests/test_dsgym_layout.py",
    "docs/config.md#2": "names a notebook config's splits (notebook/five) and writes a project: tests/test_project.py",
    "docs/interop.md#1": "reads the reader's own Inspect log: tests/test_interop_inspect.py "
                         "(test_a_log_streamed_into_duckdb_holds_what_inspects_reader_reads) runs import_log",
    "docs/interop.md#2": "reads an MLflow store written by `evalpipe export --mlflow`: tests/test_interop_mlflow.py",
    "docs/runners.md#1": "calls openai/gpt-4o-mini over the network: tests/test_runners.py runs run_requests offline",
    "docs/sandbox.md#2": "opens data/sales.csv, a user's file: tests/test_sandbox_session.py",
    "docs/reproducibility.md#1": "needs a config with `smoke` x `echo`: tests/test_api.py runs the same calls",
    "docs/api.md#6": "`my_model` is the reader's model and the dataset list is elided (`...`) (the block README "
                     "showed before it moved here): docs/api.md#1 runs the same call",
}


def _agent(task) -> str:
    return str(getattr(task, "question", task))


class _Usage:
    def __init__(self):
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0}


def givens(tmp_path) -> dict:
    """The names a block uses without defining them (the reader's own agent, rows, samples)."""
    import evalpipe
    from evalpipe.core.types import Score
    from evalpipe.metrics import JudgeInput, Metric, register_metric
    from evalpipe.metrics.base import Direction
    from evalpipe.runners.base import Runner

    async def run_task(task):
        return "?"

    def says_paris(prediction: str, target: str) -> bool:
        return "paris" in (prediction or "").lower()

    rows = [{"input": "2+2", "target": "4", "source": "gaia"}, {"input": "capital of France", "target": "Paris"}]
    return {"evalpipe": evalpipe, "agent": _agent, "answer": _agent, "rows": rows, "says_paris": says_paris,
            "samples": rows, "run_task": run_task, "Runner": Runner, "register_metric": register_metric,
            "Metric": Metric, "Direction": Direction, "JudgeInput": JudgeInput, "Score": Score}


def test_every_block_is_run_or_listed():
    found = set(blocks())
    assert set(LISTED) <= found, f"listed blocks that no longer exist: {sorted(set(LISTED) - found)}"


@pytest.mark.parametrize("key", sorted(k for k in blocks() if k not in LISTED))
def test_block_runs(key, home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # what a block registers (docs/tools.md's `clock` tool, a plugin's adapter) is the block's: later tests in this
    # worker see the registries as they were
    from evalpipe.benchmarks.base import _ADAPTERS
    from evalpipe.metrics.base import _METRICS
    from evalpipe.runners.base import _RUNNERS
    from evalpipe.sandbox.base import SANDBOXES
    from evalpipe.tools.base import _TOOLS

    import evalpipe.benchmarks  # noqa: F401  every built-in registered before the snapshot (the metrics load lazily)
    import evalpipe.runners  # noqa: F401
    from evalpipe.metrics import list_metrics

    list_metrics()
    for registry in (_ADAPTERS, _METRICS, _RUNNERS, SANDBOXES, _TOOLS):
        monkeypatch.setattr(registry, "_factories", dict(registry._factories))
    code = blocks()[key]
    import ast
    import sys
    import types

    # a module of its own, so functions passed by name (`calculate_metrics=`) import as from a user's script
    module = types.ModuleType(f"doc_block_{re.sub(r'[^A-Za-z0-9]', '_', key)}")
    module.__dict__.update(givens(tmp_path))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    compiled = compile(code, key, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, module.__dict__)
    if asyncio.iscoroutine(result):  # a block with a top-level await
        asyncio.run(result)


EXAMPLES_RUN_BY = {
    "examples/gaia_sample.py": "tests/test_gaia_sample.py",
    "examples/python_api/evaluate_function.py": "tests/test_api_python.py",
}


def test_every_example_script_is_run_by_a_test():
    scripts = {str(p.relative_to(REPO)) for p in REPO.glob("examples/**/*.py")
               if "evalpipe_plugin_example" not in p.parts}  # the plugin package: installed by tests/test_plugins.py
    assert scripts == set(EXAMPLES_RUN_BY)
    for script, test in EXAMPLES_RUN_BY.items():
        assert Path(script).name in (REPO / test).read_text(), (script, test)
    assert "evalpipe_plugin_example" in (REPO / "tests" / "test_plugins.py").read_text()
