"""An index job: enqueue posts (or the parked ones again) as Celery tasks, then wait until each is written or parked.

The library API under ``semdup index-posts`` and ``semdup backfill``; the CLI only prints what it returns::

    connect_broker(BrokerSettings.from_env().url)            # once, at the edge
    ensure_index(client, "travel", dimension=bundle.dimension)
    ids = enqueue_posts("travel", read_posts("posts.jsonl"), bundle.version)
    done = wait_for(client, "travel", ids, bundle.version, timeout=3600)
    print(f"{done.written} written, {done.parked} parked")
    ids = replay_parked(client, "travel", bundle.version)     # after fixing what parked them

:func:`wait_for` is a fold over :func:`poll`, which yields a :class:`JobProgress` per look at the index (as
opensearch-py's ``bulk`` over ``streaming_bulk``). Tasks are sent through the task objects of
:mod:`semdup.indexer.tasks`; a parked record names its task, and a record whose task is not one of those is
left parked, with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from opensearchpy import OpenSearch
from opensearchpy import exceptions as os_exc

from semdup.core.clients import knn_available
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.posts import Post
from semdup.core.progress import progress as progress_bar
from semdup.index_format.mapping import candidate_fields
from semdup.index_format.schema import CandidateFields
from semdup.indexer import tasks
from semdup.indexer.bulk import chunked
from semdup.indexer.celery_app import DEFAULT_VISIBILITY_TIMEOUT, configure_app
from semdup.indexer.lexical_index import create_index
from semdup.indexer.parking import ParkedPost, count_parked, forget_parked, iter_parked

__all__ = [
    "JobProgress",
    "IndexState",
    "TaskCall",
    "connect_broker",
    "ensure_index",
    "enqueue_posts",
    "replay_batches",
    "replay_parked",
    "poll",
    "wait_for",
]

logger = logging.getLogger(__name__)

_COUNT_CHUNK = 10_000  # ids per count query (OpenSearch's default index.max_terms_count is 65,536)
_TIMEOUT = 30.0


@dataclass(frozen=True)
class JobProgress:
    """How far an index job is: of ``total`` posts, ``written`` hold the model's fields, ``parked`` are parked."""

    index: str
    model_version: str
    total: int
    written: int = 0
    parked: int = 0

    @property
    def finished(self) -> bool:
        return self.written + self.parked >= self.total


@dataclass(frozen=True)
class IndexState:
    """What :func:`ensure_index` found or did: ``created`` now, and the search structures the index holds."""

    created: bool
    fields: CandidateFields


@dataclass(frozen=True)
class TaskCall:
    """One task message: the task object and its JSON-native arguments."""

    task: Task
    args: list[Any]

    def send(self) -> None:
        self.task.apply_async(args=self.args)


def connect_broker(url: str, *, visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT) -> Celery:
    """Point the indexer's Celery app at the broker ``url`` and check that it answers.

    Raises:
        BrokerUnavailable: the broker did not answer (the message says how to start the local one).
    """
    app = configure_app(url, visibility_timeout=visibility_timeout)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=2, interval_start=0.5, interval_step=0.5, timeout=10)
    except Exception as exc:  # kombu raises transport-specific errors
        raise BrokerUnavailable(
            f"the Celery broker at {url} did not answer ({exc}); start the local one with `semdup broker start` "
            "or set SEMDUP_BROKER_URL"
        ) from exc
    return app


def ensure_index(
    client: OpenSearch, index: str, *, dimension: int | None, fields: CandidateFields | None = None
) -> IndexState:
    """Create ``index`` with semdup's schema and the search structures ``fields`` asks for, unless it exists.

    An existing index is left as it is (``fields`` only applies at creation; ``semdup enable`` adds structures
    to an existing one): the returned state says which it holds.

    Raises:
        ConfigError: ``fields.knn`` without a dense encoder (``dimension`` None) or without the k-NN plugin.
    """
    if client.indices.exists(index=index, request_timeout=_TIMEOUT):
        return IndexState(created=False, fields=candidate_fields(client, index))
    fields = fields or CandidateFields()
    plugin = fields.knn and knn_available(client)
    if fields.knn and (dimension is None or not plugin):
        raise ConfigError(
            "--knn needs a bundle with a dense encoder and the k-NN plugin on the cluster "
            f"(bundle dimension {dimension}, plugin {'present' if plugin else 'missing'})"
        )
    create_index(client, index, dimension=dimension, knn=fields.knn, sparse=fields.sparse)
    return IndexState(created=True, fields=fields)


def _send_all(calls: list[TaskCall], label: str, progress: bool) -> None:
    with progress_bar(total=sum(len(c.args[1]) for c in calls), desc=label, unit="post", enabled=progress) as bar:
        for call in calls:
            call.send()
            bar.update(len(call.args[1]))


def enqueue_posts(
    index: str, posts: Sequence[Post], model_version: str, *, batch_size: int = 64, progress: bool = True
) -> list[str]:
    """Send ``posts`` as ``index_posts`` tasks of ``batch_size`` posts; returns their ids, each once, to wait for."""
    payload = [p.to_json() for p in posts]
    calls = [TaskCall(tasks.index_posts, [index, b, model_version]) for b in chunked(payload, batch_size)]
    _send_all(calls, "enqueue", progress)
    logger.info("enqueued %d posts for %s with model %s", len(payload), index, model_version)
    return list(dict.fromkeys(p.id for p in posts))


def _short_name(task: Task) -> str:
    """The name a parked record gives its task (``IndexerTask.on_failure``, ``parking.park``). Read on call:
    a task's name evaluates Celery's lazy task proxy, which importing this module must not do."""
    return task.name.rsplit(".", 1)[-1]


def _replayable() -> dict[str, Task]:
    return {_short_name(t): t for t in (tasks.index_posts, tasks.backfill_batch, tasks.delete_posts)}


def replay_batches(
    records: Sequence[ParkedPost], index: str, model_version: str, batch_size: int = 64
) -> tuple[list[TaskCall], list[ParkedPost]]:
    """The task messages that replay parked ``records``, and the records they cover (unknown tasks left out).

    ``index_posts`` records are sent again with their kept payload, ``backfill_batch`` ones by id (the text is
    read from the index), ``delete_posts`` ones as deletes; writes use ``model_version``.
    """
    by_task: dict[str, list[ParkedPost]] = {}
    for r in records:
        by_task.setdefault(r.task, []).append(r)
    replayable = _replayable()
    calls: list[TaskCall] = []
    covered: list[ParkedPost] = []
    for name, recs in by_task.items():
        task = replayable.get(name)
        if task is None:
            logger.warning(
                "%d parked posts of %s name task %r, which this semdup does not run; they stay parked "
                "(replay them with the semdup version that parked them)",
                len(recs),
                index,
                name,
            )
            continue
        if task is tasks.index_posts:
            items: list[Any] = [r.payload or {"id": r.post_id} for r in recs]
        else:
            items = [r.post_id for r in recs]
        extra = [] if task is tasks.delete_posts else [model_version]
        calls += [TaskCall(task, [index, batch, *extra]) for batch in chunked(items, batch_size)]
        covered += recs
    return calls, covered


def replay_parked(
    client: OpenSearch, index: str, model_version: str, *, batch_size: int = 64, progress: bool = True
) -> list[str]:
    """Enqueue the parked posts of ``index`` again and forget their records; returns the ids to wait for
    (replayed deletes have nothing to wait for). A post that fails again is parked again, with the new error."""
    calls, covered = replay_batches(list(iter_parked(client, index)), index, model_version, batch_size)
    _send_all(calls, "replay", progress)
    forget_parked(client, covered)
    logger.info("replayed %d parked posts of %s", len(covered), index)
    return [r.post_id for r in covered if r.task != _short_name(tasks.delete_posts)]


def _count_written(client: OpenSearch, index: str, ids: Sequence[str], version: str) -> int | None:
    """How many of ``ids`` hold ``version``'s fields; None while the cluster does not answer."""
    done = 0
    try:
        for i in range(0, len(ids), _COUNT_CHUNK):
            chunk = list(ids[i : i + _COUNT_CHUNK])
            query = {"bool": {"filter": [{"ids": {"values": chunk}}, {"term": {"semdup.model": version}}]}}
            done += int(client.count(index=index, body={"query": query}, request_timeout=_TIMEOUT)["count"])
    except (os_exc.ConnectionError, os_exc.ConnectionTimeout):
        return None  # the cluster is down for now: keep waiting, the workers retry
    return done


def poll(
    client: OpenSearch, index: str, ids: Sequence[str], model_version: str, *, timeout: float, interval: float = 1.0
) -> Iterator[JobProgress]:
    """A :class:`JobProgress` after each look at the index, every ``interval`` seconds, until every id holds
    ``model_version`` or is parked (the last one yielded is finished).

    Raises:
        OpenSearchUnavailable: ``timeout`` seconds passed first (the queued tasks are kept).
    """
    deadline = time.monotonic() + timeout
    last = JobProgress(index, model_version, len(ids))
    while True:
        try:
            client.indices.refresh(index=index, request_timeout=_TIMEOUT)
        except Exception:  # noqa: BLE001 - a refresh is only a hint; counting decides
            pass
        written = _count_written(client, index, ids, model_version)
        if written is not None:
            try:
                parked = count_parked(client, index, list(ids))
            except OpenSearchUnavailable:
                parked = last.parked
            last = JobProgress(index, model_version, len(ids), written, parked)
            yield last
            if last.finished:
                return
        if time.monotonic() > deadline:
            raise OpenSearchUnavailable(
                f"gave up waiting after {timeout:.0f} s: {last.written} of {len(ids)} posts written, {last.parked} "
                "parked. Are workers running (`semdup worker --bundle ...`)? The queued tasks are kept; run the "
                "same command again later or `semdup backfill` to finish"
            )
        time.sleep(interval)


def wait_for(
    client: OpenSearch,
    index: str,
    ids: Sequence[str],
    model_version: str,
    *,
    timeout: float = 3600.0,
    interval: float = 1.0,
    label: str | None = None,
    progress: bool = True,
) -> JobProgress:
    """Wait until every id holds ``model_version`` or is parked; returns the final :class:`JobProgress`.

    Raises:
        OpenSearchUnavailable: ``timeout`` seconds passed first.
    """
    last = JobProgress(index, model_version, len(ids))
    with progress_bar(total=len(ids), desc=label or f"indexing {index}", unit="post", enabled=progress) as bar:
        for last in poll(client, index, ids, model_version, timeout=timeout, interval=interval):
            bar.n = min(len(ids), last.written + last.parked)
            bar.refresh()
    return last
