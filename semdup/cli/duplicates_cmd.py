"""``semdup duplicates``: the likely duplicates flagged for an index's posts (``semdup-duplicates``)."""

from __future__ import annotations

import json

import click

__all__ = ["duplicates"]


@click.command("duplicates")
@click.option("--index", required=True, help="The index whose posts were flagged.")
@click.option("--post", "post_id", help="Only this post's flags.")
@click.option(
    "--min-probability",
    type=click.FloatRange(0.0, 1.0),
    help="Only flags whose calibrated probability is at least this (flags without one are left out).",
)
@click.option("--opensearch", "url", help="OpenSearch URL (default: SEMDUP_OPENSEARCH_URL / the config file).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per flag and line.")
def duplicates(index, post_id, min_probability, url, as_json) -> None:
    """List the posts flagged as likely duplicates when they were indexed (SEMDUP_FLAG_DUPLICATES=1 workers).

    \b
    Example:
      semdup duplicates --index travel --post 123 --min-probability 0.8
      # post 123: possible duplicate of 87 (p = 0.91, score 0.8123, model hybrid-minilm-5d757ea1c5eb)
    """
    from semdup.alerts.store import list_flags
    from semdup.cli.edge import client as edge_client

    client = edge_client(url)
    flags = list_flags(client, index, post_id=post_id, min_probability=min_probability)
    for f in flags:
        if as_json:
            click.echo(json.dumps(f.to_json()))
            continue
        p = "-" if f.probability is None else f"{f.probability:.2f}"
        click.echo(
            f"post {f.post_id}: possible duplicate of {f.candidate_id} (p = {p}, score {f.score:.4f}, "
            f"model {f.model}, {f.flagged_at})"
        )
    if not flags and not as_json:
        click.echo(f"no flags for {'post ' + post_id + ' of ' if post_id else ''}{index}", err=True)
