"""`evalpipe list`, `evalpipe leaderboard` and `evalpipe compare`, and the table/csv/json output shared by `summarize`.

Registered at the bottom of evalpipe/cli/main.py. Missing values print as `-` everywhere (tables, the viewer);
CSV leaves them empty and JSON writes null, as those formats expect.
"""
from __future__ import annotations

import json
import math
import shutil
import sys
from typing import Any

import click

MISSING = "-"
FORMATS = ("table", "csv", "json")


def _missing(v: Any) -> bool:
    if v is None:
        return True
    try:
        return isinstance(v, float) and math.isnan(v)
    except TypeError:
        return False


def cell(v: Any, floatfmt: str = ".4f") -> str:
    if _missing(v):
        return MISSING
    try:
        import pandas as pd

        if v is pd.NA or v is pd.NaT:
            return MISSING
    except ImportError:
        pass
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return format(v, floatfmt)
    return str(v)


def render(df, fmt: str = "table", floatfmt: str = ".4f", width: int | None = None) -> str:
    """A DataFrame as a terminal table (long text wrapped to the terminal), CSV or JSON."""
    if fmt == "json":
        return df.to_json(orient="records", indent=2)
    if fmt == "csv":
        return df.to_csv(index=False)
    if df is None or not len(df):
        return "(no rows)"
    from rich.console import Console
    from rich.table import Table

    if width is None:  # wrap to a terminal; piped output (files, CI logs, scripts) keeps each row on one line
        width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 100_000
    t = Table(show_lines=False, header_style="bold", pad_edge=False, box=None)
    numeric = {c for c in df.columns if str(df[c].dtype) not in ("object", "string", "bool", "boolean")}
    for c in df.columns:
        t.add_column(str(c), justify="right" if c in numeric else "left", overflow="fold")
    for row in df.itertuples(index=False):
        t.add_row(*[cell(v, floatfmt) for v in row])
    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
    console.print(t)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).rstrip()


# ---- evalpipe list ------------------------------------------------------------------------------------------------
def _split_count(split: Any) -> Any:
    """Samples in a split when known without loading it: a local JSONL/CSV/Parquet file, or already in the
    warehouse (`datasets`)."""
    from pathlib import Path

    path = (split.options or {}).get("path")
    if isinstance(path, str) and not path.startswith(("hf://", "http")):
        p = split.resolve(path) if hasattr(split, "resolve") else Path(path)
        try:
            if p.is_dir():  # a local copy in an adapter's own layout (GAIA): load it, nothing is downloaded
                from evalpipe.benchmarks import adapter_for

                return len(list(adapter_for(split).load()))
            if p.is_file() and p.suffix == ".jsonl":
                with open(p, encoding="utf-8") as fh:
                    return sum(1 for line in fh if line.strip())
            if p.is_file() and p.suffix == ".parquet":
                import pyarrow.parquet as pq

                return pq.ParquetFile(p).metadata.num_rows
            if p.is_file() and p.suffix == ".csv":
                import pandas as pd

                return len(pd.read_csv(p))
        except Exception:
            return None
    return None


def list_rows(cfg, warehouse=None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from evalpipe.benchmarks import adapter_for

    loaded: dict[str, int] = {}
    if warehouse is not None:
        try:
            for r in warehouse.query("SELECT benchmark_split, count(*) AS n FROM datasets GROUP BY 1").itertuples():
                loaded[r.benchmark_split] = int(r.n)
        except Exception:
            pass
    benches = []
    for key, s in cfg.splits.items():
        try:
            metrics = adapter_for(s).metrics()
        except Exception:
            metrics = s.metrics or []
        names = [m if isinstance(m, str) else m.get("name", "?") for m in metrics]
        n = loaded.get(key)
        benches.append({"benchmark_split": key, "adapter": s.adapter, "samples": n if n is not None else _split_count(s),
                        "metrics": ", ".join(names), "default": s.benchmark in cfg.default_benchmarks,
                        "description": _benchmark_description(cfg, s.benchmark)})
    models = [{"model": k, "runner": m.runner, "model_string": m.model, "default": k in cfg.default_models,
               "description": " ".join((m.description or "").split())} for k, m in cfg.models.items()]
    return benches, models


def _benchmark_description(cfg, name: str) -> str:
    raw = ((cfg.raw or {}).get("benchmarks") or {}).get(name) or {}
    return " ".join(str(raw.get("description") or "").split())


@click.command(name="list")
@click.argument("what", required=False, type=click.Choice(["benchmarks", "models", "tasks", "all"]), default="all")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def list_cmd(what: str, fmt: str) -> None:
    """Configured benchmark splits (samples where known, metrics) and models, with descriptions.
    `evalpipe list tasks` / `evalpipe run --tasks list` also work (lm-evaluation-harness habits)."""
    import pandas as pd

    from evalpipe.cli.main import _warehouse
    from evalpipe.project import load_config
    from evalpipe.core.redact import redact

    cfg = load_config()
    benches, models = list_rows(cfg, _warehouse())
    if fmt == "json":
        out: dict[str, Any] = {}
        if what in ("benchmarks", "tasks", "all"):
            out["benchmarks"] = benches
        if what in ("models", "all"):
            out["models"] = models
        click.echo(redact(json.dumps(out, indent=2, default=str)))
        return
    if what in ("benchmarks", "tasks", "all"):
        if fmt == "table":
            click.echo(f"benchmarks ({cfg.path}):")
        click.echo(redact(render(pd.DataFrame(benches).astype({"samples": "Int64"}), fmt)))
    if what in ("models", "all"):
        if fmt == "table":
            click.echo("\nmodels (any litellm model string also works: evalpipe run --model provider/name):")
        click.echo(redact(render(pd.DataFrame(models), fmt)))


# ---- evalpipe leaderboard -----------------------------------------------------------------------------------------
def leaderboard_frame(wh, include_limited: bool = False):
    """The leaderboard ranked from the `metrics` table by each metric's direction (pipeline.build_leaderboard, as
    the `leaderboard` asset builds it): always by the current declarations, also over partitions written before
    directions were stored, whose stored leaderboard ranked everything higher-is-better."""
    from evalpipe.pipeline.stages import build_leaderboard

    metrics = wh.query("SELECT * FROM metrics WHERE slice = 'all'")
    return build_leaderboard(metrics, include_limited=include_limited)


def leaderboard_table(board):
    """`leaderboard_frame` as people read it: rank `=1` when tied, counts as whole numbers, which side is better;
    rows with no value left out."""
    from evalpipe.pipeline.stages import leaderboard_display

    board = board[board["value"].notna()] if len(board) else board
    return leaderboard_display(board) if len(board) else board


@click.command(name="leaderboard")
@click.option("--split", "splits", multiple=True, help="benchmark_split key (repeatable; default: all).")
@click.option("--metric", "metric_names", multiple=True, help="Metric name (repeatable; default: all).")
@click.option("--include-limited", is_flag=True, help="Also --limit runs (model keys ending @limit<N>).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def leaderboard_cmd(splits: tuple[str, ...], metric_names: tuple[str, ...], include_limited: bool, fmt: str) -> None:
    """Models ranked per benchmark split and metric, best first by the metric's direction (higher or lower is
    better); `=1` marks a shared rank; counts read as whole numbers. JSON/CSV keep the numbers, `rank` and `tied`."""
    from evalpipe.cli.main import _warehouse
    from evalpipe.core.errors import DataError
    from evalpipe.core.redact import redact

    board = leaderboard_frame(_warehouse(), include_limited)
    if len(board) and splits:
        board = board[board["benchmark_split"].isin(splits)]
    if len(board) and metric_names:
        board = board[board["metric"].isin(metric_names)]
    if not len(board):
        raise DataError("no leaderboard rows match; materialize some first (evalpipe run) or check --split/--metric")
    if fmt == "table":
        click.echo(redact(render(leaderboard_table(board), "table")))
        return
    cols = ["benchmark_split", "metric", "rank", "tied", "model", "value", "higher_is_better", "kind", "n",
            "n_unscored", "n_errors", "ci_low", "ci_high"]
    click.echo(redact(render(board[cols], fmt)), nl=fmt != "csv")


# ---- evalpipe compare ---------------------------------------------------------------------------------------------
@click.command(name="compare")
@click.argument("model_a")
@click.argument("model_b")
@click.option("--split", default=None, help="benchmark_split key (default: the only one both models have).")
@click.option("--metric", default=None, help="Metric (default: the split's official one); a partition row such as "
              "tool_integration_control_contamination_rate compares the two values only.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=20, show_default=True,
              help="At most N samples listed per direction.")
def compare_cmd(model_a: str, model_b: str, split: str | None, metric: str | None, fmt: str, limit: int) -> None:
    """Two models on the same samples: both right, only A, only B, both wrong, McNemar's exact test, and the
    samples where they disagree; and both values with the better model by the metric's direction."""
    import pandas as pd

    from evalpipe.cli.main import _warehouse
    from evalpipe.core.errors import DataError
    from evalpipe.core.redact import redact
    from evalpipe.viewer import queries

    con = _warehouse().connect()
    try:
        both = [s for s in queries.splits(con) if {model_a, model_b} <= set(queries.models(con, s))]
        if split is None:
            if len(both) != 1:
                raise DataError(f"pick a split with --split; splits where both {model_a} and {model_b} have results: "
                                f"{', '.join(both) or 'none'}")
            split = both[0]
        elif split not in both:
            raise DataError(f"{model_a} and {model_b} do not both have results on {split}; "
                            f"splits with both: {', '.join(both) or 'none'}")
        try:
            c = queries.compare(con, split, model_a, model_b, metric, limit=limit)
        except ValueError as exc:
            raise DataError(str(exc)) from None
    finally:
        con.close()
    if fmt == "json":
        click.echo(redact(json.dumps(c, indent=2, default=str)))
        return
    from evalpipe.metrics.aggregate import format_value

    verdict = ("a tie" if c["better"] == "tie" else f"better: {c['better']}" if c["better"] else "no better model")
    values = pd.DataFrame([{"split": c["benchmark_split"], "metric": c["metric"], "kind": c["kind"],
                            model_a: format_value(c["value_a"], c["kind"]),
                            model_b: format_value(c["value_b"], c["kind"])}])
    if c["n_paired"] is None:  # a partition-level row: no per-sample pairs to count
        if fmt == "csv":
            click.echo(redact(render(values.assign(better=c["better"], direction=c["direction"]), "csv")), nl=False)
            return
        click.echo(redact(render(values, "table")))
        click.echo(f"{verdict} ({c['direction']}); {c['metric']} is a partition-level row: no per-sample pairs")
        return
    summary = pd.DataFrame([{"split": c["benchmark_split"], "metric": c["metric"], "paired": c["n_paired"],
                             f"acc {model_a}": c["accuracy_a"], f"acc {model_b}": c["accuracy_b"],
                             "both right": c["both_correct"], f"only {model_a}": c["only_a"],
                             f"only {model_b}": c["only_b"], "both wrong": c["both_wrong"],
                             "McNemar p": c["mcnemar_p"]}])
    if fmt == "csv":
        rows = [{"direction": f"only {model_a} right", **r} for r in c["only_a_samples"]]
        rows += [{"direction": f"only {model_b} right", **r} for r in c["only_b_samples"]]
        click.echo(redact(render(pd.DataFrame(rows), "csv")), nl=False)
        return
    click.echo(redact(render(summary, "table", ".3f")))
    click.echo(f"value (all samples): {model_a} {format_value(c['value_a'], c['kind'])}, {model_b} "
               f"{format_value(c['value_b'], c['kind'])}: {verdict} ({c['direction']})")
    p = c["mcnemar_p"]
    click.echo("McNemar (exact): " + ("no disagreements" if p is None else
                                       f"p = {p:.4f}, " + ("significant at 5%" if p < 0.05 else "not significant at 5%")))
    for title, rows in ((f"{model_a} right, {model_b} wrong", c["only_a_samples"]),
                        (f"{model_b} right, {model_a} wrong", c["only_b_samples"])):
        click.echo(f"\n{title} ({len(rows)} listed):")
        df = pd.DataFrame(rows, columns=["sample_id", "target", "a_prediction", "b_prediction"]).rename(
            columns={"a_prediction": model_a, "b_prediction": model_b})
        click.echo(redact(render(df, "table")))
