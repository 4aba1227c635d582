"""Reproducibility on the command line (docs/reproducibility.md).

- options of `evalpipe run`: `--num-shards/--shard-index`, `--prompt-wrapper`, `--experiment`, `--run-id`,
  `--no-fail-on-fingerprint-mismatch` (turned into split options, runner options, tags and resources by
  `RunOptions`, evalpipe/repro/run_request.py);
- `evalpipe validate-sharding`: a baseline run and an N-shard run in isolated state, compared;
- `evalpipe dataset-header`: print the `{"__header__": ...}` line that pins a split's fingerprints;
- `evalpipe runs`: the kept run folders of a partition;
- `evalpipe summarize --run-dir DIR` reads one run folder (see `summarize_run_dir`).
"""
from __future__ import annotations

import json
from pathlib import Path
import os
import sys

import click


def run_options(f):
    """The reproducibility options of `evalpipe run` (they reach the command as keyword arguments)."""
    opts = [
        click.option("--num-shards", type=click.IntRange(min=1), default=None,
                     help="Split each partition into N stable-hash shards (with --shard-index)."),
        click.option("--shard-index", type=click.IntRange(min=0), default=None,
                     help="Which shard this process runs (0-based); shards merge into the partition when all are done."),
        click.option("--prompt-wrapper", type=click.Path(dir_okay=False), default=None,
                     help="A .j2 (JSON system/user) or .tmpl (flat text) wrapper for every chosen model."),
        click.option("--experiment", default=None,
                     help="Name this configuration: each model's partition key becomes <model>@<experiment>."),
        click.option("--run-id", "run_id", default=None, help="Name the run's artifact folder (default: Dagster's run id)."),
        click.option("--no-fail-on-fingerprint-mismatch", "no_fail_on_fingerprint_mismatch", is_flag=True,
                     help="Warn instead of failing when the data disagree with the dataset header's fingerprints."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


# ---- summarize --run-dir ---------------------------------------------------------------------------------------------
def summarize_run_dir(run_dir: str, as_json: bool, all_slices: bool) -> None:
    import pandas as pd

    from evalpipe.store.artifacts import LATEST, read_run_dir

    p = Path(run_dir).expanduser()
    if not any((d / "summary.json").exists() for d in (p, p / LATEST)) and \
            any((d / "samples.jsonl").exists() for d in (p, p / LATEST)):
        # a copied folder without summary.json: rebuilt from its samples with the pipeline's aggregation
        from evalpipe.cli.view import read_results, rebuilt_summary

        rf = read_results(str(p))
        summary = rebuilt_summary(rf)
        click.echo(f"(no summary.json in {rf.path.parent}: rebuilt from {rf.path.name}; rows derived from per-sample "
                   "details, such as a judge's components or pass@k, cannot be: docs/reproducibility.md)", err=True)
    else:
        summary = read_run_dir(run_dir)
    rows = [r for r in summary.get("metrics", []) if all_slices or r.get("slice") == "all"]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    c = summary.get("counts", {})
    click.echo(f"{summary.get('benchmark_split')} | {summary.get('model')} | run {summary.get('run_id')} | "
               f"finished {summary.get('finished_at')} | {c.get('samples')} samples, {c.get('errors')} errors")
    if "cost_usd" in c:  # [spend] the rollouts' tokens and cost, the judges' beside them
        from evalpipe.store.artifacts import spend_text

        click.echo("spend: " + spend_text(c, summary.get("judge_usage")))
    cols = ["metric", "slice", "value", "stderr", "ci_low", "ci_high", "n", "n_unscored", "n_errors"]
    df = pd.DataFrame(rows, columns=cols)
    click.echo(df.to_markdown(index=False, floatfmt=".4f") if len(df) else "(no rows)")


# ---- commands ---------------------------------------------------------------------------------------------------------
@click.command(name="validate-sharding")
@click.option("--split", "split_key", default=None, help="benchmark_split key, e.g. smoke/test (default: the only one).")
@click.option("--dataset", "dataset", default=None, help="Same as --split (the Makefile's DATASET=).")
@click.option("--model", "model_key", required=True, help="Model key to run.")
@click.option("--runner", default=None, help="Check that the model uses this runner (the Makefile's RUNNER=).")
@click.option("--shards", "num_shards", type=click.IntRange(min=2), default=4, show_default=True)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Only the first N samples.")
@click.option("--atol", type=float, default=1e-6, show_default=True)
@click.option("--rtol", type=float, default=1e-6, show_default=True)
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Where the isolated baseline and shard state go (default: a temp folder, removed after).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), default=None,
              help="Write the report JSON here (default: <DAGSTER_HOME>/sharding_reports/<split>__<model>.json).")
@click.option("--runner-option", "runner_options", multiple=True, metavar="K=V",
              help="Runner override for every run (repeatable), as in `evalpipe run`.")
def validate_sharding_cmd(split_key, dataset, model_key, runner, num_shards, limit, atol, rtol, workdir, report_path,
                          runner_options) -> None:
    """Prove an N-shard run equals one pass: same samples, verdicts, metrics, fingerprints and gates."""
    from evalpipe.cli.helpers import EXIT_GATE, kv as _kv
    from evalpipe.core.config import dagster_home
    from evalpipe.project import load_config
    from evalpipe.core.errors import ConfigError
    from evalpipe.repro.validate_sharding import run_isolated

    cfg = load_config()
    split_key = split_key or dataset
    if not split_key:
        if len(cfg.splits) != 1:
            raise ConfigError(f"pick a split with --split (configured: {', '.join(cfg.splits)})")
        split_key = next(iter(cfg.splits))
    if split_key not in cfg.splits:  # a benchmark name with one split
        matches = [k for k, s in cfg.splits.items() if s.benchmark == split_key]
        split_key = matches[0] if len(matches) == 1 else split_key
    cfg.split(split_key)
    model = cfg.model(model_key)
    if runner and model.runner != runner:
        raise ConfigError(f"model {model_key!r} uses runner {model.runner!r}, not {runner!r}")
    report_path = report_path or str(dagster_home() / "sharding_reports" /
                                     f"{split_key.replace('/', '__')}__{model_key.replace('/', '__')}.json")
    report = run_isolated(split_key, model_key, num_shards, limit=limit, atol=atol, rtol=rtol, workdir=workdir,
                          runner_options=_kv(runner_options, "--runner-option"), report_path=report_path)
    flags = ", ".join(f"{k}={report[k]}" for k in ("fingerprints_match", "coverage_ok", "metrics_match", "gates_ok"))
    click.echo(f"{'ok' if report['ok'] else 'FAILED'}: {split_key} x {model_key}, {num_shards} shards "
               f"{report['shard_sizes']}: {flags}")
    if report["per_example_mismatches"]:
        click.echo(f"  {len(report['per_example_mismatches'])} per-example mismatch(es), e.g. "
                   f"{report['per_example_mismatches'][0]}")
    if report["duplicates"] or report["missing"]:
        click.echo(f"  duplicates: {report['duplicates'][:5]}  missing: {report['missing'][:5]}")
    click.echo(f"report: {report_path}")
    if not report["ok"]:
        sys.exit(EXIT_GATE)


@click.command(name="dataset-header")
@click.option("--split", "split_key", required=True, help="benchmark_split key, e.g. smoke/test.")
@click.option("--model", "model_key", default=None, help="Also pin this model's tokenizer fingerprint (local models).")
@click.option("--gates", default=None, help="JSON object of gates to record, e.g. '{\"min_exact_match\": 0.5}'.")
def dataset_header_cmd(split_key: str, model_key: str | None, gates: str | None) -> None:
    """Print the `{"__header__": ...}` line pinning a split's fingerprints (make it the JSONL's first line, or save
    it as `<data file>.header.json`)."""
    from evalpipe.pipeline import fingerprints
    from evalpipe.benchmarks import adapter_for
    from evalpipe.project import load_config
    from evalpipe.core.errors import ConfigError

    cfg = load_config()
    split = cfg.split(split_key)
    samples = list(adapter_for(split).load())
    tok = fingerprints.tokenizer_fingerprint(cfg.model(model_key)) if model_key else None
    try:
        g = json.loads(gates) if gates else None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--gates is not valid JSON ({exc.msg})") from None
    click.echo(json.dumps(fingerprints.make_header(samples, tool_registry=fingerprints.tool_registry_sha256(split),
                                                   tokenizer=tok, gates=g), sort_keys=True))


@click.command(name="runs")
@click.option("--split", "split_key", required=True, help="benchmark_split key.")
@click.option("--model", "model_key", required=True, help="Model key (with @experiment if any).")
def runs_cmd(split_key: str, model_key: str) -> None:
    """The kept run folders of one partition, oldest first (`latest` marks the newest)."""
    import pandas as pd

    from evalpipe.store.artifacts import LATEST, partition_dir, artifacts_root, run_folders
    from evalpipe.project import load_config
    from evalpipe.core.errors import DataError

    cfg = load_config()
    found = run_folders(split_key, model_key, cfg)
    if not found:
        raise DataError(f"no run folders for {split_key} x {model_key} under {artifacts_root(cfg)}")
    latest = partition_dir(artifacts_root(cfg), split_key, model_key) / LATEST
    target = os.path.realpath(latest) if latest.exists() else None
    rows = []
    for p in found:
        m = json.loads((p / "manifest.json").read_text())
        rows.append({"run_id": p.name, "finished_at": m.get("finished_at"), "samples": m.get("counts", {}).get("samples"),
                     "latest": "*" if target == str(p.resolve()) else "", "folder": str(p)})
    click.echo(pd.DataFrame(rows).to_markdown(index=False))


COMMANDS = [validate_sharding_cmd, dataset_header_cmd, runs_cmd]


def register(main: click.Group) -> None:
    for c in COMMANDS:
        main.add_command(c)
