"""`evalpipe sandbox ...`: which sandbox backend is in effect, a quick attack suite, cleanup (docs/sandbox.md)."""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import click


@click.group(name="sandbox")
def sandbox_cmd() -> None:
    """The code sandbox: `check` (backend in effect + quick attack suite), `cleanup`."""


def _configured_backend() -> str | None:
    """The config file's `sandbox:`, if a readable config is there (the check runs without one too)."""
    from evalpipe.project import load_config

    try:
        value = load_config().raw.get("sandbox")
    except Exception:  # no config file, or an invalid one: not this command's error to raise
        return None
    return str(value) if value else None


@sandbox_cmd.command(name="check")
@click.option("--backend", type=click.Choice(["auto", "bwrap", "docker", "process"]), default=None,
              help="Backend to check (default: $EVALS_SANDBOX, the config's `sandbox:`, else auto).")
def check_cmd(backend: str | None) -> None:
    """Print each backend's status and the one in effect, then run a quick attack/conformance suite on it.

    Exit status 0 when every check passes, 1 when one fails, 2 when the backend can't run here."""
    from evalpipe.core.errors import ConfigError
    from evalpipe.sandbox import backend_status, get_sandbox, resolve_backend
    from evalpipe.sandbox.selfcheck import run_checks

    for name, why in sorted(backend_status().items(), key=lambda kv: -get_sandbox(kv[0]).strength):
        click.echo(f"  {name:8s} {'usable' if why is None else 'unusable: ' + why}")
    try:
        chosen = resolve_backend(backend, _configured_backend())
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    boundary = "an OS-level boundary" if chosen != "process" else "NOT a security boundary"
    click.echo(f"isolation in effect: {chosen} ({boundary})")
    start = time.perf_counter()
    results = run_checks(chosen)
    for c in results:
        click.echo(f"  [{'PASS' if c.ok else 'FAIL'}] {c.name}" + (f": {c.detail}" if c.detail else ""))
    failed = [c for c in results if not c.ok]
    click.echo(f"{len(results) - len(failed)}/{len(results)} checks passed under {chosen} "
               f"in {time.perf_counter() - start:.1f}s")
    sys.exit(1 if failed else 0)


@sandbox_cmd.command(name="cleanup")
@click.option("--older-than", type=float, default=3600.0, show_default=True,
              help="Seconds: remove sandbox folders untouched for longer than this.")
def cleanup_cmd(older_than: float) -> None:
    """Remove leftover sandbox work folders (evalpipe-sandbox-* in the temp folder, e.g. after a kill -9)
    and containers labelled evalpipe.sandbox=1."""
    import subprocess

    from evalpipe.sandbox import sweep_stale
    from evalpipe.sandbox.base import OWNER_LOCK

    removed = len(sweep_stale())  # any age: their evaluator is dead; a live one's folder (lock held) is never touched
    now = time.time()
    for path in Path(tempfile.gettempdir()).glob("evalpipe-sandbox-*"):
        try:
            if path.is_dir() and not (path / OWNER_LOCK).exists() and now - path.stat().st_mtime > older_than:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    click.echo(f"removed {removed} sandbox folder(s)")
    docker = shutil.which("docker")
    if docker:
        ids = subprocess.run([docker, "ps", "-aq", "--filter", "label=evalpipe.sandbox=1"], capture_output=True,
                             text=True, timeout=30).stdout.split()
        if ids:
            subprocess.run([docker, "rm", "-f", *ids], capture_output=True, timeout=60)
        click.echo(f"removed {len(ids)} container(s)")
