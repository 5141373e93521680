"""``semdup worker``, ``semdup index-posts``, ``semdup backfill``, ``semdup enable``: the Celery indexer's CLI."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from semdup.core.errors import BrokerUnavailable, DataError, OpenSearchUnavailable
from semdup.core.posts import Post

__all__ = ["worker", "index_posts", "backfill", "enable"]

logger = logging.getLogger(__name__)

_BUNDLE_HELP = "Model bundle directory or .tar.gz (default: $SEMDUP_BUNDLE)."


def _bundle_path(value: str | None) -> str:
    path = value or os.environ.get("SEMDUP_BUNDLE", "").strip()
    if not path:
        raise click.UsageError("no model bundle: pass --bundle PATH or set SEMDUP_BUNDLE")
    return path


def _load_bundle(path: str) -> Any:
    from semdup.bundle.bundle import Bundle

    return Bundle.load(path)


def _client() -> Any:
    from semdup.core.clients import connect
    from semdup.core.settings import OpenSearchSettings

    return connect(OpenSearchSettings.from_env())


def _broker() -> None:
    """Point the Celery app at the configured broker and check that it answers."""
    from semdup.core.settings import BrokerSettings
    from semdup.indexer.celery_app import _visibility_from_env, app, configure_app

    url = BrokerSettings.from_env().url
    configure_app(url, visibility_timeout=_visibility_from_env())
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=2, interval_start=0.5, interval_step=0.5, timeout=10)
    except Exception as exc:  # kombu raises transport-specific errors
        raise BrokerUnavailable(
            f"the Celery broker at {url} did not answer ({exc}); start the local one with `semdup broker start` "
            "or set SEMDUP_BROKER_URL"
        ) from exc


def read_posts(path: Path) -> list[Post]:
    """Posts from a JSONL file (``id``, ``title``, ``body``), a SemEval XML file or a Stack Exchange dump folder."""
    if path.is_dir():
        from semdup.data.stackexchange import load_stackexchange_dump

        return list(load_stackexchange_dump(path).posts.values())
    if path.suffix.lower() == ".xml":
        from semdup.data.semeval import load_semeval_xml

        sem = load_semeval_xml(path)
        seen: dict[str, Post] = {q.post.id: q.post for q in sem.questions}
        for p in sem.related_posts():
            seen.setdefault(p.id, p)
        return list(seen.values())
    from semdup.data.reading import iter_jsonl, require_file

    posts = []
    for line_no, obj in iter_jsonl(require_file(path, "posts JSONL"), "posts with id, title and body"):
        if obj.get("id") in (None, ""):
            raise DataError(f"{path}: line {line_no}: a post without 'id'; every post needs a unique id")
        posts.append(Post.from_json(obj))
    return posts


def _count_done(client: Any, index: str, ids: list[str], version: str) -> int:
    from opensearchpy import exceptions as os_exc

    done = 0
    try:
        for i in range(0, len(ids), 10_000):
            query = {
                "bool": {"filter": [{"ids": {"values": ids[i : i + 10_000]}}, {"term": {"semdup.model": version}}]}
            }
            done += int(client.count(index=index, body={"query": query}, request_timeout=30)["count"])
    except (os_exc.ConnectionError, os_exc.ConnectionTimeout):
        return -1  # the cluster is down for now: keep waiting, the workers retry
    return done


def _wait(client: Any, index: str, ids: list[str], version: str, timeout: float, label: str) -> tuple[int, int]:
    """Poll OpenSearch until every id holds ``version`` or is parked; returns (written, parked)."""
    from tqdm.auto import tqdm

    from semdup.indexer.parking import count_parked

    deadline = time.monotonic() + timeout
    written = parked = 0
    with tqdm(total=len(ids), desc=label, unit="post") as bar:
        while True:
            try:
                client.indices.refresh(index=index, request_timeout=30)
            except Exception:  # noqa: BLE001 - a refresh is only a hint; counting decides
                pass
            done = _count_done(client, index, ids, version)
            if done >= 0:
                written = done
                try:
                    parked = count_parked(client, index, ids)
                except OpenSearchUnavailable:
                    pass
                bar.n = min(len(ids), written + parked)
                bar.refresh()
                if written + parked >= len(ids):
                    return written, parked
            if time.monotonic() > deadline:
                raise OpenSearchUnavailable(
                    f"gave up waiting after {timeout:.0f} s: {written} of {len(ids)} posts written, {parked} parked. "
                    "Are workers running (`semdup worker --bundle ...`)? The queued tasks are kept; run the "
                    "same command again later or `semdup backfill` to finish"
                )
            time.sleep(1.0)


def _show_parked(client: Any, index: str, limit: int = 20) -> None:
    from semdup.indexer.parking import iter_parked

    for n, rec in enumerate(iter_parked(client, index)):
        if n >= limit:
            click.echo(f"... more: semdup index-posts --index {index} --list-parked")
            break
        click.echo(f"  parked {rec.post_id} ({rec.task}): {rec.error[:150]}")


@click.command("worker")
@click.option("--bundle", help=_BUNDLE_HELP)
@click.option(
    "--concurrency", "-c", type=click.IntRange(1, 256), default=1, show_default=True, help="Worker processes."
)
@click.option("--queues", "-Q", default="semdup.indexer", show_default=True, help="Comma-separated queues to consume.")
@click.option("--pool", type=click.Choice(["prefork", "solo", "threads"]), default="prefork", show_default=True)
@click.option("--loglevel", default="INFO", show_default=True)
def worker(bundle: str | None, concurrency: int, queues: str, pool: str, loglevel: str) -> None:
    """Run a Celery indexing worker: ONNX encoder from the bundle, writes into OpenSearch.

    \b
    Example:
      SEMDUP_BROKER_URL=redis://127.0.0.1:6379/0 semdup worker --bundle bundles/bow-cnn.tar.gz -c 2
    """
    path = _bundle_path(bundle)
    b = _load_bundle(path)  # verify here, so a bad bundle fails once with one line, not in every child
    click.echo(f"worker: bundle {b.version} ({b.arch}), providers {b.session.get_providers() if b.session else []}")
    del b
    os.environ["SEMDUP_BUNDLE"] = path
    _client().info(request_timeout=10)
    _broker()
    from semdup.indexer.celery_app import app

    app.worker_main(
        [
            "worker",
            f"--concurrency={concurrency}",
            f"--queues={queues}",
            f"--pool={pool}",
            f"--loglevel={loglevel}",
            "--without-mingle",
            "--without-gossip",
        ]
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
    from semdup.core.clients import knn_available
    from semdup.index_format.mapping import candidate_fields
    from semdup.index_format.schema import CandidateFields
    from semdup.indexer.lexical_index import create_index

    if client.indices.exists(index=index, request_timeout=30):
        have = candidate_fields(client, index)
        if (sparse and not have.sparse) or (knn and not have.knn):
            click.echo(
                f"warning: {index} exists with {have.describe()}; --sparse/--knn apply only when the index is "
                f"created (add them to an existing index with `semdup enable --index {index} --sparse --knn`)",
                err=True,
            )
        return
    plugin = knn and knn_available(client)
    if knn and (bundle.dimension is None or not plugin):
        raise click.UsageError(
            "--knn needs a bundle with a dense encoder and the k-NN plugin on the cluster "
            f"(bundle dimension {bundle.dimension}, plugin {'present' if plugin else 'missing'})"
        )
    create_index(client, index, dimension=bundle.dimension, knn=knn, sparse=sparse)
    click.echo(f"created index {index} (dimension {bundle.dimension}, {CandidateFields(sparse, knn).describe()})")


def _enqueue(items: list[Any], batch_size: int, send: Callable[[list[Any]], None], label: str) -> None:
    from tqdm.auto import tqdm

    from semdup.indexer.bulk import chunked

    with tqdm(total=len(items), desc=label, unit="post") as bar:
        for batch in chunked(items, batch_size):
            send(batch)
            bar.update(len(batch))


def _replay(client: Any, index: str, version: str, batch_size: int) -> list[str]:
    from semdup.indexer import tasks
    from semdup.indexer.parking import forget_parked, iter_parked

    records = list(iter_parked(client, index))
    by_task: dict[str, list[Any]] = {}
    for r in records:
        by_task.setdefault(r.task, []).append(r)
    for name, recs in by_task.items():
        if name == "index_posts":
            items = [r.payload or {"id": r.post_id} for r in recs]
            _enqueue(items, batch_size, lambda b: tasks.index_posts.apply_async(args=[index, b, version]), "replay")
        elif name == "backfill_batch":
            ids = [r.post_id for r in recs]
            _enqueue(ids, batch_size, lambda b: tasks.backfill_batch.apply_async(args=[index, b, version]), "replay")
        else:
            ids = [r.post_id for r in recs]
            _enqueue(ids, batch_size, lambda b: tasks.delete_posts.apply_async(args=[index, b]), "replay")
    forget_parked(client, records)
    return [r.post_id for r in records if r.task != "delete_posts"]


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
    sparse: bool,
    knn: bool,
) -> None:
    """Enqueue posts for indexing by the workers, and wait for them with a progress bar.

    A missing index is created with semdup's schema: the lexical fields and the packed vector and term weights
    the reranker's fusion reads; --sparse / --knn add the search structures of its hybrid candidate paths.

    \b
    Example:
      semdup index-posts --input /work/shared/data/travel-stackexchange --index travel --bundle b.tar.gz
      semdup index-posts --input posts.jsonl --index travel --bundle b.tar.gz --sparse --knn
      semdup index-posts --index travel --list-parked
      semdup index-posts --index travel --replay-parked --bundle b.tar.gz
    """
    if list_parked:
        client = _client()
        from semdup.indexer.parking import count_parked

        click.echo(f"{count_parked(client, index)} parked posts in {index}")
        _show_parked(client, index, limit=10_000)
        return
    if not replay_parked and input_path is None:
        raise click.UsageError("give --input FILE (or --replay-parked / --list-parked)")
    b = _load_bundle(_bundle_path(bundle))
    client = _client()
    _broker()
    if replay_parked:
        ids = _replay(client, index, b.version, batch_size)
        click.echo(f"replayed {len(ids)} parked posts of {index}")
    elif input_path is not None:
        posts = read_posts(input_path)
        if not posts:
            raise DataError(f"{input_path} holds no posts")
        _ensure_index(client, index, b, sparse, knn)
        from semdup.indexer.tasks import index_posts as task

        payload = [p.to_json() for p in posts]
        _enqueue(payload, batch_size, lambda batch: task.apply_async(args=[index, batch, b.version]), "enqueue")
        ids = list(dict.fromkeys(p.id for p in posts))
    if not wait or not ids:
        click.echo(f"enqueued {len(ids)} posts for {index} (model {b.version})")
        return
    written, parked = _wait(client, index, ids, b.version, timeout, f"indexing {index}")
    click.echo(f"{written} posts written to {index} with model {b.version}, {parked} parked")
    if parked:
        _show_parked(client, index)


@click.command("backfill")
@click.option("--index", required=True, help="Index whose posts lack the current model's fields.")
@click.option("--bundle", help=_BUNDLE_HELP)
@click.option("--batch-size", type=click.IntRange(1, 1000), default=64, show_default=True)
@click.option("--wait/--no-wait", default=True, show_default=True)
@click.option("--timeout", type=float, default=3600.0, show_default=True)
def backfill(index: str, bundle: str | None, batch_size: int, wait: bool, timeout: float) -> None:
    """Enqueue posts whose semdup.model is missing or not the bundle's; resumable (re-run to finish).

    \b
    Example:
      semdup backfill --index questions --bundle bundles/bow-cnn.tar.gz
    """
    from semdup.indexer.backfill import enqueue_backfill

    b = _load_bundle(_bundle_path(bundle))
    client = _client()
    _broker()
    ids = enqueue_backfill(client, index, b.version, batch_size=batch_size)
    if not wait or not ids:
        click.echo(f"enqueued {len(ids)} posts of {index} for backfill (model {b.version})")
        return
    written, parked = _wait(client, index, ids, b.version, timeout, f"backfill {index}")
    click.echo(f"{written} posts of {index} now hold model {b.version}, {parked} parked")
    if parked:
        _show_parked(client, index)


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
    """Add semdup's fields to an existing index in place (its documents and searches stay as they are).

    \b
    Example:
      semdup enable --index questions --bundle bundles/bow-cnn.tar.gz --title-field subject --body-field text
      semdup enable --index questions --bundle bundles/bow-cnn.tar.gz --sparse   # + learned-sparse candidates
      semdup backfill --index questions --bundle bundles/bow-cnn.tar.gz
    """
    from semdup.index_format.schema import CandidateFields
    from semdup.indexer.enable import enable_index

    b = _load_bundle(_bundle_path(bundle))
    client = _client()
    out = enable_index(
        client,
        index,
        version=b.version,
        dimension=b.dimension,
        title_field=title_field,
        body_field=body_field,
        fields=CandidateFields(sparse=sparse, knn=knn),
    )
    click.echo(f"enabled semdup on {', '.join(out['indices'])} for model {b.version}: {out['fields'].describe()}")
    if run_backfill:
        from semdup.indexer.backfill import enqueue_backfill

        _broker()
        ids = enqueue_backfill(client, index, b.version)
        click.echo(f"enqueued {len(ids)} posts for backfill; follow with `semdup backfill --index {index}`")
    else:
        click.echo(f"next: semdup backfill --index {index} --bundle {_bundle_path(bundle)}")
