"""``semdup worker``, ``semdup index-posts``, ``semdup backfill``, ``semdup enable``: the Celery indexer's CLI.

Each command parses, calls the library (:mod:`semdup.data.posts_input`, :mod:`semdup.ingest.jobs`,
:mod:`semdup.ingest.backfill`, :mod:`semdup.ingest.reconcile`, :mod:`semdup.site_index.enable`) and prints what it
returns.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import click

from semdup.cli import edge
from semdup.cli.job_wait import finish_job, show_parked, sweep_after, wait_job

__all__ = ["worker", "index_posts", "backfill", "watch", "enable"]

logger = logging.getLogger(__name__)

_BUNDLE_HELP = "Model bundle directory or .tar.gz (default: $SEMDUP_BUNDLE)."


def _load_bundle(path: str) -> Any:
    from semdup.bundle.bundle import Bundle

    return Bundle.load(path)


@click.command("worker")
@click.option("--bundle", help=_BUNDLE_HELP)
@click.option(
    "--concurrency", "-c", type=click.IntRange(1, 256), default=1, show_default=True, help="Worker processes."
)
@click.option("--queues", "-Q", default="semdup.indexer", show_default=True, help="Comma-separated queues to consume.")
@click.option("--pool", type=click.Choice(["prefork", "solo", "threads"]), default="prefork", show_default=True)
@click.option("--loglevel", default="INFO", show_default=True)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"], case_sensitive=False),
    default=None,
    help="What the encoder runs on (default: $SEMDUP_DEVICE, else auto: CUDA where it can be used, else CPU with "
    "one log line); cuda refuses to start without CUDA.",
)
def worker(bundle: str | None, concurrency: int, queues: str, pool: str, loglevel: str, device: str | None) -> None:
    """Run a Celery indexing worker: ONNX encoder from the bundle, writes into OpenSearch.

    On CPU each process encodes on its share of the cores (SEMDUP_ENCODE_THREADS, default cores / -c); with the
    [gpu] extra and a GPU it encodes on CUDA, in fp16 where that verifies against fp32 (SEMDUP_FP16).

    \b
    Example:
      SEMDUP_BROKER_URL=redis://127.0.0.1:6379/0 semdup worker --bundle bundles/bow-cnn.tar.gz -c 2
      semdup worker --bundle bundles/default-minilm --device cuda -c 4      # a GPU node
    """
    import os

    from semdup.apps.settings import load_settings
    from semdup.apps.worker import load_worker_bundle, run_worker
    from semdup.bundle.devices import choose_device

    path = edge.bundle_path(bundle)
    overrides: dict[str, Any] = {"model.bundle": path, "worker.device": device and device.lower()}
    settings = load_settings(overrides=overrides)
    if settings.worker.encode_threads is None:  # each process its share of the cores
        overrides["worker.encode_threads"] = max(1, (os.cpu_count() or 1) // concurrency)
        settings = load_settings(overrides=overrides)  # the tree the worker's processes run with
    # Verify here, so a bad bundle (or --device cuda without CUDA) fails once with one line, not in every child. On
    # CPU: this process must not start CUDA, whose context does not survive the fork of Celery's prefork pool; each
    # child loads its own session on the device, and verifies its fp16 variant.
    choice = choose_device(settings.worker.device)
    b = load_worker_bundle(settings, path, device="cpu", fp16=False)
    click.echo(f"worker: bundle {b.version} ({b.arch}), device {choice.device}, providers {list(choice.providers)}")
    del b
    edge.client().info()
    edge.connect_broker()
    run_worker(
        settings,
        [
            f"--concurrency={concurrency}",
            f"--queues={queues}",
            f"--pool={pool}",
            f"--loglevel={loglevel}",
            "--without-mingle",
            "--without-gossip",
        ],
    )


def _candidate_field_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--sparse`` / ``--knn``: the search structures of the reranker's hybrid candidate paths (off by default:
    the default reranker reads only the packed fields, and each structure makes indexing dearer)."""
    command = click.option(
        "--knn",
        is_flag=True,
        help="Also index the dense vector as a knn_vector (HNSW) for the reranker's k-NN candidates "
        "(needs the k-NN plugin; the graph is the dearest part of semantic indexing).",
    )(command)
    return click.option(
        "--sparse",
        is_flag=True,
        help="Also index the learned term weights as rank_features for the reranker's learned-sparse candidates.",
    )(command)


def _ensure_index(client: Any, index: str, bundle: Any, sparse: bool, knn: bool) -> None:
    from semdup.core.errors import ConfigError
    from semdup.index_format.schema import CandidateFields
    from semdup.ingest.jobs import ensure_index

    try:
        state = ensure_index(client, index, dimension=bundle.dimension, fields=CandidateFields(sparse, knn),
                             shape=edge.settings().indices.created())  # fmt: skip
    except ConfigError as exc:  # --knn the bundle or the cluster cannot serve: a usage error
        raise click.UsageError(str(exc)) from exc
    if state.created:
        click.echo(
            f"created index {index} (dimension {bundle.dimension}, {state.fields.describe()}; "
            f"{edge.settings().indices.created().describe()})"
        )
    elif (sparse and not state.fields.sparse) or (knn and not state.fields.knn):
        click.echo(
            f"warning: {index} exists with {state.fields.describe()}; --sparse/--knn apply only when the index is "
            f"created (add them to an existing index with `semdup enable --index {index} --sparse --knn`)",
            err=True,
        )


@click.command("index-posts")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, path_type=Path),
    help="JSONL posts, SemEval XML, or a Stack Exchange dump folder.",
)
@click.option("--index", required=True, help="Target index (created with semdup's schema if missing).")
@click.option("--bundle", help=_BUNDLE_HELP)
@click.option("--batch-size", type=click.IntRange(1, 1000), default=64, show_default=True, help="Posts per task.")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait until every post is written or parked.")
@click.option("--timeout", type=float, default=3600.0, show_default=True, help="Seconds to wait at most.")
@click.option("--replay-parked", is_flag=True, help="Re-enqueue the index's parked posts instead of reading --input.")
@click.option("--list-parked", is_flag=True, help="Only list the index's parked posts.")
@click.option("--job", "job_id", help="Follow a job enqueued earlier (the id printed when it was enqueued).")
@_candidate_field_options
def index_posts(
    input_path: Path | None,
    index: str,
    bundle: str | None,
    batch_size: int,
    wait: bool,
    timeout: float,
    replay_parked: bool,
    list_parked: bool,
    job_id: str | None,
    sparse: bool,
    knn: bool,
) -> None:
    """Enqueue posts for indexing by the workers, and wait for them with a progress bar.

    A missing index is created with semdup's schema: the lexical fields and the packed vector and term weights
    the reranker's fusion reads; --sparse / --knn add the search structures of its hybrid candidate paths.
    Counts are those of the job's own tasks. A record of --input that cannot be indexed (a line that is not UTF-8
    or not JSON, an empty id, no visible text...) is skipped and listed with its line (or row) and why; the other
    posts are still indexed. Exits 1 when any post is parked or not done in --timeout (the message says how many
    are still queued, and what to do), or when any input record was skipped.

    \b
    Example:
      semdup index-posts --input /work/shared/data/travel-stackexchange --index travel --bundle b.tar.gz
      semdup index-posts --input posts.jsonl --index travel --bundle b.tar.gz --sparse --knn
      semdup index-posts --index travel --list-parked
      semdup index-posts --index travel --replay-parked --bundle b.tar.gz
      semdup index-posts --index travel --job 3f9c0e1d2b4a5968   # follow a job that timed out
    """
    if list_parked:
        client = edge.client()
        from semdup.ingest.parking import count_parked, iter_parked

        click.echo(f"{count_parked(client, index)} parked posts in {index}")
        show_parked(iter_parked(client, index), index, limit=10_000)
        return
    from semdup.ingest import jobs

    follow = f"semdup index-posts --index {index}"
    if job_id:
        from semdup.ingest.outcomes import read_job

        client = edge.client()
        edge.connect_broker()
        job = read_job(client, job_id)
        if job.index != index:
            raise click.UsageError(f"job {job_id} indexes {job.index!r}, not {index!r}")
        done = wait_job(client, job, timeout=timeout, label=f"indexing {index}")
        finish_job(done, timeout=timeout, follow=follow, again="enqueue them again with --input")
        return
    if not replay_parked and input_path is None:
        raise click.UsageError("give --input FILE (or --replay-parked / --list-parked / --job ID)")
    from semdup.cli.input_report import end_input, read_input

    b = _load_bundle(edge.bundle_path(bundle))
    client = edge.client()
    edge.connect_broker()
    read = None
    if replay_parked:
        job = jobs.replay_parked(client, index, b.version, batch_size=batch_size)
        click.echo(f"job {job.id}: replayed {job.total} parked posts of {index}")
        again = "run the replay again"
    else:
        read = read_input(input_path)
        _ensure_index(client, index, b, sparse, knn)
        job = jobs.enqueue_posts(client, index, read.posts, b.version, batch_size=batch_size)
        click.echo(f"job {job.id}: enqueued {job.total} posts for {index} (model {b.version})")
        again = "run the same command again"
    if not wait or not job.total:
        end_input(read, "enqueued", lambda: None)
        return
    done = wait_job(client, job, timeout=timeout, label=f"indexing {index}")
    end_input(read, "written", partial(finish_job, done, timeout=timeout, follow=follow, again=again))


def _index_version(client: Any, index: str, bundle: str | None) -> str:
    """The bundle's version when --bundle (or $SEMDUP_BUNDLE) names one, else the model the index is claimed for."""
    from semdup.ingest.backfill import index_version

    if bundle or edge.settings().model.bundle:
        return str(_load_bundle(edge.bundle_path(bundle)).version)
    return index_version(client, index)


@click.command("backfill")
@click.option("--index", required=True, help="A semdup index, or a site's index connected with `semdup enable`.")
@click.option("--bundle", help=_BUNDLE_HELP + " Without one: the model the index holds.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=64, show_default=True)
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--timeout", type=float, default=3600.0, show_default=True)
def backfill(index: str, bundle: str | None, batch_size: int, wait: bool, timeout: float) -> None:
    """Enqueue the posts that lack the model's fields; resumable (re-run to finish).

    On a site's index connected with `semdup enable`: the posts the site wrote, edited or deleted since semdup
    last saw them (compared by content hash), synced into the companion index.
    Exits 1 when any post is parked or not done in --timeout.

    \b
    Example:
      semdup backfill --index questions
    """
    from semdup.ingest.backfill import enqueue_backfill

    client = edge.client()
    version = _index_version(client, index, bundle)
    edge.connect_broker()
    job = enqueue_backfill(client, index, version, batch_size=batch_size)
    click.echo(f"job {job.id}: enqueued {job.total} posts of {index} for backfill (model {version})")
    if not wait or not job.total:
        return
    done = wait_job(client, job, timeout=timeout, label=f"backfill {index}")
    finish_job(
        done,
        timeout=timeout,
        follow=f"semdup index-posts --index {index}",
        again="run `semdup backfill` again (it enqueues what is still missing)",
    )


@click.command("watch")
@click.option("--index", required=True, help="A site's index (or alias) connected with `semdup enable`.")
@click.option("--bundle", help=_BUNDLE_HELP + " Without one: the model the companion holds.")
@click.option("--interval", type=click.FloatRange(1.0), default=30.0, show_default=True, help="Seconds per round.")
@click.option("--rounds", type=click.IntRange(1), help="Stop after this many rounds (default: until interrupted).")
def watch(index: str, bundle: str | None, interval: float, rounds: int | None) -> None:
    """Keep a site's index and its companion in step: every --interval seconds, enqueue the posts the site wrote,
    edited or deleted without calling semdup (workers must be running).

    \b
    Example:
      semdup watch --index site-posts --interval 30
    """
    from semdup.ingest.reconcile import watch as watch_index

    client = edge.client()
    version = _index_version(client, index, bundle)
    edge.connect_broker()
    click.echo(f"watching {index} every {interval:g} s (model {version}); Ctrl-C stops")

    def report(job: Any) -> None:
        if job.total:
            click.echo(f"job {job.id}: enqueued {job.total} new, edited or deleted posts of {index}")

    try:
        watch_index(
            client, index, version, interval=interval, rounds=rounds, on_round=report, sweep_after=sweep_after()
        )
    except KeyboardInterrupt:
        click.echo("stopped")


@click.command("enable")
@click.option("--index", required=True, help="An existing index (or alias) that semdup did not create.")
@click.option("--bundle", help=_BUNDLE_HELP)
@click.option("--title-field", default="title", show_default=True, help="The index's field holding the title.")
@click.option("--body-field", default="body", show_default=True, help="The index's field holding the body.")
@click.option(
    "--backfill/--no-backfill", "run_backfill", default=False, show_default=True, help="Enqueue the backfill at once."
)
@_candidate_field_options
def enable(
    index: str, bundle: str | None, title_field: str, body_field: str, run_backfill: bool, sparse: bool, knn: bool
) -> None:
    """Connect a site's existing index (or alias) to semdup through a companion index; the site's documents,
    mapping and searches are never touched.

    \b
    Example:
      semdup enable --index site-posts --bundle bundles/default.tar.gz --title-field Title --body-field Body
      semdup enable --index site-posts --bundle bundles/default.tar.gz --knn   # + k-NN candidates
      semdup backfill --index site-posts
    """
    from semdup.index_format.schema import CandidateFields
    from semdup.site_index.enable import enable_index

    b = _load_bundle(edge.bundle_path(bundle))
    client = edge.client()
    out = enable_index(
        client,
        index,
        version=b.version,
        dimension=b.dimension,
        title_field=title_field,
        body_field=body_field,
        fields=CandidateFields(sparse=sparse, knn=knn),
        layout=edge.settings().indices,
    )
    verb = "created" if out.created else "updated"
    click.echo(
        f"{verb} companion {out.index} (alias {out.companion}) of {index} for model {b.version}: "
        f"{out.fields.describe()}; text from {index}.{title_field} and .{body_field}"
    )
    for line in out.warnings:
        click.echo(f"warning: {line}", err=True)
    if run_backfill:
        from semdup.ingest.backfill import enqueue_backfill

        edge.connect_broker()
        job = enqueue_backfill(client, index, b.version)
        click.echo(
            f"job {job.id}: enqueued {job.total} posts for backfill; follow it with "
            f"`semdup index-posts --index {index} --job {job.id}`"
        )
    else:
        click.echo(f"next: semdup backfill --index {index}   (then `semdup watch --index {index}` keeps it current)")
