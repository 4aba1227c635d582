"""`evalpipe tools` (what each benchmark split offers) and `evalpipe tools check` (the broker smoke check).
docs/tools.md."""
from __future__ import annotations

import click

MIN_HIT_RATE = 0.95


def _tool_splits(split_keys: tuple[str, ...]):
    from evalpipe.project import load_config
    from evalpipe.core.errors import ConfigError
    from evalpipe.tools import ToolEnv

    cfg = load_config()
    keys = list(split_keys) or sorted(k for k, s in cfg.splits.items() if s.options.get("tools"))
    out = []
    for key in keys:
        split = cfg.split(key)
        env = ToolEnv.for_split(split)
        if env is None:
            if split_keys:
                raise ConfigError(f"{key}: no `tools:` configured (see docs/tools.md)")
            continue
        out.append((key, env))
    return out


@click.group(name="tools", invoke_without_command=True)
@click.option("--split", "splits", multiple=True, help="benchmark_split key (repeatable; default: every split with tools).")
@click.pass_context
def tools_cmd(ctx: click.Context, splits: tuple[str, ...]) -> None:
    """List the tools: registered tool kinds, and per benchmark split its mode, schemas offered, live tools,
    fixtures, allowlist and tool_registry_sha256."""
    if ctx.invoked_subcommand is not None:
        return
    from evalpipe.tools import list_tools
    from evalpipe.tools.schema import schema_name

    click.echo(f"registered tools: {', '.join(list_tools())}")
    found = _tool_splits(splits)
    if not found:
        click.echo("no benchmark split configures `tools:` (see docs/tools.md)")
    for key, env in found:
        click.echo(f"\n{key}  (mode {env.mode}, max_turns {env.max_turns}, max_tool_calls {env.max_tool_calls})")
        click.echo(f"  schemas:   {', '.join(schema_name(s) for s in env.schemas()) or '(from the dataset only)'}")
        click.echo(f"  live:      {', '.join(sorted(env.live_tools)) or '-'}")
        click.echo(f"  fixtures:  {len(env.broker.fixtures)} in {env.fixtures_dir or '-'} "
                   f"({', '.join(sorted(env.broker.names)) or 'none'})")
        allow = env.broker.allowlist
        click.echo(f"  allowlist: {', '.join(allow) if allow is not None else '(none: the tools each sample offers)'}")
        click.echo(f"  tool_registry_sha256: {env.tool_registry_sha256()}")


@tools_cmd.command(name="check")
@click.option("--split", "splits", multiple=True, help="benchmark_split key (repeatable; default: every split with fixtures).")
@click.option("--min-hit-rate", type=click.FloatRange(0, 1), default=MIN_HIT_RATE, show_default=True,
              help="Fail below this fixture hit rate.")
def check_cmd(splits: tuple[str, ...], min_hit_rate: float) -> None:
    """Broker smoke check: look every fixture key up again under normalization variants (re-cased and padded
    queries, reordered keys, null-valued extras, top_k omitted/null/3 for web.search*). Exits 1 when a split's
    hit rate is below --min-hit-rate."""
    failed = []
    found = [(k, e) for k, e in _tool_splits(splits) if e.broker.fixtures]
    if not found:
        click.echo("no benchmark split has tool fixtures to check")
        return
    for key, env in found:
        r = env.broker.check()
        ok = r["hit_rate"] >= min_hit_rate
        click.echo(f"{key}: {r['hits']}/{r['variants']} variants of {r['fixtures']} fixtures hit "
                   f"({r['hit_rate']:.1%}) {'ok' if ok else 'FAILED'}")
        for f in r["failures"]:
            click.echo(f"  miss: {f}")
        if not ok:
            failed.append(key)
    if failed:
        raise SystemExit(1)
