"""`evalpipe import inspect LOG_OR_DIR...`: Inspect `.eval` logs streamed into the warehouse's `inspect_samples` and
`inspect_scores` tables (evalpipe/interop/inspect_stream.py; docs/interop.md "Large logs"), so `evalpipe sql` and
the Python API's `Warehouse.query` read them beside the pipeline's tables. Dagster is never imported.

Each log is one partition file per table (`log` = its file name), written in batches and renamed into place when
the whole log was read: a re-import replaces the log's rows, and a log that can't be read (not a zip, cut short, a
damaged member, over the size cap) is one line on stderr while the others still import (exit 1)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

PROGRESS_EVERY_S = 5.0  # a progress line at most this often, for a log that takes longer


def log_files(paths: tuple[str, ...]) -> list[Path]:
    """The `.eval` logs the arguments name: a file as given, a folder searched recursively (an `inspect eval-set`
    log dir: its `logs.json` and `eval-set.json` are not logs), each once, in a stable order."""
    from evalpipe.core.errors import ConfigError

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*.eval") if f.is_file())
            if not found:
                raise ConfigError(f"{p}: no .eval logs in this folder (a JSON log converts with "
                                  "`inspect log convert --to eval`)")
            out += found
        elif p.exists():
            if p.suffix != ".eval":
                raise ConfigError(f"{p}: not an Inspect .eval log; a JSON log converts with "
                                  "`inspect log convert --to eval --output-dir DIR`")
            out.append(p)
        else:
            raise ConfigError(f"{p}: no such file or folder")
    seen: dict[Path, None] = {}
    for f in out:
        seen.setdefault(f.resolve(), None)
    names: dict[str, Path] = {}
    for f in seen:  # the log's file name keys its rows: two logs of one name would replace each other
        if f.name in names:
            raise ConfigError(f"two logs named {f.name} ({names[f.name]} and {f}): their rows are keyed by the "
                              "file name; import them separately under different names")
        names[f.name] = f
    return list(seen)


@click.group(name="import")
def import_cmd() -> None:
    """Bring results written by other tools into the warehouse."""


@import_cmd.command(name="inspect")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--max-file-mb", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Size cap per log, uncompressed (default 512; docs/operations.md \"Size caps on files read\").")
@click.option("--batch-rows", type=click.IntRange(min=1), default=10_000, show_default=True,
              help="Samples held in memory per written batch.")
@click.option("--no-progress", is_flag=True, help="No progress lines on stderr.")
def inspect_cmd(paths: tuple[str, ...], max_file_mb: float | None, batch_rows: int, no_progress: bool) -> None:
    """Stream Inspect `.eval` logs (files, or folders such as an `inspect eval-set` log dir) into the warehouse
    tables inspect_samples and inspect_scores: query them with `evalpipe sql`. A re-import replaces a log's rows."""
    from evalpipe.cli.helpers import EXIT_FAILED, warehouse
    from evalpipe.core.errors import EvalError, describe_exception
    from evalpipe.core.file_caps import FileCap
    from evalpipe.core.redact import redact
    from evalpipe.interop.inspect_stream import import_to_warehouse

    cap = FileCap.from_option(max_file_mb, "--max-file-mb", "--max-file-mb")
    logs = log_files(paths)
    wh = warehouse()
    failed = 0
    for i, log in enumerate(logs, 1):
        t0 = last = time.monotonic()

        def progress(done: int, total: int, log: Path = log) -> None:
            nonlocal last
            now = time.monotonic()
            if not no_progress and done < total and now - last >= PROGRESS_EVERY_S:
                last = now
                click.echo(f"  {log.name}: {done:,}/{total:,} samples ({now - t0:.0f} s)", err=True)

        try:
            n = import_to_warehouse(log, wh, cap, batch_rows, progress)
        except Exception as exc:  # noqa: BLE001  this log only: the others still import
            failed += 1
            msg = " ".join(str(exc).split()) if isinstance(exc, EvalError) else describe_exception(exc)
            click.echo(redact(f"error: {msg if str(log) in msg else f'{log}: {msg}'}"), err=True)
            continue
        click.echo(f"{log}: {n:,} samples imported ({time.monotonic() - t0:.1f} s)")
    if len(logs) > 1:
        click.echo(f"{len(logs) - failed} of {len(logs)} logs imported into {wh.duckdb_path}"
                   + (f"; {failed} failed (above)" if failed else ""))
    if failed:
        sys.exit(EXIT_FAILED)
