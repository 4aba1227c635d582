"""`evalpipe forget MODEL_KEY...`: remove model keys and everything they left (docs/operations.md#forgetting-a-model).

The work is in evalpipe/store/forget.py; eval_assets/jobs.py binds it to a project (and is the `forget_model` job of
the Dagster UI).
"""
from __future__ import annotations

import click


@click.command(name="forget")
@click.argument("models", nargs=-1, required=True, metavar="MODEL_KEY...")
@click.option("--split", "splits", multiple=True, metavar="BENCHMARK/SPLIT",
              help="Only this benchmark split's results (repeatable); the model key itself stays.")
@click.option("--dry-run", is_flag=True, help="List what would go (rows per table, folders, keys); remove nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--force", is_flag=True,
              help="Also forget a key of the config file (the next config sync adds it back, with no results).")
def forget_cmd(models: tuple[str, ...], splits: tuple[str, ...], dry_run: bool, yes: bool, force: bool) -> None:
    """Remove model keys from the model dimension, with their warehouse rows, rollout journals, run artifacts and
    discovered-models entry (e.g. throw-away `adhoc:*`, `<model>@limit<N>` keys). Asks first; --dry-run lists only."""
    from eval_assets.jobs import forget_models, forget_plans
    from eval_assets.launch import get_instance
    from evalpipe.core.redact import redact
    from evalpipe.project import Project

    project = Project.from_file()
    instance = get_instance(project)
    plans = forget_plans(project, instance, list(models), list(splits), force)
    for plan in plans:
        for line in plan.describe():
            click.echo(redact(line))
    if dry_run:
        click.echo("dry run: nothing removed")
        return
    if not yes:
        click.confirm(f"Remove all of this for {len(plans)} model key(s)? It cannot be undone", abort=True)
    forget_models(project, instance, plans)
    click.echo(f"forgotten: {', '.join(p.model for p in plans)}")
