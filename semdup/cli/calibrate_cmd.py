"""``semdup calibrate``: fit a site's flagging threshold and probabilities from its verdicts (and duplicate links)."""

from __future__ import annotations

import click

__all__ = ["calibrate"]


@click.command("calibrate")
@click.option("--index", required=True, help="The site's index (its flags' verdicts are read from semdup-verdicts).")
@click.option(
    "--bundle",
    type=click.Path(exists=True, dir_okay=True),
    help="The bundle the workers flag with (or $SEMDUP_BUNDLE); its entry of the calibration file is replaced.",
)
@click.option(
    "--links",
    type=click.Path(exists=True, dir_okay=False),
    help="Also the site's duplicate links: a Stack Exchange PostLinks.xml, or a JSONL of labelled pairs.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="Calibration file to write (default: $SEMDUP_CALIBRATION, else <bundle>.calibration.json, where the "
    "workers read it).",
)
@click.option("--opensearch", "url", help="OpenSearch URL (default: SEMDUP_OPENSEARCH_URL / the config file).")
def calibrate(index, bundle, links, out, url) -> None:
    """Fit the flagging threshold and Platt probabilities from the moderators' verdicts.

    The verdicts given on the review page (/review of `semdup serve`) on flags of this bundle, and with --links
    the site's own duplicate links (each linked post ranked against the index as a worker would), are fitted
    with the project's one fitting code (maximum-accuracy threshold, Platt scaling). At least 20 judged pairs
    with 5 of each verdict are needed. Workers read the new file at their next flagging task.

    \b
    Example:
      semdup calibrate --index travel --bundle artifacts/demo/default-minilm-travel \\
          --links ../shared/data/travel-stackexchange/PostLinks.xml
    """
    from semdup.cli.edge import client as edge_client
    from semdup.cli.edge import settings as tree
    from semdup.review.calibrate import calibrate_site

    bundle = bundle or tree().model.bundle
    if not bundle:
        raise click.UsageError("give --bundle (or set SEMDUP_BUNDLE): the bundle the workers flag with")
    client = edge_client(url)
    settings = tree().alert_settings()  # the workers' candidate paths, so linked posts rank as flags do
    result = calibrate_site(
        client,
        bundle,
        index,
        links=links,
        out=out or tree().model.calibration or None,
        settings=settings.reranker,
        k=settings.flag_k,
    )
    for part in result.samples:
        click.echo(part.describe())
    cal = result.calibration
    was = "none" if result.previous_threshold is None else f"{result.previous_threshold:.4f}"
    click.echo(
        f"fitted on {cal.n} pairs ({cal.positives} duplicates): threshold {cal.threshold:.4f} (was {was}), "
        f"Platt a={cal.a:.3f} b={cal.b:.3f}, accuracy {cal.dev_accuracy:.2f}%"
    )
    click.echo(
        f"at the new threshold, of these pairs: precision {result.precision:.2f}, recall {result.recall:.2f} "
        "(recall of the judged duplicates only)"
    )
    click.echo(f"written to {result.path}; workers flag with it from their next task")
