"""`evalpipe pairwise`: a judge model's preferences between two models' answers on a split, each pair asked in both
orders, appended to the warehouse's `reviews` table (evalpipe/metrics/pairwise.py `run_pairwise`; the `pairwise`
asset runs the same from the config's `pairwise:` section)."""
from __future__ import annotations

import click


@click.command(name="pairwise")
@click.option("--split", default=None, help="benchmark_split key (default: pairwise.split of the config).")
@click.option("--models", nargs=2, default=None, metavar="A B",
              help="The two model keys to compare (default: every pair of pairwise.models).")
@click.option("--judge", default=None, help="A judge under the config's judges: (default: pairwise.judge).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="Only the first N samples both models answered (default: pairwise.limit, else all).")
@click.option("--again", is_flag=True, help="Judge again the samples this judge has a preference for already.")
@click.option("--dry-run", is_flag=True, help="Say how many pairs and judge calls it would make; call nothing.")
def pairwise_cmd(split: str | None, models: tuple[str, str] | None, judge: str | None, limit: int | None,
                 again: bool, dry_run: bool) -> None:
    """Ask a judge model which of two models answered each sample better (both orders, to cancel position bias)
    and record the preferences as `reviews` (source judge) for the Bradley-Terry ranking."""
    from evalpipe.core.redact import redact
    from evalpipe.metrics.pairwise import PairwiseRequest, plan_pairwise, run_pairwise
    from evalpipe.project import Project
    from evalpipe.store.warehouse import Warehouse

    project = Project.from_file()
    cfg = project.config
    req = PairwiseRequest.from_config(cfg.raw.get("pairwise"), split=split, models=models or None, judge=judge,
                                      limit=limit, again=again)
    wh = Warehouse(project.warehouse)
    if dry_run:
        pj, plan = plan_pairwise(wh, req, cfg)
        n = sum(len(items) for items, _ in plan.values())
        skipped = sum(s for _, s in plan.values())
        click.echo(redact(f"dry run: {n} pair(s) to judge by {pj.model.key} ({2 * n} judge call(s) at most, the "
                          f"judge cache answers repeats); skipped {skipped} judged already"))
        return
    out = run_pairwise(wh, req, cfg)
    for p in out.pairs:
        click.echo(redact(f"{req.split}: {p['model_a']} vs {p['model_b']}: {p['judged']} preference(s) recorded "
                          f"({p['position_bias_ties']} tie(s) from position bias), {p['parse_errors']} unreadable, "
                          f"{p['errors']} failed, skipped {p['skipped']} judged already"))
    click.echo(redact(f"{out.judged} pair(s) judged by {out.judge}: {out.calls} judge call(s), {out.cached} from the "
                      f"judge cache; skipped {out.skipped}"))
