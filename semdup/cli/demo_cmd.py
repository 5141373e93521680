"""``semdup demo``: the main job on the embedded default, from nothing to the quality tables."""

from __future__ import annotations

import os

import click

__all__ = ["demo"]

IR_BASELINE_TEST = {"MAP": 74.75, "MRR": 83.79, "P@1": 81.43}


def _ensure_opensearch() -> str:
    url = os.environ.get("SEMDUP_OPENSEARCH_URL") or os.environ.get("OPENSEARCH_URL")
    if url:
        return url
    from semdup.deploy.local_opensearch import LocalOpenSearch, running_url

    url = running_url()
    if url:
        return url
    click.echo("Starting the embedded OpenSearch (first run: fetched from Maven Central and unpacked)...", err=True)
    return LocalOpenSearch().start()


@click.command("demo")
@click.option("--skip-travel", is_flag=True, help="Only the SemEval table.")
def demo(skip_travel: bool) -> None:
    """Start the embedded OpenSearch, load the real data, print the quality tables.

    \b
    Example:
      semdup demo                # or: bash scripts/demo.sh on a fresh machine
    """
    from semdup.config import OpenSearchSettings, connect
    from semdup.evaluation.data_paths import semeval_files, travel_dir
    from semdup.evaluation.datasets import load_semeval_xml, load_stackexchange_dump
    from semdup.evaluation.methods import parse_method
    from semdup.evaluation.semeval_eval import run_semeval
    from semdup.evaluation.stackexchange_eval import run_stackexchange
    from semdup.indexer.schema import LEXICAL_MODELS

    url = _ensure_opensearch()
    client = connect(OpenSearchSettings.from_env(env={**os.environ, "SEMDUP_OPENSEARCH_URL": url}))
    click.echo(f"OpenSearch: {url}")
    methods = [parse_method(m) for m in LEXICAL_MODELS]

    sem = load_semeval_xml(*semeval_files("test"), name="test-2016")
    rows = {mode: run_semeval(sem, methods, client=client, mode=mode) for mode in ("rerank", "retrieve")}
    click.echo("\nSemEval-2016 Task 3 subtask B, test 2016 (official MAP / MRR / P@1)")
    click.echo(f"{'method':<24}{'MAP':>8}{'MRR':>8}{'P@1':>8}")
    click.echo(f"{'IR baseline (organisers)':<24}" + "".join(f"{IR_BASELINE_TEST[c]:8.2f}" for c in ("MAP", "MRR", "P@1")))
    for mode, runs in rows.items():
        for r in runs:
            click.echo(f"{r.method + ' (' + mode + ')':<24}" + "".join(f"{r.metrics[c]:8.2f}" for c in ("MAP", "MRR", "P@1")))

    if not skip_travel:
        dump = load_stackexchange_dump(travel_dir())
        runs = run_stackexchange(dump, "test", methods, client=client)
        cols = ("Acc@1", "Acc@5", "Acc@10", "MAP", "MRR")
        click.echo("\nTravel Stack Exchange, test split (retrieval over all 4,919 posts)")
        click.echo(f"{'method':<24}" + "".join(f"{c:>8}" for c in cols))
        for r in runs:
            click.echo(f"{r.method:<24}" + "".join(f"{r.metrics[c]:8.2f}" for c in cols))
