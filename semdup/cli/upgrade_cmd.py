"""``semdup upgrade``: a connected site's index moves to a new model, no downtime (:mod:`semdup.site_index.upgrade`).

Parses, calls :func:`~semdup.site_index.upgrade.upgrade` or :func:`~semdup.site_index.upgrade.remove_old`, prints.
"""

from __future__ import annotations

from typing import Any

import click

__all__ = ["upgrade"]

_FIELDS = {
    "same": None,
    "packed": (False, False),
    "sparse": (True, False),
    "knn": (False, True),
    "sparse+knn": (True, True),
}


def _client() -> Any:
    from semdup.cli.edge import client

    return client()


def _remove_old(client: Any, alias: str, yes: bool) -> None:
    from semdup.site_index.upgrade import remove_old

    plan = remove_old(client, alias, dry_run=True)
    click.echo(f"{plan.alias} points at {', '.join(plan.current)} (kept)")
    if not plan.deleted:
        click.echo("no old companion to remove")
        return
    for name in plan.deleted:
        click.echo(f"  delete {name}")
    click.echo(
        "Workers and `semdup serve` still running the old bundle search and write the old companion: restart them "
        "all with the new bundle first."
    )
    if not yes:
        click.confirm(f"Delete these {len(plan.deleted)} indices?", abort=True)
    done = remove_old(client, alias)
    click.echo(f"deleted {', '.join(done.deleted) or 'nothing'}")


@click.command("upgrade")
@click.option("--alias", "index", required=True, help="The site's index or alias connected with `semdup enable`.")
@click.option("--bundle", help="The new model bundle directory or .tar.gz (default: $SEMDUP_BUNDLE).")
@click.option(
    "--fields",
    type=click.Choice(sorted(_FIELDS)),
    default="same",
    show_default=True,
    help="Search structures of the new companion: those of the old one, or exactly these.",
)
@click.option("--batch-size", type=click.IntRange(1, 1000), default=64, show_default=True, help="Posts per write.")
@click.option(
    "--max-rounds", type=click.IntRange(1, 1000), default=20, show_default=True, help="Catch-up rounds at most."
)
@click.option("--remove-old", is_flag=True, help="Instead: delete the old companions the alias no longer points at.")
@click.option("--yes", "-y", is_flag=True, help="With --remove-old: do not ask before deleting.")
def upgrade(
    index: str, bundle: str | None, fields: str, batch_size: int, max_rounds: int, remove_old: bool, yes: bool
) -> None:
    """Move a site's connected index to a new model without downtime: a new companion is filled in this process
    with the new bundle (catching up on what the site writes meanwhile), then the companion alias switches to it
    atomically. Searches and workers on the old bundle keep the old companion until restarted. If it stops
    (OpenSearch restarting, Ctrl-C), run the same command again: it resumes.

    \b
    Example:
      semdup upgrade --alias site-posts --bundle bundles/new.tar.gz
      semdup upgrade --alias site-posts --remove-old      # once every worker and server runs the new bundle
    """
    client = _client()
    if remove_old:
        _remove_old(client, index, yes)
        return
    from semdup.cli.edge import bundle_path
    from semdup.cli.edge import settings as edge_settings

    path = bundle_path(bundle)
    from semdup.bundle.bundle import Bundle
    from semdup.index_format.schema import CandidateFields
    from semdup.site_index.upgrade import upgrade as run_upgrade

    b = Bundle.load(path)
    wanted = _FIELDS[fields]
    out = run_upgrade(
        client,
        index,
        b,
        fields=None if wanted is None else CandidateFields(*wanted),
        batch_size=batch_size,
        max_rounds=max_rounds,
        settle=5.0,
        layout=edge_settings().indices,
    )
    if out.already:
        click.echo(f"{out.alias} already holds model {b.version}: nothing to do")
        return
    verb = "created" if out.created else "resumed"
    click.echo(
        f"{verb} {out.new_index} for model {b.version} ({out.fields.describe()}): {out.written} posts written, "
        f"{out.removed} removed, in {out.rounds} rounds"
    )
    for failure in out.unencodable[:20]:
        click.echo(f"  not encodable by the new model: {failure.id}: {str(failure)[:150]}")
    if not out.switched:
        raise click.ClickException(
            f"{out.stale} posts still stale after {out.rounds} rounds (the site writes faster than this process "
            "encodes); the alias was not switched. Run the same command again (it resumes), or with more --max-rounds"
        )
    old = ", ".join(out.old_indices) or "none"
    click.echo(f"switched {out.alias}: {out.new_index} (model {b.version}); old companion kept: {old}")
    click.echo(
        "next: restart the workers and `semdup serve` with the new bundle, one at a time (until then they keep "
        f"serving and writing the old companion); then `semdup backfill --index {index}` syncs what the site wrote "
        f"meanwhile, and `semdup upgrade --alias {index} --remove-old` deletes the old companion"
    )
