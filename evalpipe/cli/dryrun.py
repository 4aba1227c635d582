"""Cost before spending: what a run (or a backfill) would send, per partition, without calling any model.

`evalpipe run --dry-run` loads each chosen split (its adapter, `limit` and sharding applied, exactly as the
`dataset` asset does), renders the prompts each model would get (the `prompts` asset's code), and estimates:

- input tokens: the prompt messages counted with litellm's `token_counter` for the model (its tokenizer when
  litellm knows it, else cl100k), falling back to characters / 4 when litellm can't count offline;
- output tokens: an upper bound, the model's `max_tokens` (`params.max_tokens`), else `DEFAULT_OUTPUT_TOKENS`;
- cost: tokens times the per-token prices of litellm's offline price map (or the model's `options.pricing`),
  through the same lookup the runners use to price real replies (evalpipe/runners/pricing.py). Runners that
  don't call an API (local, echo, scripted) cost nothing; an API model without a price shows `-`.

Samples already in a partition's rollout journal would not be sent again; they are counted under `cached`
and left out of the estimate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalpipe.core.config import EvalConfig

DEFAULT_OUTPUT_TOKENS = 256  # the driver's own reservation for rate limits when max_tokens is unset
API_RUNNERS = {"litellm", "openai", "api"}


@dataclass
class Estimate:
    benchmark_split: str
    model: str
    samples: int
    cached: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None  # None: an API model without a price in the map


def _counter(model_name: str | None):
    """A function messages -> tokens: litellm's counter for this model, else characters / 4."""
    def by_chars(messages: list[dict[str, Any]]) -> int:
        return sum(len(m.get("content") or "") if isinstance(m.get("content"), str)
                   else len(json.dumps(m.get("content"), default=str)) for m in messages) // 4 + 3 * len(messages)

    if not model_name:
        return by_chars
    try:
        from evalpipe.runners.pricing import import_litellm

        litellm = import_litellm()
        litellm.token_counter(model=model_name, messages=[{"role": "user", "content": "probe"}])
    except Exception:  # no litellm, or no tokenizer offline for this model
        return by_chars

    def by_litellm(messages: list[dict[str, Any]]) -> int:
        try:
            return int(litellm.token_counter(model=model_name, messages=messages))
        except Exception:
            return by_chars(messages)

    return by_litellm


def _journaled(split_key: str, model, prompts: pd.DataFrame) -> set[str]:
    """Sample ids whose rollout is already in the partition's journal under the fingerprint this run would use
    (runner identity, prompt, sample), so a changed model or prompt counts as not cached. Read-only."""
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.store.journal import Journal
    from evalpipe.runners import build_runner

    path = pipeline.journal_path("rollouts", split_key, model.key)
    if not path.exists():
        return set()
    try:
        requests = pipeline.rollout_requests(build_runner(model), prompts)  # runners load weights in start() only
        with Journal(path) as journal:
            found = journal.lookup([r.fingerprint for r in requests])
    except Exception:  # a runner that can't be built here, an unreadable journal: count nothing as cached
        return set()
    return {r.sample_id for r in requests if r.fingerprint in found}


def estimate(cfg: EvalConfig, splits: list[str], models: list[str],
             split_options: dict[str, Any] | None = None, params: dict[str, Any] | None = None) -> list[Estimate]:
    """One `Estimate` per (split, model), in that order. `split_options` and `params` are the run's overrides
    (`--limit`, `--benchmark-option`, `--runner-option params.K=V`)."""
    import dataclasses

    from evalpipe.pipeline import stages as pipeline
    from evalpipe.runners.api import split_provider
    from evalpipe.runners.pricing import token_prices

    out: list[Estimate] = []
    for split_key in splits:
        split = cfg.split(split_key)
        if split_options:
            split = dataclasses.replace(split, options={**split.options, **split_options})
        dataset = pipeline.build_dataset(split)
        for model_key in models:
            model = cfg.model(model_key).with_overrides(params=params or {})
            prompts = pipeline.build_prompts(split, model_key, dataset)
            done = _journaled(split.key, model, prompts)
            todo = prompts[~prompts["sample_id"].isin(done)] if done else prompts
            api = model.runner in API_RUNNERS and bool(model.model)
            count = _counter(model.model if api else None)
            tin = sum(count(json.loads(m)) for m in todo["messages"])
            tout = int(model.params.get("max_tokens") or DEFAULT_OUTPUT_TOKENS) * len(todo)
            cost: float | None = 0.0
            if api:
                provider, _ = split_provider(model.model or "")
                pin, pout = token_prices(model.model, provider, model.options.get("pricing"))
                cost = None if (pin, pout) == (0.0, 0.0) else tin * pin + tout * pout
            out.append(Estimate(split.key, model_key, len(prompts), len(prompts) - len(todo), tin, tout, cost))
    return out


def as_frame(estimates: list[Estimate]) -> pd.DataFrame:
    """The table `--dry-run` prints: one row per partition and a `total` row."""
    rows = [{"benchmark_split": e.benchmark_split, "model": e.model, "samples": e.samples, "cached": e.cached,
             "est_input_tokens": e.input_tokens, "est_output_tokens (max)": e.output_tokens,
             "est_cost_usd": "-" if e.cost_usd is None else f"{e.cost_usd:.4f}"} for e in estimates]
    priced = [e.cost_usd for e in estimates if e.cost_usd is not None]
    rows.append({"benchmark_split": "total", "model": "", "samples": sum(e.samples for e in estimates),
                 "cached": sum(e.cached for e in estimates),
                 "est_input_tokens": sum(e.input_tokens for e in estimates),
                 "est_output_tokens (max)": sum(e.output_tokens for e in estimates),
                 "est_cost_usd": f"{sum(priced):.4f}" + (" + unpriced" if len(priced) < len(estimates) else "")})
    import pandas as pd

    return pd.DataFrame(rows)


def _backfill_command():
    import click

    @click.command(name="dry-run")
    @click.option("--partitions", default=None, metavar="KEYS",
                  help="Comma-separated 'split|model' keys, as `dagster job backfill --partitions` takes them.")
    @click.option("--all", "all_partitions", is_flag=True, help="Every (split, model) of the config.")
    def dry_run_cmd(partitions: str | None, all_partitions: bool) -> None:
        """Cost of a backfill before launching it: per partition the samples, estimated tokens and cost, and the
        total (the same estimate as `evalpipe run --dry-run`)."""
        from evalpipe.project import load_config
        from evalpipe.core.errors import ConfigError

        cfg = load_config()
        if all_partitions == bool(partitions):
            raise ConfigError("give --partitions 'split|model,...' or --all (one of them)")
        pairs = ([(s, m) for s in cfg.splits for m in cfg.models] if all_partitions else
                 [tuple(k.strip().split("|", 1)) for k in partitions.split(",") if k.strip()])
        bad = [p for p in pairs if len(p) != 2]
        if bad:
            raise ConfigError(f"--partitions: {bad[0][0]!r} is not a 'split|model' key")
        est = []
        for split, model in pairs:
            est += estimate(cfg, [split], [model])
        click.echo(as_frame(est).to_markdown(index=False))

    return dry_run_cmd


dry_run_command = _backfill_command()


def budget_lines(cfg: EvalConfig, estimates: list[Estimate]) -> list[str]:
    """`--dry-run`: the estimate beside each `budget:` cap (run, tick, day), with what is already spent today
    for the day cap. Output tokens are an upper bound (max_tokens), so is the cost."""
    section = cfg.raw.get("budget")
    if not section:
        return []
    from evalpipe.store.ratelimit import budget_for, budget_ledgers

    tokens = sum(e.input_tokens + e.output_tokens for e in estimates)
    priced = [e.cost_usd for e in estimates if e.cost_usd is not None]
    cost = sum(priced)
    unpriced = len(priced) < len(estimates)
    spent_today = {}
    budget = budget_for(section, budget_ledgers(project=str(cfg.path)), cfg.raw.get("rate_limits"))
    if budget is not None:
        spent_today = {s["scope"]: s for s in budget.status()}
    lines = ["budget:"]
    for scope in ("run", "tick", "day"):
        caps = section.get(scope)
        if not caps:
            continue
        already = spent_today.get(scope) if scope == "day" else None
        bits = []
        if caps.get("cost_usd") is not None:
            have = caps["cost_usd"] - (already["cost_usd"] if already else 0.0)
            verdict = "fits" if cost <= have else f"STOPS at about {max(0.0, 100 * have / cost):.0f}% of the requests"
            bits.append(f"est ${cost:.4f}{' + unpriced' if unpriced else ''} of ${caps['cost_usd']:g}"
                        + (f" (${already['cost_usd']:.4f} spent today)" if already else "") + f": {verdict}")
        if caps.get("tokens") is not None:
            have = caps["tokens"] - (already["tokens"] if already else 0.0)
            verdict = "fits" if tokens <= have else f"STOPS at about {max(0.0, 100 * have / tokens):.0f}% of the requests"
            bits.append(f"est {tokens} tokens of {caps['tokens']:g}"
                        + (f" ({already['tokens']:.0f} spent today)" if already else "") + f": {verdict}")
        lines.append(f"  {scope}: " + "; ".join(bits))
    return lines
