"""``semdup verdicts``: the moderators' verdicts on an index's flags, as labelled JSONL pairs."""

from __future__ import annotations

import os
import sys

import click

__all__ = ["verdicts"]


@click.command("verdicts")
@click.option("--index", required=True, help="The index whose flags were judged.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the JSONL here (default: standard output).")
@click.option("--opensearch", "url", help="OpenSearch URL (default: SEMDUP_OPENSEARCH_URL / the config file).")
def verdicts(index, out, url) -> None:
    """Export the verdicts given on the review page as labelled pairs (one JSON object per line).

    Each judged pair becomes one line in the pair format semdup reads (query, candidate, label duplicate or
    non-duplicate), labelled by its reviewers' majority; the posts' text is read from the index.

    \b
    Example:
      semdup verdicts --index travel --out travel-verdicts.jsonl
    """
    from semdup.core.clients import connect
    from semdup.core.settings import OpenSearchSettings
    from semdup.review.export import ExportReport, export_pairs

    env = {**os.environ, "SEMDUP_OPENSEARCH_URL": url} if url else None
    client = connect(OpenSearchSettings.from_env(env=env))
    report = ExportReport()
    if out:
        tmp = f"{out}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(export_pairs(client, index, report))
        os.replace(tmp, out)
    else:
        for line in export_pairs(client, index, report):
            sys.stdout.write(line)
    click.echo(
        f"{report.written} judged pairs written{' to ' + out if out else ''}; left out: {report.ties} even splits, "
        f"{report.missing_posts} pairs whose post is no longer in the index",
        err=True,
    )
