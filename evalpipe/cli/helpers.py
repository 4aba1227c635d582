"""What every command module of the CLI shares: exit codes, output (always redacted), tables, `k=v` parsing and
the warehouse. main.py registers the commands and the command modules use these; neither imports the other for
them (docs/architecture.md: no circles). Cheap to import: a read-only command pays only for what it uses."""
from __future__ import annotations

from typing import Any

import click

EXIT_FAILED, EXIT_USAGE, EXIT_GATE = 1, 2, 3


def redact_line(text: str) -> str:
    from evalpipe.core.redact import redact

    return redact(text)


def out(text: str) -> None:
    """Terminal output of tables and samples: secrets masked, and control sequences from model text escaped."""
    from evalpipe.core.terminal_text import terminal_safe

    click.echo(terminal_safe(redact_line(text)))


def table(df, floatfmt: str = ".4f") -> str:
    if df is None or not len(df):
        return "(no rows)"
    # a missing value prints as "-" here as in every other table and the web viewer (evalpipe/cli/view.py)
    return df.astype(object).where(df.notna(), None).to_markdown(index=False, floatfmt=floatfmt, missingval="-")


def kv(pairs: tuple[str, ...], flag: str) -> dict[str, Any]:
    """`k=v` pairs; values are parsed as YAML scalars (`5` -> 5, `true` -> True, `[a, b]` -> list)."""
    import yaml

    from evalpipe.core.errors import ConfigError

    parsed: dict[str, Any] = {}
    for p in pairs:
        if "=" not in p or not p.split("=", 1)[0].strip():
            raise ConfigError(f"{flag} expects key=value, got {p!r}")
        k, v = p.split("=", 1)
        try:
            parsed[k.strip()] = yaml.safe_load(v) if v.strip() else ""
        except yaml.YAMLError:
            parsed[k.strip()] = v
    # Overrides become resource config, which Dagster keeps in its run history: a secret must not be one.
    from evalpipe.core.redact import redact_obj

    for k, v in parsed.items():
        if redact_obj({k: v}) != {k: v}:
            raise ConfigError(f"{flag} {k}=... looks like a secret; put it in an environment variable and name "
                              "that variable in the model's api_key_env instead")
    return parsed


def warehouse():
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    return Warehouse(warehouse_path())
