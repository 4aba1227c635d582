"""`evalpipe validate`: check the whole config file without running anything (docs/operations.md)."""
from __future__ import annotations

import os

import click


@click.command(name="validate")
@click.argument("path", required=False, type=click.Path(dir_okay=False))
def validate(path: str | None) -> None:
    """Check the config file (default: --config / EVALS_CONFIG / evals.yaml): keys, types, ranges, names of
    adapters, runners and metrics, each one's declared options and metric settings (typed and ranged), judges for
    model-graded metrics and their credentials (the `api_key_env` variables), duplicate keys. Prints every problem as `file:line: message`; exits 2 if any."""
    from evalpipe.core.config import config_path
    from evalpipe.project import parse_config
    from evalpipe.project.schema import judge_key_problems, load_yaml, validate_config
    from evalpipe.core.errors import ConfigError
    from evalpipe.core.file_caps import read_config_text
    from evalpipe.core.redact import redact

    from pathlib import Path

    p = Path(path).expanduser().resolve() if path else config_path()
    if not p.exists():
        raise ConfigError(f"config file {p} not found; create it or point EVALS_CONFIG at one")
    try:
        dups: list = []
        data, lines = load_yaml(read_config_text(p), p, dups)
        notes: list[str] = []
        validate_config(data, p, lines, dups, notes)
        cfg = parse_config(data or {}, p)  # the checks that need the parsed config (split keys, ...)
        # a judge without its credentials: refused here as before a run, not after the rollouts were paid for
        missing = judge_key_problems(cfg, list(cfg.splits))
        if missing:
            raise ConfigError(missing[0], problems=[f"{p}: {m}" for m in missing])
    except ConfigError as exc:
        for line in exc.problems or [str(exc)]:
            click.echo(redact(f"error: {line}"), err=True)
        raise SystemExit(2)
    click.echo(f"{os.path.relpath(p) if not path else path}: ok ({len(cfg.splits)} benchmark split(s), "
               f"{len(cfg.models)} model(s))")
    for note in dict.fromkeys(notes):  # accepted but not checked: a plugin that declares no options
        click.echo(f"note: {note}", err=True)
