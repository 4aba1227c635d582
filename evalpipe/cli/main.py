"""`evalpipe`: run evaluations and read their results from a terminal or CI (no daemon needed).

Exit codes: 0 ok; 1 a partition (or the leaderboard) failed; 2 a usage or config error (one line on stderr;
`--debug` shows the traceback); 3 a gate failed (an asset check of severity ERROR did not pass).
Every command is documented in docs/operations.md.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from evalpipe.project import plugins as _plugins  # noqa: F401  (the entry point installs plugin loading on registry misses)

# litellm reaches for the internet at import unless told not to; set before anything imports it.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

from evalpipe.cli.helpers import EXIT_FAILED, EXIT_GATE, EXIT_USAGE, kv, out, redact_line, table, warehouse


# Commands that only read results: they never import Dagster (~1 s of a start; tests/test_reads_without_dagster.py)
# (`import` writes the warehouse only, never Dagster's storage)
READ_ONLY = frozenset({"list", "sql", "leaderboard", "view", "compare", "summarize", "gate", "import"})


class _Group(click.Group):
    """User mistakes print one line and exit 2; `--debug` shows the traceback. `evalpipe run` goes to the warm
    server of this DAGSTER_HOME when one listens (`evalpipe serve`, evalpipe/cli/warm.py)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if standalone_mode:
            from evalpipe.cli import warm

            argv = list(sys.argv[1:] if args is None else args)
            if warm.wants_warm(argv):
                code = warm.run_warm(argv)
                if code is not None:
                    sys.exit(code)
        return super().main(args, prog_name, complete_var, standalone_mode, **extra)

    def invoke(self, ctx: click.Context):
        from evalpipe.core.errors import EvalError
        from evalpipe.project.redaction import install_redaction

        install_redaction()  # the config file's secrets masked in everything below, the error line included

        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            from evalpipe.core.redact import redact

            from evalpipe.core.errors import describe_exception

            msg = describe_exception(exc)  # the whole chain on one line: what failed, and its root cause
            if not isinstance(exc, EvalError):  # not a known user mistake: say what broke, and how to see more
                msg = f"{msg} (run with --debug for the traceback)"
            click.echo(f"error: {redact(msg)}", err=True)
            sys.exit(getattr(exc, "exit_code", EXIT_USAGE) if isinstance(exc, EvalError) else EXIT_FAILED)


# shared with the command modules (evalpipe/cli/helpers.py); the old names stay importable from here
_redact_line, _out, _table, _kv, _warehouse = redact_line, out, table, kv, warehouse


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show full tracebacks and Dagster's debug logs.")
@click.option("--config", "config_path", envvar="EVALS_CONFIG", default=None, help="Config file (default: evals.yaml).")
@click.option("--redact-pattern", "redact_patterns", multiple=True, metavar="REGEX",
              help="Also mask matches of this regex on every write path (repeatable).")
@click.pass_context
def main(ctx: click.Context, debug: bool, config_path: str | None, redact_patterns: tuple[str, ...]) -> None:
    """Evaluate models and agents on benchmarks (Dagster assets, DuckDB warehouse)."""
    ctx.obj = {"debug": debug}
    if config_path:
        os.environ["EVALS_CONFIG"] = os.path.abspath(config_path)
    # Dagster's console logger would print each step event and a full trace per failure; the CLI shows a
    # progress bar and one line per failure instead (everything stays in the run's event log for the UI).
    if debug or not os.environ.get("EVALS_DAGSTER_LOG_LEVEL"):
        os.environ["EVALS_DAGSTER_LOG_LEVEL"] = "DEBUG" if debug else "CRITICAL"
    if not debug:  # Dagster's beta/preview notices would interleave with the progress bar
        import warnings

        warnings.filterwarnings("ignore", message=r".*(is currently in (beta|preview)|is deprecated).*")
    from evalpipe.core.redact import add_patterns, install_error_redaction, install_log_redaction

    add_patterns(redact_patterns)
    install_log_redaction(dagster_errors=False)
    if ctx.invoked_subcommand not in READ_ONLY:  # a command that may run Dagster: its stored errors masked too
        install_error_redaction()


# ---- run (the request itself is prepared in evalpipe/repro/run_request.py, shared with evalpipe.evaluate) ---------
def _ux_run_options(f):
    from evalpipe.cli.run import run_options

    return run_options(f)


def _repro_run_options(f):
    from evalpipe.cli.repro import run_options

    return run_options(f)


@main.command()
@click.option("--benchmark", "benchmarks", multiple=True, help="Benchmark name (repeatable; default: default_benchmarks).")
@click.option("--split", "splits", multiple=True, help="Split name, or a full key like smoke/test (repeatable).")
@click.option("--model", "models", multiple=True,
              help="Model key, or a litellm model string not in the config (repeatable; default: default_models).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="A try: the first N samples of each split, as the model key <model>@limit<N> (kept apart, "
                   "not ranked; the dataset and the full results are untouched).")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="Requests in flight per partition.")
@click.option("--timeout-s", type=click.FloatRange(min=0, min_open=True), default=None, help="Per-attempt timeout.")
@click.option("--benchmark-option", "benchmark_options", multiple=True, metavar="K=V",
              help="Run-time split option for every chosen split (repeatable), e.g. max_turns=5 (options that decide "
                   "what the split holds belong in the config; docs/config.md); limit=N is --limit N.")
@click.option("--runner-option", "runner_options", multiple=True, metavar="K=V",
              help="Runner override (repeatable): a model_runner field (max_retries=2), params.K=V, or a runner option.")
@click.option("--no-progress", is_flag=True, help="No progress bar (CI logs).")
@click.option("--tools-mode", type=click.Choice(["replay", "live"]), default=None,
              help="How tool calls are answered in this run: replay (fixtures) or live (docs/tools.md).")
@click.option("--dry-run", is_flag=True, help="Print per partition the samples, estimated tokens and cost (litellm's "
              "price map), and the total; run nothing (evalpipe/cli/dryrun.py).")
@click.option("--reload-datasets", is_flag=True, help="Load every chosen split again, even when its dataset on record "
              "is current (same files, options and loading code; docs/operations.md#what-a-run-materializes).")
@_repro_run_options  # --num-shards/--shard-index, --prompt-wrapper, --experiment, --run-id, ... (evalpipe/cli/repro.py)
@_ux_run_options  # --api-base/--api-key-env for an ad-hoc --model, --include-limited, --tasks (evalpipe/cli/run.py)
@click.pass_context
def run(ctx: click.Context, benchmarks: tuple[str, ...], splits: tuple[str, ...], models: tuple[str, ...],
        limit: int | None, concurrency: int | None, timeout_s: float | None, benchmark_options: tuple[str, ...],
        runner_options: tuple[str, ...], no_progress: bool, **repro: Any) -> None:
    """Materialize dataset -> ... -> metrics for the chosen partitions, then the leaderboard.
    `--model` also takes a litellm model string (e.g. openai/gpt-4o-mini) that is not in the config; `--limit`
    runs get their own partitions (`<model>@limit<N>`), left out of the leaderboard."""
    api_base, api_key_env = repro.pop("api_base", None), repro.pop("api_key_env", None)
    include_limited, tasks = repro.pop("include_limited", False), repro.pop("tasks", None)
    dry_run = repro.pop("dry_run", False)  # [scale] --dry-run (evalpipe/cli/dryrun.py)
    reload_datasets = repro.pop("reload_datasets", False)
    tools_mode = repro.pop("tools_mode", None)  # [tools] --tools-mode (resources/tools.py)
    output_dir = repro.pop("output_dir", None)  # [dsgym] --output-dir (evalpipe/cli/run.py)
    if tasks and tasks.strip() == "list":  # lm-evaluation-harness habit: `--tasks list`
        from evalpipe.cli.view import list_cmd

        return ctx.invoke(list_cmd, what="benchmarks", fmt="table")
    if tasks:
        benchmarks = tuple(benchmarks) + tuple(t.strip() for t in tasks.split(",") if t.strip())
    from evalpipe.project import Project
    from evalpipe.core.errors import ConfigError
    from eval_assets.launch import check_results, evaluate, get_instance
    from resources import EvalConfigResource

    project = Project.from_file()  # the entry point: the environment's config, home and warehouse
    cfg = project.config
    wanted = set(benchmarks or cfg.default_benchmarks)
    unknown = wanted - {s.benchmark for s in cfg.splits.values()}
    if unknown:
        raise ConfigError(f"unknown benchmark(s) {sorted(unknown)}; configured: "
                          f"{', '.join(sorted({s.benchmark for s in cfg.splits.values()}))}")
    chosen = [k for k, s in cfg.splits.items()
              if (s.benchmark in wanted or k in splits) and (not splits or s.split in splits or k in splits)]
    if not chosen:
        raise ConfigError(f"no benchmark split matches --benchmark {list(benchmarks)} --split {list(splits)}; "
                          f"configured: {', '.join(cfg.splits)}")
    from evalpipe.repro.run_request import RunOptions, check_declared_options, check_judge_keys, runner_overrides

    rp = RunOptions.from_kwargs(repro)  # [reproducibility] shards, wrapper, experiment, run id
    from evalpipe.cli.run import resolve_models

    split_options = {**_kv(benchmark_options, "--benchmark-option"), **rp.split_options()}
    # the try rule (evalpipe/project/tries.py): --limit N (or --benchmark-option limit=N) and --sample-id are the
    # model keys <model>@limit<N> / <model>@ids-<h>, never the dataset partition
    limit = rp.run_try(limit, split_options).limit
    from evalpipe.project.schema import check_overrides

    check_overrides(split_options, "--benchmark-option")  # the file's types and ranges (limit >= 0, ...)
    resources = {"model_runner": runner_overrides({**_kv(runner_options, "--runner-option"), **rp.runner_options()},
                                                  concurrency, timeout_s), **rp.resources()}
    # before any model call and before an ad-hoc model is registered (a model string not in the config reads as litellm)
    asked = list(models) or None  # none named: each split's intended models (its benchmark's `models:`)
    check_declared_options(cfg, chosen, asked or list(dict.fromkeys(m for s in chosen for m in cfg.models_for(s))),
                           split_options, resources["model_runner"])
    if not dry_run:
        check_judge_keys(cfg, chosen)  # a judge's missing API key: before the rollouts are paid for
    # after every other setting is checked: an ad-hoc model is registered only for a run that will start
    # --limit: partitions of their own (<model>@limit<N>), never the full results
    per_split = rp.models_per_split(cfg, chosen, asked, limit,
                                    resolve=lambda names: resolve_models(cfg, names, api_base, api_key_env))
    model_keys = list(dict.fromkeys(m for s in chosen for m in per_split[s]))
    if split_options:
        resources["eval_config"] = EvalConfigResource(split_options=split_options)
    if tools_mode:
        from resources import ToolsResource

        resources["tools"] = ToolsResource(mode=tools_mode)
    if dry_run:  # [scale] cost before spending: no Dagster run, no model call
        from evalpipe.cli.dryrun import as_frame, estimate

        from evalpipe.cli.dryrun import budget_lines

        est = [e for s in chosen for e in estimate(cfg, [s], per_split[s], split_options,
                                                   resources["model_runner"].params)]
        _out(_table(as_frame(est)))
        for line in budget_lines(cfg, est):  # [spend] the estimate beside the `budget:` caps
            _out(line)
        return
    instance = get_instance(project)
    # Dagster, pandas and pyarrow leave ~1M long-lived objects; frozen, the collector's full passes during the run
    # (every few thousand samples, ~150-200 ms each) skip them: ~10% of a large run's CPU (docs/scale.md)
    import gc

    gc.freeze()

    from evalpipe.cli.progress import keep_terminal, reporter

    # An instance that captures compute logs redirects the process's fds 1/2 per run, and with partitions in threads
    # the redirections interleave and can leave them pointing at a log file. get_instance's instance doesn't capture
    # (docs/operations.md#compute-logs); keep_terminal still restores fds 1/2 afterwards and gives the progress
    # display its own copy of the terminal.
    from evalpipe.cli.progress import spend_line

    # [spend] one `run` budget scope for every Dagster run of this command (docs/spend.md)
    tags, budget_text = spend_line(project, rp.tags())
    with keep_terminal() as terminal, reporter(enabled=not no_progress, stream=terminal) as progress:
        progress.spend = budget_text
        result = evaluate(project, chosen, per_split, resources=resources, instance=instance, on_progress=progress.step,
                          on_sample=progress.sample, tags=tags, reload_datasets=reload_datasets)
    if budget_text is not None:
        click.echo(budget_text(), err=True)
    if result.success:
        for s in chosen:  # shard runs: merge when all shards are done
            for line in rp.after_run(cfg, [s], per_split[s], instance):
                click.echo(_redact_line(line), err=True)

    wh = _warehouse()
    rows = []
    metrics = wh.query("SELECT benchmark_split, model, metric, value, n, n_unscored, n_errors, ci_low, ci_high "
                       "FROM metrics WHERE slice = 'all'")
    for p in result.partitions:
        m = metrics[(metrics["benchmark_split"] == p.benchmark_split) & (metrics["model"] == p.model)] if p.success else metrics.iloc[0:0]
        if not len(m):
            rows.append({"benchmark_split": p.benchmark_split, "model": p.model, "status": "ok" if p.success else "FAILED",
                         "metric": "-", "value": "-", "n": "-", "unscored": "-", "errors": "-", "95% CI": "-"})
        for r in m.itertuples(index=False):
            rows.append({"benchmark_split": p.benchmark_split, "model": p.model, "status": "ok", "metric": r.metric,
                         # no scored sample (e.g. hidden answers): no value, and the unscored count says why
                         "value": "-" if r.value != r.value else f"{r.value:.4f}", "n": r.n,
                         "unscored": r.n_unscored, "errors": r.n_errors,
                         "95% CI": "-" if r.ci_low != r.ci_low else f"{r.ci_low:.3f}-{r.ci_high:.3f}"})
    import pandas as pd

    _out(_table(pd.DataFrame(rows)))
    from evalpipe.cli.view import leaderboard_frame, leaderboard_table, partitions_spend

    # [spend] the rollouts' tokens and cost, the judges' beside them
    spends = partitions_spend(wh, [(p.benchmark_split, p.model) for p in result.partitions if p.success])
    for p in result.partitions:
        spend = spends.get((p.benchmark_split, p.model)) if p.success else None
        if spend:
            _out(f"{p.benchmark_split} x {p.model} {spend}")

    # ranked by each metric's direction (`=1` where tied, counts as counts); --limit runs only when asked
    board = leaderboard_table(leaderboard_frame(wh, include_limited))
    if len(board):
        _out("\nleaderboard (every model evaluated so far" + (", --limit runs included):" if include_limited else "):"))
        _out(_table(board))
    from evalpipe.cli.run import next_steps, teaching_lines

    for line in teaching_lines(metrics[metrics["model"].isin(model_keys)]):
        _out(line)
    _out(f"\nwarehouse: {wh.duckdb_path}")
    if output_dir:
        from evalpipe.cli.run import write_output_dir

        for line in write_output_dir(output_dir, result.partitions, wh):
            _out(line)
    # [interop] --output-path: the run's portable results file
    for line in rp.write_results_file(result.partitions, wh, cfg, " ".join(["evalpipe", *sys.argv[1:]])):
        _out(line)
    from evalpipe.pipeline.tracking import report_run  # [interop] failed partitions as FAILED MLflow runs; a
                                                       # tracker that failed, in one line
    for line in report_run(cfg, wh, instance, result.partitions):
        click.echo(_redact_line(line), err=True)
    from evalpipe.store.artifacts import artifacts_enabled, artifacts_root

    if artifacts_enabled(cfg):
        _out(f"run artifacts: {artifacts_root(cfg)}/<benchmark>/<split>/<model>/")
    _out("\n".join(next_steps(wh.duckdb_path)))
    checks = check_results(instance, [p.run_id for p in result.partitions if p.run_id])
    failed_gates = [c for c in checks if not c.passed and c.severity == "ERROR"]
    for c in checks:
        if not c.passed:
            _out(f"check {c.check} on {c.asset} [{c.partition}]: {'FAILED' if c.severity == 'ERROR' else 'warning'}"
                 f"{': ' + c.description if c.description else ''}")
    # a failed *blocking* check (samples_accounted) fails its run in Dagster; for the CLI it is a gate (exit 3)
    blocked = [p for p in result.partitions if not p.success and "blocking asset check" in (p.error or "")]
    if any(not p.success and p not in blocked for p in result.partitions) or not result.leaderboard_ok:
        failed = [f"{p.benchmark_split} x {p.model}: {p.error}" for p in result.partitions if not p.success]
        from evalpipe.core.redact import redact

        click.echo(redact("failed partitions:\n  " + "\n  ".join(failed)), err=True)
        sys.exit(EXIT_FAILED)
    if failed_gates or blocked:
        click.echo(f"gate failed: {len(failed_gates) or len(blocked)} asset check(s) did not pass", err=True)
        sys.exit(EXIT_GATE)


# ---- reading results ------------------------------------------------------------------------------------------------
def _filters(column_values: dict[str, tuple[str, ...]]) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for col, values in column_values.items():
        if values:
            clauses.append(f"{col} IN ({', '.join('?' for _ in values)})")
            params += list(values)
    return (" AND ".join(clauses) or "TRUE"), params


@main.command()
@click.option("--split", "splits", multiple=True, help="benchmark_split key, e.g. smoke/test (repeatable).")
@click.option("--benchmark", "benchmarks", multiple=True, help="Benchmark name (repeatable).")
@click.option("--model", "models", multiple=True, help="Model key (repeatable).")
@click.option("--metric", "metric_names", multiple=True, help="Metric name (repeatable).")
@click.option("--slices", "all_slices", is_flag=True, help="Every slice, not only `all`.")
@click.option("--json", "as_json", is_flag=True, help="JSON records instead of a table (same as --format json).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
              help="table (long text wrapped to the terminal), csv or json.")
@click.option("--include-limited", is_flag=True, help="Also --limit runs (model keys ending @limit<N>).")
@click.option("--run-dir", "run_dir", type=click.Path(file_okay=False), default=None,
              help="Read one kept run folder (<artifacts>/<benchmark>/<split>/<model>/<run_id>) instead of the warehouse.")
def summarize(splits, benchmarks, models, metric_names, all_slices, as_json, run_dir=None, fmt="table",
              include_limited=False) -> None:
    """Metrics of one or more partitions (default: all) as a table."""
    from evalpipe.core.errors import DataError

    if run_dir:  # [reproducibility] a past run's own summary (evalpipe/cli/repro.py)
        from evalpipe.cli.repro import summarize_run_dir

        return summarize_run_dir(run_dir, as_json, all_slices)

    where, params = _filters({"benchmark_split": splits, "model": models, "metric": metric_names})
    if benchmarks:
        where += " AND split_part(benchmark_split, '/', 1) IN (" + ", ".join("?" for _ in benchmarks) + ")"
        params += list(benchmarks)
    if not all_slices:
        where += " AND slice = 'all'"
    df = _warehouse().query(
        f"SELECT * FROM metrics WHERE {where} ORDER BY benchmark_split, metric, slice, model", params)
    if not include_limited and len(df):
        from evalpipe.core.run_marks import is_limited

        df = df[~df["model"].map(is_limited)]
    if not len(df):
        raise DataError("no metrics match; materialize some first (evalpipe run) or check --split/--model")
    df = _best_first(df)
    from evalpipe.cli.view import render

    _out(render(df, "json" if as_json else fmt).rstrip("\n"))


def _best_first(df):
    """Rows of each (split, metric, slice) best first by the metric's declared direction (a lower-is-better
    rate ascending; no better side: by model), with the direction and kind shown."""
    from evalpipe.metrics.aggregate import with_directions

    df = with_directions(df)
    value = df["value"].astype(float)
    hib = df["higher_is_better"]
    df["_order"] = value.where(hib.fillna(False).to_numpy(bool), -value).where(hib.notna().to_numpy(), 0.0)
    df = df.sort_values(["benchmark_split", "metric", "slice", "_order", "model"],
                        ascending=[True, True, True, False, True], na_position="last", kind="stable")
    df["better"] = hib.map({True: "higher", False: "lower"}).fillna("-")
    cols = ["benchmark_split", "model", "metric", "slice", "value", "stderr", "ci_low", "ci_high", "n",
            "n_unscored", "n_errors", "better", "kind"]
    return df[[c for c in cols if c in df.columns]].reset_index(drop=True)


@main.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="JSON records instead of a table.")
@click.option("--csv", "as_csv", is_flag=True, help="CSV instead of a table.")
def sql(query: str, as_json: bool, as_csv: bool) -> None:
    """Run a SQL query against the warehouse (tables: datasets, prompts, rollouts, judgements, metrics,
    leaderboard; inspect_samples and inspect_scores after `evalpipe import inspect`; view sample_stages: each sample's stage init/rollout/judged) and print the result. Reads Parquet
    directly: never blocks a running evaluation."""
    import duckdb

    from evalpipe.core.errors import EvalError

    try:
        df = _warehouse().query(query)
    except duckdb.Error as exc:
        raise EvalError(f"SQL error: {str(exc).splitlines()[0]}") from None
    if as_json:
        click.echo(df.to_json(orient="records", indent=2))
    elif as_csv:
        click.echo(df.to_csv(index=False), nl=False)
    else:
        _out(_table(df, "g"))


from evalpipe.cli.export import export_cmd  # noqa: E402  `evalpipe export [--format inspect]` (evalpipe/cli/export.py)

main.add_command(export_cmd)


# ---- registries -----------------------------------------------------------------------------------------------------
def _doc(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def _list(kind: str, names: list[str], get) -> None:
    import pandas as pd

    rows = []
    for n in names:
        try:
            rows.append({kind: n, "description": _doc(get(n))})
        except Exception:
            rows.append({kind: n, "description": ""})
    click.echo(_table(pd.DataFrame(rows)))


@main.command()
def adapters() -> None:
    """List the benchmark adapters (the `adapter:` of a benchmark)."""
    from evalpipe.benchmarks import get_adapter, list_adapters

    _list("adapter", list_adapters(), get_adapter)


@main.command()
def runners() -> None:
    """List the model runners (the `runner:` of a model)."""
    from evalpipe.runners import get_runner, list_runners

    _list("runner", list_runners(), get_runner)


@main.command(name="metrics")
def metrics_cmd() -> None:
    """List the metrics (the `metrics:` of a benchmark)."""
    import evalpipe.benchmarks  # noqa: F401  the adapters register their own metrics (gaia, gaia_strict, qrdata, tau2_reward, ...)
    from evalpipe.metrics import get_metric, list_metrics

    _list("metric", list_metrics(), get_metric)


from evalpipe.cli.validate import validate as _validate_cmd  # noqa: E402

main.add_command(_validate_cmd)

from evalpipe.cli.repro import register as _register_repro  # noqa: E402

_register_repro(main)  # validate-sharding, dataset-header, runs (evalpipe/cli/repro.py)
from evalpipe.cli.view import compare_cmd, leaderboard_cmd, list_cmd, view_cmd  # noqa: E402  (evalpipe/cli/view.py)

main.add_command(list_cmd)  # evalpipe list
main.add_command(view_cmd)  # evalpipe view [RESULTS.jsonl | run folder] [--web]
main.add_command(compare_cmd)  # evalpipe compare A B
from evalpipe.cli.gate import gate_cmd  # noqa: E402  `evalpipe gate`: a CI regression check (issue 34)

main.add_command(gate_cmd)
main.add_command(leaderboard_cmd)  # evalpipe leaderboard: ranked by each metric's direction
from evalpipe.cli.tools import tools_cmd  # noqa: E402  (evalpipe tools, evalpipe tools check: evalpipe/cli/tools.py)

main.add_command(tools_cmd)
from evalpipe.cli.sandbox import sandbox_cmd  # noqa: E402  (evalpipe sandbox check|cleanup: evalpipe/cli/sandbox.py)

main.add_command(sandbox_cmd)
from evalpipe.cli.dryrun import dry_run_command  # noqa: E402  `evalpipe dry-run`: a backfill's cost (issue 15)

main.add_command(dry_run_command)
from evalpipe.cli.forget import forget_cmd  # noqa: E402  `evalpipe forget MODEL_KEY...` (evalpipe/cli/forget.py)
main.add_command(forget_cmd)
from evalpipe.cli.pairwise import pairwise_cmd  # noqa: E402  `evalpipe pairwise` (evalpipe/cli/pairwise.py)
main.add_command(pairwise_cmd)
from evalpipe.cli.import_logs import import_cmd  # noqa: E402  `evalpipe import inspect LOG_OR_DIR...` (issue 32)
main.add_command(import_cmd)


@main.command()
@click.option("--idle-s", type=click.FloatRange(min=1), default=1800.0, show_default=True,
              help="Stop after this many seconds without a request.")
@click.option("--background", is_flag=True, help="Detach (log: $DAGSTER_HOME/logs/warm.log) once it listens.")
@click.option("--stop", "stop_server", is_flag=True, help="Stop the server of this DAGSTER_HOME.")
def serve(idle_s: float, background: bool, stop_server: bool) -> None:
    """Keep Dagster, pandas and the asset definitions imported, so each `evalpipe run` of this DAGSTER_HOME starts
    warm (evalpipe/cli/warm.py): a forked child runs it on your terminal. Stale code, config or environment is never
    served: the run goes cold and the server stops."""
    from evalpipe.cli import warm

    if stop_server:
        click.echo("stopped" if warm.stop() else f"no server listens on {warm.socket_path()}")
        return
    if background:
        click.echo(f"listening on {warm.start_background(idle_s)}")
        return
    sys.exit(warm.serve(idle_s, cli=main))

if __name__ == "__main__":
    main()
