"""`evalpipe`: run evaluations and read their results from a terminal or CI."""
from __future__ import annotations

import os
import sys

import click

# litellm reaches for the internet at import unless told not to; set before anything imports it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


class _Group(click.Group):
    """User mistakes print one line and exit 2; `--debug` shows the traceback."""

    def invoke(self, ctx: click.Context):
        from evalpipe.errors import EvalError

        try:
            return super().invoke(ctx)
        except EvalError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show full tracebacks.")
@click.option("--config", "config_path", envvar="EVALS_CONFIG", default=None, help="Config file (default: evals.yaml).")
@click.pass_context
def main(ctx: click.Context, debug: bool, config_path: str | None) -> None:
    """Evaluate models and agents on benchmarks (Dagster assets, DuckDB warehouse)."""
    ctx.obj = {"debug": debug}
    if config_path:
        os.environ["EVALS_CONFIG"] = os.path.abspath(config_path)


@main.command()
@click.option("--benchmark", "benchmarks", multiple=True, help="Benchmark name (repeatable; default: all).")
@click.option("--split", "splits", multiple=True, help="Split name within the benchmarks (repeatable).")
@click.option("--model", "models", multiple=True, help="Model key (repeatable; default: default_models).")
def run(benchmarks: tuple[str, ...], splits: tuple[str, ...], models: tuple[str, ...]) -> None:
    """Materialize dataset -> ... -> metrics for the chosen partitions, then the leaderboard."""
    from evalpipe.config import load_config, warehouse_path
    from eval_assets.launch import evaluate
    from evalpipe.warehouse import Warehouse

    cfg = load_config()
    wanted = set(benchmarks or cfg.default_benchmarks)
    chosen = [k for k, s in cfg.splits.items() if s.benchmark in wanted and (not splits or s.split in splits)]
    if not chosen:
        from evalpipe.errors import ConfigError
        raise ConfigError(f"no benchmark split matches --benchmark {list(benchmarks)} --split {list(splits)}; "
                          f"configured: {', '.join(cfg.splits)}")
    model_keys = list(models) or cfg.default_models
    result = evaluate(cfg, chosen, model_keys, on_event=lambda m: click.echo(f"... {m}", err=True))
    wh = Warehouse(warehouse_path())
    board = wh.query("SELECT benchmark_split, metric, rank, model, round(value, 4) AS value, n, n_unscored, n_errors "
                     "FROM leaderboard ORDER BY benchmark_split, metric, rank")
    click.echo(board.to_markdown(index=False) if len(board) else "(leaderboard is empty)")
    click.echo(f"\nwarehouse: {wh.duckdb_path}")
    if not result.success:
        failed = [f"{p.benchmark_split} x {p.model}: {p.error}" for p in result.partitions if not p.success]
        click.echo("failed partitions:\n  " + "\n  ".join(failed), err=True)
        sys.exit(1)
