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

from evalpipe.core.file_caps import DEFAULT_MAX_FILE_MB, FileCap
from evalpipe.core.terminal_text import terminal_safe

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
    return terminal_safe(str(v))  # (model text: its escape sequences shown, not obeyed)


def render(df, fmt: str = "table", floatfmt: str = ".4f", width: int | None = None) -> str:
    """A DataFrame as a terminal table (long text wrapped to the terminal), CSV or JSON."""
    if fmt == "json":
        return df.to_json(orient="records", indent=2)
    if fmt == "csv":
        return df.to_csv(index=False)
    if df is None or not len(df):
        return "(no rows)"
    if width is None:  # wrap to a terminal; piped output (files, CI logs, scripts) keeps each row on one line
        width = shutil.get_terminal_size((120, 24)).columns if sys.stdout.isatty() else 100_000
    numeric = {c for c in df.columns if str(df[c].dtype) not in ("object", "string", "bool", "boolean")}
    header = [str(c) for c in df.columns]
    rows = [[cell(v, floatfmt) for v in row] for row in df.itertuples(index=False)]
    plain = _plain_table(header, rows, [c in numeric for c in df.columns], width)
    if plain is not None:
        return plain
    return _rich_table(header, rows, [c in numeric for c in df.columns], width)


def _simple(text: str) -> bool:
    """Text whose width is its length and that rich prints as it is: printable ASCII, no space at either end."""
    return text.isascii() and text.isprintable() and text == text.strip()


def _plain_table(header: list[str], rows: list[list[str]], right: list[bool], width: int) -> str | None:
    """The table `_rich_table` draws, without rich (~60 ms less per table, evalpipe list's start: issue 31), for
    what needs no wrapping and no width rules: every cell printable ASCII, no `[` in a header (rich reads headers as
    markup) and the whole table within `width`.
    None otherwise. tests/test_list_cmd.py checks it against rich's."""
    cols = list(zip(header, *rows))
    # (rich reads a header as markup: "[x]" in one is not printed; the cells are Text, printed as written)
    if any("[" in h for h in header) or not all(_simple(t) for col in cols for t in col):
        return None
    widths = [max(len(t) for t in col) for col in cols]
    if sum(widths) + 2 * (len(widths) - 1) > width:
        return None
    lines = ["  ".join(t.rjust(w) if r else t.ljust(w) for t, w, r in zip(line, widths, right)).rstrip()
             for line in [header, *rows]]
    return "\n".join(lines).rstrip()


def _rich_table(header: list[str], rows: list[list[str]], right: list[bool], width: int) -> str:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(show_lines=False, header_style="bold", pad_edge=False, box=None)
    for name, r in zip(header, right):
        t.add_column(name, justify="right" if r else "left", overflow="fold")
    for row in rows:
        # Text, not str: rich reads "[value]" in a str as markup and drops it ("answers as @name[value]")
        t.add_row(*[Text(v) for v in row])
    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)
    console.print(t)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).rstrip()


# ---- evalpipe list ------------------------------------------------------------------------------------------------
# the rows, and the cache that spares a repeated `list` the config check and the counts: evalpipe/project/listing.py
def list_cache_path():
    """Where `evalpipe list` keeps what it knows (the home of this DAGSTER_HOME): a cache, safe to delete."""
    from evalpipe.core.config import dagster_home

    return dagster_home() / "cache" / "list.json"


@click.command(name="list")
@click.argument("what", required=False, type=click.Choice(["benchmarks", "models", "tasks", "all"]), default="all")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def list_cmd(what: str, fmt: str) -> None:
    """Configured benchmark splits (samples where known, metrics) and models, with descriptions.
    `evalpipe list tasks` / `evalpipe run --tasks list` also work (lm-evaluation-harness habits)."""
    import pandas as pd

    from evalpipe.cli.helpers import warehouse as _warehouse
    from evalpipe.core.config import config_path
    from evalpipe.core.redact import redact
    from evalpipe.project.listing import listing

    cfg, benches, models = listing(config_path(), _warehouse(), list_cache_path())
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
    from evalpipe.pipeline.leaderboard import leaderboard_from

    # a partition whose blocking gate failed is listed unranked, with the reason (the `gates` table)
    return leaderboard_from(wh, include_limited=include_limited)


def leaderboard_table(board):
    """`leaderboard_frame` as people read it: rank `=1` when tied, counts as whole numbers, which side is better;
    rows with no value left out, unless a failed gate keeps them unranked."""
    from evalpipe.pipeline.leaderboard import leaderboard_display

    # (a partition off the ranking by a failed gate stays listed, saying why, even without a value)
    board = board[board["value"].notna() | (board["gate"].notna() if "gate" in board else False)] if len(board) else board
    return leaderboard_display(board) if len(board) else board


def bradley_terry_table(wh, splits: tuple[str, ...] = ()):
    """The Bradley-Terry ranking the `reviews` asset last wrote (`review_ranking`, source `all`), best first per
    split; a refused fit keeps its models with no strength and the reason in `note`."""
    where, params = "source = 'all'", []
    if splits:
        where += " AND benchmark_split IN (" + ", ".join("?" for _ in splits) + ")"
        params += list(splits)
    return wh.query("SELECT benchmark_split, rank, model, strength, ci_low, ci_high, wins, comparisons, n, note "
                    f"FROM review_ranking WHERE {where} ORDER BY benchmark_split, rank NULLS LAST, model", params)


@click.command(name="leaderboard")
@click.option("--split", "splits", multiple=True, help="benchmark_split key (repeatable; default: all).")
@click.option("--metric", "metric_names", multiple=True, help="Metric name (repeatable; default: all).")
@click.option("--include-limited", is_flag=True, help="Also --limit runs (model keys ending @limit<N>).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
def leaderboard_cmd(splits: tuple[str, ...], metric_names: tuple[str, ...], include_limited: bool, fmt: str) -> None:
    """Models ranked per benchmark split and metric, best first by the metric's direction (higher or lower is
    better); `=1` marks a shared rank; counts read as whole numbers. JSON/CSV keep the numbers, `rank` and `tied`."""
    from evalpipe.cli.helpers import warehouse as _warehouse
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
        ranking = bradley_terry_table(_warehouse(), splits)
        if len(ranking):
            click.echo("\nBradley-Terry ranking from pairwise preferences (people's and judges', `review_ranking` "
                       "source all; 95% bootstrap CI):")
            click.echo(redact(render(ranking, "table")))
        return
    cols = ["benchmark_split", "metric", "rank", "tied", "model", "value", "higher_is_better", "kind", "n",
            "n_unscored", "n_errors", "ci_low", "ci_high"]
    click.echo(redact(render(board[cols], fmt)), nl=fmt != "csv")


# ---- evalpipe compare ---------------------------------------------------------------------------------------------
def split_with_both(con: Any, model_a: str, model_b: str, split: str | None) -> str:
    """The split `compare` and `gate` read: the one given, if both models have results on it, else the only split
    where both have; a one-line error naming the splits with both otherwise."""
    from evalpipe.core.errors import DataError
    from evalpipe.viewer import queries

    both = [s for s in queries.splits(con) if {model_a, model_b} <= set(queries.models(con, s))]
    if split is None:
        if len(both) != 1:
            raise DataError(f"pick a split with --split; splits where both {model_a} and {model_b} have results: "
                            f"{', '.join(both) or 'none'}")
        return both[0]
    if split not in both:
        raise DataError(f"{model_a} and {model_b} do not both have results on {split}; "
                        f"splits with both: {', '.join(both) or 'none'}")
    return split


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

    from evalpipe.cli.helpers import warehouse as _warehouse
    from evalpipe.core.errors import DataError
    from evalpipe.core.redact import redact
    from evalpipe.viewer import queries

    con = _warehouse().connect()
    try:
        split = split_with_both(con, model_a, model_b, split)
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


# ---- evalpipe view ------------------------------------------------------------------------------------------------
def file_metrics(rf, frames) -> "Any":
    """The metrics rows of a results file: its folder's summary.json when there is one, else rebuilt from the
    samples with the pipeline's own aggregation (`compute_metrics`, the code the `metrics` asset runs), so a copied
    folder without summary.json gives the numbers it had."""
    import pandas as pd

    if rf.summary is not None and isinstance(rf.summary.get("metrics"), list):
        return pd.DataFrame(rf.summary["metrics"])
    from evalpipe.metrics.aggregate import AGGREGATE_COLUMNS, USAGE_COLUMNS
    from evalpipe.pipeline.stages import compute_metrics

    j, r = frames["judgements"], frames["rollouts"]
    rollouts = r[USAGE_COLUMNS].copy() if len(r) else None
    if rollouts is not None:  # the numeric columns as the warehouse reads them back (nulls as NaN)
        for c in ("latency_s", "input_tokens", "output_tokens", "cost"):
            rollouts[c] = pd.to_numeric(rollouts[c], errors="coerce")
    verdicts = j[AGGREGATE_COLUMNS].copy()
    verdicts["score"] = pd.to_numeric(verdicts["score"], errors="coerce")
    return compute_metrics(rf.benchmark_split, rf.model, verdicts, rollouts=rollouts)


def rebuilt_summary(rf) -> dict[str, Any]:
    """summary.json's content for a run folder that has lost it (counts as `artifacts.stream_samples` counts them)."""
    from evalpipe.store.artifacts import _records
    from evalpipe.store.results_file import tables

    metrics = file_metrics(rf, tables(rf))
    usage = [r.get("usage") or {} for r in rf.records]
    counts = {"samples": len(rf.records), "ok": sum(1 for r in rf.records if r.get("status") == "ok"),
              "errors": sum(1 for r in rf.records if r.get("status") not in (None, "ok")),
              "from_journal": sum(1 for u in usage if u.get("cached")),
              "input_tokens": sum(int(u.get("input_tokens") or 0) for u in usage),
              "output_tokens": sum(int(u.get("output_tokens") or 0) for u in usage),
              "cost_usd": round(sum(float(u.get("cost") or 0.0) for u in usage), 6)}
    from evalpipe.store.artifacts import judge_usage

    judges = judge_usage(metrics)  # [spend] the judges' calls, from the verdicts' details
    manifest = {}
    if rf.folder is not None and (rf.folder / "manifest.json").exists():
        manifest = json.loads((rf.folder / "manifest.json").read_text(encoding="utf-8"))
    return {"benchmark_split": rf.benchmark_split, "model": rf.model, "run_id": manifest.get("run_id"),
            "started_at": manifest.get("started_at"), "finished_at": manifest.get("finished_at"),
            "duration_s": manifest.get("duration_s"), "counts": counts, "metrics": _records(metrics),
            **({"judge_usage": judges} if judges is not None else {}), "rebuilt_from": str(rf.path)}


def partition_spend(source, split: str, model: str) -> str | None:
    """[spend] One line for a partition: the rollouts' tokens and cost and the judges' beside them, from its
    metrics rows (slice `usage`); None when it has none."""
    return partitions_spend(source, [(split, model)]).get((split, model))


def partitions_spend(source, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """[spend] `partition_spend`'s line for each (split, model) pair that has usage rows, read in one query (a sweep
    of hundreds of partitions paid one query per partition)."""
    from evalpipe.store.artifacts import judge_usage, spend_text

    if not pairs:
        return {}
    wanted = set(pairs)
    splits = sorted({s for s, _ in wanted})
    models = sorted({m for _, m in wanted})
    rows = source.query("SELECT benchmark_split, model, metric, slice, value FROM metrics WHERE slice = 'usage' "
                        f"AND benchmark_split IN ({', '.join('?' * len(splits))}) "
                        f"AND model IN ({', '.join('?' * len(models))})", [*splits, *models])
    out: dict[tuple[str, str], str] = {}
    for key, group in rows.groupby(["benchmark_split", "model"], sort=False):
        if key not in wanted:
            continue
        got = dict(zip(group["metric"], group["value"]))

        def whole(metric: str) -> int:
            v = got.get(metric)
            return int(v) if v is not None and v == v else 0

        cost = got.get("cost_usd_total")
        counts = {"input_tokens": whole("input_tokens_total"), "output_tokens": whole("output_tokens_total"),
                  "cost_usd": round(float(cost), 6) if cost is not None and cost == cost else 0.0}
        out[key] = "spend: " + spend_text(counts, judge_usage(group[["metric", "slice", "value"]]))
    return out


def sample_judge_usage(details: Any) -> str | None:
    """[spend] A verdict's judge calls as text (calls sent, tokens in/out, cost), cached calls counted apart."""
    from evalpipe.metrics.aggregate import judge_calls_of

    calls = judge_calls_of(details) if isinstance(details, (str, dict)) else []
    if not calls:
        return None
    sent = [c for c in calls if not c.get("cached")]
    tin = sum(int(c.get("input_tokens") or 0) for c in sent)
    tout = sum(int(c.get("output_tokens") or 0) for c in sent)
    cost = sum(float(c.get("cost") or 0.0) for c in sent)
    cached = len(calls) - len(sent)
    return (f"{len(sent)} call(s){f' (+{cached} cached)' if cached else ''}, tokens in/out: {tin}/{tout}, "
            f"cost: {round(cost, 6)}")


def read_results(path: str, max_file_mb: float | None = None):
    """A results file read (store/results_file.py), its unreadable lines reported one line each on stderr
    (`error: file:line: why`); the lines that could be read are still shown."""
    from evalpipe.core.redact import redact
    from evalpipe.store.results_file import load_results

    rf = load_results(path, FileCap.from_option(max_file_mb, "--max-file-mb", "--max-file-mb"))
    for line in rf.problems[:20]:
        click.echo(redact(f"error: {line}"), err=True)
    if len(rf.problems) > 20:
        click.echo(f"error: {len(rf.problems) - 20} more unreadable line(s) in {rf.path}", err=True)
    return rf


def open_results(path: str, max_file_mb: float | None = None):
    """A results file as a warehouse stand-in with its metrics (summary.json's, or rebuilt)."""
    from evalpipe.store.results_file import FileWarehouse, tables

    rf = read_results(path, max_file_mb)
    frames = tables(rf)
    frames["metrics"] = file_metrics(rf, frames)
    return rf, FileWarehouse(frames)


def accuracy_frame(source, split: str, model: str, metric: str):
    """The metric's value over all samples, then per slice (GAIA's level=1/2/3, the adapter's slices), with n,
    unscored, errors and the 95% interval, from the `metrics` table."""
    import pandas as pd

    from evalpipe.metrics.aggregate import format_value

    m = source.query("SELECT slice, value, n, n_unscored, n_errors, ci_low, ci_high, kind FROM metrics "
                     "WHERE benchmark_split = ? AND model = ? AND metric = ? AND slice <> 'usage'",
                     [split, model, metric])
    m = m.sort_values("slice", key=lambda s: s.map(lambda v: (v != "all", v)), kind="stable")
    ci = [MISSING if _missing(lo) or kind == "count" else f"{lo:.3f}-{hi:.3f}"
          for lo, hi, kind in zip(m["ci_low"], m["ci_high"], m["kind"])]
    return pd.DataFrame({"slice": m["slice"], "value": [format_value(v, k) for v, k in zip(m["value"], m["kind"])],
                         "n": m["n"], "unscored": m["n_unscored"], "errors": m["n_errors"], "95% CI": ci})


def _review_settings():
    """The config's `reviews:` section for the viewer; None when there is none (or no config file)."""
    from evalpipe.core.config import config_path
    from evalpipe.project import load_config
    from evalpipe.viewer.reviews import ReviewSettings

    raw = load_config().raw.get("reviews") if config_path().exists() else None
    return ReviewSettings.from_config(raw) if raw else None


@click.command(name="view")
@click.argument("results", required=False, type=click.Path(exists=True))
@click.option("--split", "split", default=None, help="benchmark_split key (default: the only one in the warehouse).")
@click.option("--model", "model", default=None, help="Model key (default: the only one for the split).")
@click.option("--metric", default=None, help="Which metric decides correct/incorrect (default: the first).")
@click.option("--detailed", is_flag=True, help="Full prompt, raw output, error and every verdict per sample.")
@click.option("--level", default=None, help="Only samples whose level (metadata Level/level, or slice level=) is this.")
@click.option("--correct-only", is_flag=True, help="Only samples the metric marks correct.")
@click.option("--incorrect-only", is_flag=True, help="Only samples the metric marks incorrect (or failed).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most N samples.")
@click.option("--json", "as_json", is_flag=True, help="JSON records instead of a table.")
@click.option("--web", is_flag=True, help="Serve the web viewer (runs, samples, comparisons, charts); docs/viewer.md.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --web: address to bind.")
@click.option("--port", type=click.IntRange(1, 65535), default=8585, show_default=True, help="With --web: port.")
@click.option("--max-file-mb", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Size cap on RESULTS, in MB (default {DEFAULT_MAX_FILE_MB}); docs/operations.md.")
def view_cmd(results, split, model, metric, detailed, level, correct_only, incorrect_only, limit, as_json, web=False,
             host="127.0.0.1", port=8585, max_file_mb=None) -> None:
    """Accuracy (overall and per slice) and per-sample results of one partition; RESULTS (an exported samples.jsonl
    or a run folder) reads that file instead of the warehouse. `--web`: the web viewer over the warehouse, or over
    RESULTS."""
    from evalpipe.cli.helpers import out as _out, table as _table, warehouse as _warehouse
    from evalpipe.core.errors import ConfigError, DataError

    if correct_only and incorrect_only:
        raise ConfigError("--correct-only and --incorrect-only exclude each other; pick one")
    if results is None:
        source = _warehouse()
    else:
        rf, source = open_results(results, max_file_mb)
        if not rf.records:
            raise DataError(f"{rf.path}: no sample could be read; each line is one sample's JSON object with a "
                            "sample_id (evalpipe export writes them)")
    if web:
        from evalpipe.viewer.app import serve

        what = f" over {results}" if results else ""
        click.echo(f"evalpipe viewer{what} on http://{'[' + host + ']' if ':' in host else host}:{port}/ "
                   "(Ctrl-C stops it)", err=True)
        reviews = _review_settings()  # (the defaults where the config has no `reviews:` section)
        serve(source, host=host, port=port, **({"reviews": reviews} if reviews is not None else {}))
        return

    # a results file's partition has its prompts even when no sample was scored
    parts = source.query("SELECT DISTINCT benchmark_split, model FROM "
                         f"{'judgements' if results is None else 'prompts'} ORDER BY 1, 2")
    if split:
        parts = parts[parts["benchmark_split"] == split]
    if model:
        parts = parts[parts["model"] == model]
    if len(parts) != 1:
        have = ", ".join(f"{r.benchmark_split}|{r.model}" for r in parts.itertuples()) or "none"
        raise DataError(f"pick one partition with --split and --model (matching: {have})")
    split, model = parts.iloc[0]["benchmark_split"], parts.iloc[0]["model"]
    metrics = source.query("SELECT DISTINCT metric FROM judgements WHERE benchmark_split = ? AND model = ? "
                           "ORDER BY 1", [split, model])["metric"].tolist()
    metric = metric or (metrics[0] if metrics else None)
    if metric is not None and metric not in metrics:
        raise ConfigError(f"no metric {metric!r} for {split}|{model}; available: {', '.join(metrics) or 'none'}")
    sql = """
        SELECT p.sample_index, p.sample_id, j.correct, j.score, j.status AS verdict, r.status, r.prediction, p.target,
               j.reason, p.prompt_text, r.raw_output, r.error, p.metadata, p.slices, r.input_tokens, r.output_tokens,
               r.latency_s, r.cost, j.details AS judge_details
        FROM prompts p
        LEFT JOIN rollouts r USING (benchmark_split, model, sample_id)
        LEFT JOIN judgements j ON j.benchmark_split = p.benchmark_split AND j.model = p.model
             AND j.sample_id = p.sample_id AND j.metric = ?
        WHERE p.benchmark_split = ? AND p.model = ?"""
    params: list[Any] = [metric, split, model]
    if correct_only:
        sql += " AND j.correct"
    if incorrect_only:
        sql += " AND coalesce(NOT j.correct, TRUE)"
    if level is not None:
        sql += (" AND coalesce(p.metadata->>'$.Level', p.metadata->>'$.level', p.slices->>'$.level', "
                "p.slices->>'$.Level') = ?")
        params.append(str(level))
    sql += " ORDER BY p.sample_index LIMIT ?"
    params.append(limit)
    df = source.query(sql, params)
    if as_json:
        click.echo(df.to_json(orient="records", indent=2))
        return
    click.echo(f"{split} | {model} | metric {metric or '-'} | {len(df)} sample(s)")
    spend = partition_spend(source, split, model)
    if spend:
        click.echo(spend)
    if metric is not None:
        acc = accuracy_frame(source, split, model, metric)
        click.echo(f"{metric} over all samples and per slice (95% CI):" if len(acc) else
                   f"{metric}: no metrics rows for this partition (evalpipe run computes them)")
        if len(acc):
            _out(_table(acc))  # (as the samples' table below)
        click.echo("")
    if not detailed:
        short = df[["sample_id", "correct", "score", "status", "prediction", "target"]].copy()
        for c in ("prediction", "target"):
            short[c] = short[c].map(lambda v: (v[:60] + "...") if isinstance(v, str) and len(v) > 60 else v)
        _out(_table(short, ".3f"))
        return
    for r in df.itertuples(index=False):
        lines = [f"--- {r.sample_id}  correct={r.correct} score={r.score} verdict={r.verdict} rollout={r.status}",
                 f"prompt:\n{r.prompt_text}", f"raw output:\n{r.raw_output}", f"prediction: {r.prediction}",
                 f"target: {r.target}", f"reason: {r.reason}"]
        if isinstance(r.error, str) and r.error:
            lines.append(f"error: {r.error}")
        lines.append(f"metadata: {r.metadata}  slices: {r.slices}")
        lines.append(f"tokens in/out: {r.input_tokens}/{r.output_tokens}  latency: {r.latency_s}  cost: {r.cost}")
        judged = sample_judge_usage(r.judge_details)
        if judged:
            lines.append(f"judge ({metric}): {judged}")
        _out("\n".join(lines) + "\n")
