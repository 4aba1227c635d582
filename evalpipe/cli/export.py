"""`evalpipe export`: one partition's results in another format (docs/operations.md, docs/interop.md).

Each format is a function `(split, model, out_dir) -> lines to print` in `FORMATS`; a new format is one function
and one entry there. `artifacts` (the default) is the run-artifacts folder `evalpipe export` always wrote.
"""
from __future__ import annotations

from typing import Callable

import click


def _warehouse():
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    return Warehouse(warehouse_path())


def export_artifacts(split: str, model: str, out_dir: str | None) -> list[str]:
    """The run artifacts (manifest, samples, events, errors, summary) in the folder `out_dir`."""
    from evalpipe.benchmarks import dataset_header
    from evalpipe.core.errors import ConfigError
    from evalpipe.project import load_config
    from evalpipe.store.artifacts import write_artifacts

    if not out_dir:
        raise ConfigError("--format artifacts needs --out DIR (the folder to write)")
    cfg = load_config()
    folder = write_artifacts(split, model, _warehouse(), cfg, out_dir=out_dir,
                             dataset_header=dataset_header(cfg.splits.get(split)))
    return [str(folder)]


def export_inspect(split: str, model: str, out_dir: str | None) -> list[str]:
    """An Inspect AI eval log (`.eval`) in `out_dir` (default ./logs, where `inspect view` looks)."""
    from evalpipe.interop.inspect_log import write_logs

    return [str(p) for p in write_logs([(split, model)], _warehouse(), out_dir or "logs")]


def export_lm_eval(split: str, model: str, out_dir: str | None) -> list[str]:
    """lm-evaluation-harness's results JSON and per-sample JSONL under `out_dir`/<model> (an `adapter: lm_eval` split)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.metrics.lm_eval_results import write_results

    if not out_dir:
        raise ConfigError("--format lm-eval needs --out DIR (lm-eval's --output_path)")
    return [str(p) for p in write_results(split, model, _warehouse(), out_dir)]


FORMATS: dict[str, Callable[[str, str, str | None], list[str]]] = {
    "artifacts": export_artifacts,
    "inspect": export_inspect,
    "lm-eval": export_lm_eval,
}


@click.command(name="export")
@click.option("--split", required=True, help="benchmark_split key, e.g. smoke/test.")
@click.option("--model", required=True, help="Model key.")
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)), default="artifacts", show_default=True,
              help="artifacts: the run-artifacts folder; inspect: an Inspect AI eval log; lm-eval: lm-evaluation-harness "
                   "results JSON and samples JSONL (docs/interop.md).")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Folder to write (needed for artifacts and lm-eval; inspect: default ./logs).")
def export_cmd(split: str, model: str, fmt: str, out_dir: str | None) -> None:
    """Write a partition's results to a folder: its run artifacts, an Inspect AI eval log, or lm-evaluation-harness
    results."""
    for line in FORMATS[fmt](split, model, out_dir):
        click.echo(line)
