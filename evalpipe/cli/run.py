"""What `evalpipe run` adds for people arriving from other harnesses: ad-hoc `--model <litellm string>`,
`--limit` runs kept apart, the official and lenient scores explained, and where to look next."""
from __future__ import annotations

import math
from typing import Any

import click

MISSING = "-"


def run_options(f):
    """`--api-base` and `--api-key-env` for an ad-hoc `--model`; `--include-limited` for the leaderboard print;
    `--epochs`/`--epochs-reducer`/`--sample-id` (read by evalpipe/repro/run_request.py `RunOptions`)."""
    f = click.option("--sample-id", "sample_ids", multiple=True, metavar="ID",
                     help="A try: only this sample (repeatable), as the model key <model>@ids-<hash> (kept apart "
                          "like --limit; the full results are untouched).")(f)
    f = click.option("--epochs-reducer", default=None, metavar="NAME",
                     help="How a sample's epoch scores become its score: mean (default), median, max, at_least_<k>, "
                          "pass_at_<k> (docs/metrics.md#epochs-and-sample-selection).")(f)
    f = click.option("--epochs", type=click.IntRange(min=1), default=None, metavar="N",
                     help="Evaluate each sample N times (split option epochs); scores are reduced per sample, the "
                          "interval is over samples (docs/metrics.md#epochs-and-sample-selection).")(f)
    f = click.option("--tasks", default=None, metavar="NAMES",
                     help="lm-evaluation-harness style: comma-separated benchmark names (like --benchmark); "
                          "`--tasks list` lists them.")(f)
    f = click.option("--output-path", default=None, type=click.Path(dir_okay=False), metavar="FILE",
                     help="Also write one portable JSON results file of this run to FILE (metrics with intervals, "
                          "resolved config, versions, fingerprints, counts) and its samples beside it in "
                          "FILE_samples/ (docs/interop.md#one-portable-results-file).")(f)
    f = click.option("--output-dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
                     help="Also write DSGym's layout of each finished partition to DIR: evaluation_results.json, "
                          "metrics_summary.json, sample_predictions/ (a folder per partition when there are "
                          "several; docs/api.md).")(f)
    f = click.option("--include-limited", is_flag=True,
                     help="Also show --limit runs in the leaderboard printed at the end.")(f)
    f = click.option("--api-key-env", default=None, metavar="VAR",
                     help="With an ad-hoc --model: the NAME of the environment variable holding its API key.")(f)
    f = click.option("--api-base", default=None, metavar="URL",
                     help="With an ad-hoc --model: the endpoint (OpenAI-compatible server, vLLM, ...); refused with "
                          "a configured model (set its api_base in the config).")(f)
    return f


def resolve_models(cfg: Any, keys: list[str], api_base: str | None, api_key_env: str | None) -> list[str]:
    """Config keys stay as they are; a litellm model string that is not a configured key (or any name that is not
    one, with --api-base) becomes a temporary entry `adhoc:<string>`. `--api-base`/`--api-key-env` with a
    configured model (named, or a default) is refused before anything is registered or called: the entry's
    endpoint and key are its `api_base`/`api_key_env` in the config file, and turning its key into a litellm model
    string would only fail every sample (docs/config.md)."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.core.run_marks import adhoc_model, looks_like_model_string

    configured = []
    for k in keys:
        try:
            cfg.model(k)
            configured.append(k)
        except ConfigError:
            pass
    if (api_base or api_key_env) and configured:
        raise ConfigError(f"--api-base/--api-key-env only apply to an ad-hoc --model (a litellm model string such as "
                          f"openai/gpt-4o-mini that is not a key in the config); {configured[0]!r} is configured: "
                          f"set `api_base:`/`api_key_env:` on it in the config file, or pass its litellm model "
                          f"string with --model")
    out = []
    for k in keys:
        if k in configured:
            out.append(k)
        elif looks_like_model_string(k) or api_base:
            from evalpipe.store.models_registry import register_model

            entry = adhoc_model(k, api_base=api_base, api_key_env=api_key_env)
            register_model(entry)  # for this instance: every run process looks it up
            out.append(entry.key)
        else:
            cfg.model(k)  # the config's own one-line error, with the configured names
    if (api_base or api_key_env) and not any(o.startswith("adhoc:") for o in out):
        raise ConfigError("--api-base/--api-key-env only apply to an ad-hoc --model (a litellm model string such as "
                          "openai/gpt-4o-mini that is not a key in the config)")
    return out


def write_output_dir(out_dir: str, partitions: list[Any], wh: Any) -> list[str]:
    """`--output-dir`: DSGym's layout of the finished partitions; the lines to print."""
    from evalpipe.store.dsgym_layout import write_dsgym_layout

    finished = [(p.benchmark_split, p.model) for p in partitions if p.success]
    return [f"DSGym results: {folder}" for folder in write_dsgym_layout(finished, wh, out_dir)] if finished else []


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def teaching_lines(metrics) -> list[str]:
    """Two lines per (split, model) where a lenient metric scores above the official one: what the gap means."""
    from evalpipe.metrics.lenient import is_lenient

    lines: list[str] = []
    if metrics is None or not len(metrics):
        return lines
    for (split, model), g in metrics.groupby(["benchmark_split", "model"], sort=True):
        official = [r for r in g.itertuples(index=False) if not is_lenient(r.metric) and _num(r.value) is not None]
        lenient = [r for r in g.itertuples(index=False) if is_lenient(r.metric) and _num(r.value) is not None]
        if not official or not lenient:
            continue
        o, le = official[0], max(lenient, key=lambda r: r.value)
        if le.value <= o.value:
            continue
        n = int(o.n) if _num(o.n) is not None else 0
        lines.append(f"{split} x {model}: official {o.metric} {o.value:.3f} ({round(o.value * n)}/{n}), lenient "
                     f"{le.metric} {le.value:.3f} ({round(le.value * n)}/{n}): the right answer is in more replies "
                     f"than the official scorer accepts.")
        lines.append("  The model knows some answers but does not follow the benchmark's answer format (GAIA: a last "
                     "line 'FINAL ANSWER: <bare answer>'); the official number is the one to compare across models.")
    return lines


def next_steps(warehouse_path: Any) -> list[str]:
    return [
        "next:",
        "  browse samples, compare models, charts:  .venv/bin/evalpipe view --web   (http://127.0.0.1:8585/)",
        "  two models side by side:                 .venv/bin/evalpipe compare <model A> <model B> --split <split>",
        "  SQL:  .venv/bin/evalpipe sql \"select model, benchmark_split, metric, value, ci_low, ci_high "
        "from metrics where slice = 'all'\"",
        f"        (or duckdb {warehouse_path})",
        "  another model: add it under `models:` in evals.yaml, or try one without editing anything:",
        "        .venv/bin/evalpipe run --model openai/gpt-4o-mini --api-key-env OPENAI_API_KEY --limit 5",
    ]


