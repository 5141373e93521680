"""``semdup demo``: the main job on the embedded default, from nothing to one quality table (:mod:`semdup.demo`:
the steps; this command parses, calls :func:`semdup.demo.run.run` and prints its table)."""

from __future__ import annotations

import time
from pathlib import Path

import click

__all__ = ["demo"]


@click.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("artifacts/demo"),
              show_default=True, help="Where bundles (and --paper's checkpoint) are built (reused when present).")
@click.option("--base-encoder", type=click.Choice(["minilm", "mpnet"]), default="minilm", show_default=True,
              help="The default's dense encoder (mpnet: the accurate preset, about 6x slower on CPU).")
@click.option("--skip-neural", is_flag=True, help="Only the lexical rows (no encoder, worker or reranker).")
@click.option("--paper", is_flag=True, help="Also train BOW-CNN on Travel (--threads 1) and rerank with it.")
@click.option("--learn", is_flag=True, help="Also run `semdup learn` on SemEval and AskUbuntu (their test sides "
              "never read) and add a 'learned on the site' row: the bundle each gate kept, tested once (about 25 "
              "minutes on 2 CPU cores).")
@click.option("--review", is_flag=True, help="Then serve a review page of Travel posts flagged by a real worker "
              "(threshold fitted on Travel's duplicate links), until Ctrl-C; prints its URL and a key.")
@click.option("--review-port", type=click.IntRange(1, 65535), default=8080, show_default=True,
              help="Port of the review page (another free one when it is taken).")
@click.option("--check", "check_figures", is_flag=True, help="Then compare this run's figures with the README's "
              "(semdup/demo/figures.yaml): OK / FAIL per figure, exit 1 on a FAIL.")
def demo(workdir: Path, base_encoder: str, skip_neural: bool, paper: bool, learn: bool, review: bool,
         review_port: int, check_figures: bool) -> None:
    """Start the embedded OpenSearch and Redis, build the default, index through Celery, rerank, print the table.

    \b
    Example:
      semdup demo                # or, on a fresh machine: bash scripts/demo.sh
      semdup demo --skip-neural  # lexical baselines only
      semdup demo --learn        # plus what `semdup learn` gets from SemEval's and AskUbuntu's training links
      semdup demo --review       # then a review page of flagged Travel duplicates at http://127.0.0.1:8080/review
      semdup demo --check        # then OK / FAIL for each figure of the README's demo table
    """
    from semdup.cli.edge import client as edge_client
    from semdup.cli.edge import settings
    from semdup.demo.run import ensure_opensearch, run

    if review and (skip_neural or paper):
        raise click.UsageError("--review needs the neural default on the Travel index: drop --skip-neural and --paper")
    if learn and skip_neural:
        raise click.UsageError("--learn compares with the neural default: drop --skip-neural")
    if check_figures and (skip_neural or base_encoder != "minilm"):
        raise click.UsageError("--check compares with the README's MiniLM default: drop --skip-neural, --base-encoder")
    t0 = time.perf_counter()
    tree = settings()
    url = ensure_opensearch(tree.opensearch.url if tree.opensearch is not None else None)
    client = edge_client(url)
    click.echo(f"OpenSearch: {url}", err=True)
    result = run(workdir, client, url, base_encoder=base_encoder, skip_neural=skip_neural, paper=paper, learn=learn,
                 broker=tree.broker.url if tree.broker is not None else None)
    for line in result.table_lines():
        click.echo(line)
    click.echo(f"\n{time.perf_counter() - t0:.0f} s in all; figures also in {result.results_file}. "
               "The embedded OpenSearch and Redis keep running: `semdup opensearch stop`, `semdup broker stop`.")
    if check_figures:
        _check(result, {"--learn"} if learn else set())
    if review:
        _review(result, workdir, review_port)


def _check(result, flags: set[str]) -> None:
    """One line per figure of the README's table (:func:`semdup.demo.figures.check`); exit 1 when one fails."""
    from semdup.demo.figures import check

    checks = check(result, flags)
    click.echo("\nThe README's figures (semdup/demo/figures.yaml) against this run:")
    for c in checks:
        click.echo(c.line())
    counts = {s: sum(c.status == s for c in checks) for s in ("OK", "FAIL", "SKIP")}
    click.echo(", ".join(f"{n} {s}" for s, n in counts.items()))
    if counts["FAIL"]:
        raise click.exceptions.Exit(1)


def _review(result, workdir: Path, port: int) -> None:
    """Serve the review page until Ctrl-C (:func:`semdup.demo.review.start_review`), then stop it and its worker."""
    from semdup.demo.review import start_review

    page = None
    try:
        page = start_review(result.stack, workdir, port)
        click.echo(f"\nReview page: {page.url}\nLog in with the review key: {page.key}\n"
                   f"{page.flags} pairs flagged so far (threshold fitted on Travel's duplicate links, "
                   f"{page.calibration}); the worker goes on flagging the 231 Travel test questions in the "
                   "background.\nCtrl-C stops the page and the worker.")
        page.wait()
    except KeyboardInterrupt:
        click.echo("\nstopping the review page and the worker", err=True)
    finally:
        if page is not None:
            page.stop()
