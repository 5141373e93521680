"""An index job: enqueue posts (or the parked ones again) as Celery tasks, then wait until each is written or parked.

The library API under ``semdup index-posts`` and ``semdup backfill``; the CLI only prints what it returns::

    connect_broker(BrokerSettings.from_env().url)            # once, at the edge
    ensure_index(client, "travel", dimension=bundle.dimension)
    job = enqueue_posts(client, "travel", read_posts("posts.jsonl"), bundle.version)
    done = wait_for(client, job, timeout=3600)
    print(f"{done.written} written, {done.parked} parked, {done.pending} not done")
    if not done.finished:
        queued_posts(job)                                     # how many of them are still on the broker
    job = replay_parked(client, "travel", bundle.version)     # after fixing what parked them

A job counts what its own tasks did: each task records its outcome as its last step
(:mod:`semdup.indexer.outcomes`), and :func:`poll` sums them. So old copies already in the index, another job's
writes, or posts parked after a quick count never pass for this job's work, and a post is *pending* until its
task has finished: still queued (on the broker, :func:`queued_posts`) or, if not even there, lost.
:func:`wait_for` is a fold over :func:`poll` (as opensearch-py's ``bulk`` over ``streaming_bulk``) and returns
the last progress when the time is up (``finished`` False), so the caller can say what is left and why.

Tasks are sent through the task objects of :mod:`semdup.indexer.tasks`; a parked record names its task, and a
record whose task is not one of those is left parked, with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task
from opensearchpy import OpenSearch

from semdup.core.clients import knn_available
from semdup.core.errors import BrokerUnavailable, ConfigError, IndexError_, OpenSearchUnavailable
from semdup.core.index_names import check_index_name
from semdup.core.logs import scrub
from semdup.core.posts import Post
from semdup.core.progress import progress as progress_bar
from semdup.core.settings import redact_url
from semdup.index_format.mapping import common_fields, semdup_props
from semdup.index_format.mapping import mappings as index_mappings
from semdup.index_format.schema import CandidateFields
from semdup.indexer import tasks
from semdup.indexer.bulk import chunked
from semdup.indexer.celery_app import DEFAULT_VISIBILITY_TIMEOUT, app, configure_app
from semdup.indexer.lexical_index import create_index
from semdup.indexer.outcomes import Job, job_counts, new_job, record_job
from semdup.indexer.parking import ParkedPost, forget_parked, iter_parked

__all__ = [
    "Job",
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
    "queued_posts",
]

logger = logging.getLogger(__name__)

_TIMEOUT = 30.0


@dataclass(frozen=True)
class JobProgress:
    """How far a job is, by its finished tasks: of ``job.total`` posts, ``written``, ``parked``, and ``skipped``
    (a backfill's posts deleted before it reached them); the rest are ``pending``."""

    job: Job
    written: int = 0
    parked: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.job.total

    @property
    def done(self) -> int:
        return self.written + self.parked + self.skipped

    @property
    def pending(self) -> int:
        return max(0, self.total - self.done)

    @property
    def finished(self) -> bool:
        return self.done >= self.total


@dataclass(frozen=True)
class IndexState:
    """What :func:`ensure_index` found or did: ``created`` now, and the search structures the index holds."""

    created: bool
    fields: CandidateFields


@dataclass(frozen=True)
class TaskCall:
    """One task message: the task object, its JSON-native arguments and the job it belongs to."""

    task: Task
    args: list[Any]
    job: str | None = None

    def send(self) -> None:
        self.task.apply_async(args=self.args, kwargs={"job": self.job} if self.job else {})


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
            f"the Celery broker at {redact_url(url)} did not answer ({scrub(str(exc))}); start the local one with "
            "`semdup broker start` or set SEMDUP_BROKER_URL"
        ) from exc
    return app


def ensure_index(
    client: OpenSearch, index: str, *, dimension: int | None, fields: CandidateFields | None = None
) -> IndexState:
    """Create ``index`` with semdup's schema and the search structures ``fields`` asks for, unless it exists.

    An existing index is left as it is (``fields`` only applies at creation; ``semdup enable`` adds structures
    to an existing one): the returned state says which it holds.

    Raises:
        ConfigError: a name that is not one index (a pattern, list, endpoint or system name), or ``fields.knn``
            without a dense encoder (``dimension`` None) or without the k-NN plugin.
        IndexError_: the index exists but semdup did not create it (a site's index: ``semdup enable`` connects it).
    """
    check_index_name(index)
    if client.indices.exists(index=index, request_timeout=_TIMEOUT):
        found = index_mappings(client, index)
        foreign = [name for name, m in found.items() if semdup_props(m) is None]
        if foreign:
            raise IndexError_(
                f"index {', '.join(foreign)} was not created by semdup; semdup never writes a site's documents. "
                f"Connect it with `semdup enable --index {index} --title-field FIELD --body-field FIELD`, then "
                f"`semdup backfill --index {index}` (new and edited posts: `semdup watch` or POST /v1/posts/sync)"
            )
        return IndexState(created=False, fields=common_fields(found))
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
    """Send every call (``TaskCall.send``; Celery retries a publish while the broker reconnects)."""
    with progress_bar(total=sum(len(c.args[1]) for c in calls), desc=label, unit="post", enabled=progress) as bar:
        for call in calls:
            call.send()
            bar.update(len(call.args[1]))


def enqueue_posts(
    client: OpenSearch,
    index: str,
    posts: Sequence[Post],
    model_version: str,
    *,
    batch_size: int = 64,
    progress: bool = True,
) -> Job:
    """Record a job and send ``posts`` as its ``index_posts`` tasks of ``batch_size`` posts.

    A post id given twice is sent once, with its last content (the one that would have been written last).
    """
    check_index_name(index)
    payload = [p.to_json() for p in {p.id: p for p in posts}.values()]
    job = new_job(index, model_version, total=len(payload))
    record_job(client, job)
    calls = [TaskCall(tasks.index_posts, [index, b, model_version], job.id) for b in chunked(payload, batch_size)]
    _send_all(calls, "enqueue", progress)
    logger.info("job %s: enqueued %d posts for %s with model %s", job.id, len(payload), index, model_version)
    return job


def _short_name(task: Task) -> str:
    """The name a parked record gives its task (``tasks.Batch.task``, ``parking.park``). Read on call:
    a task's name evaluates Celery's lazy task proxy, which importing this module must not do."""
    return task.name.rsplit(".", 1)[-1]


def _replayable() -> dict[str, Task]:
    return {_short_name(t): t for t in (tasks.index_posts, tasks.backfill_batch, tasks.sync_posts, tasks.delete_posts)}


def replay_batches(
    records: Sequence[ParkedPost], index: str, model_version: str, batch_size: int = 64, job: str | None = None
) -> tuple[list[TaskCall], list[ParkedPost]]:
    """The task messages that replay parked ``records``, and the records they cover (unknown tasks left out).

    ``index_posts`` records are sent again with their kept payload, ``backfill_batch`` and ``sync_posts`` ones by
    id (the text is read from the index, or the site's index), ``delete_posts`` ones as deletes; writes use
    ``model_version``.
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
        calls += [TaskCall(task, [index, batch, *extra], job) for batch in chunked(items, batch_size)]
        covered += recs
    return calls, covered


def replay_parked(
    client: OpenSearch, index: str, model_version: str, *, batch_size: int = 64, progress: bool = True
) -> Job:
    """Enqueue the parked posts of ``index`` again as a job and forget their records. A post that fails again is
    parked again, with the new error."""
    job = new_job(index, model_version)
    calls, covered = replay_batches(list(iter_parked(client, index)), index, model_version, batch_size, job.id)
    job = Job(job.id, index, model_version, total=sum(len(c.args[1]) for c in calls))
    record_job(client, job)
    _send_all(calls, "replay", progress)
    forget_parked(client, covered)
    logger.info("job %s: replayed %d parked posts of %s", job.id, len(covered), index)
    return job


def poll(client: OpenSearch, job: Job, *, timeout: float, interval: float = 1.0) -> Iterator[JobProgress]:
    """A :class:`JobProgress` after each look at the job's outcomes, every ``interval`` seconds, until the job is
    finished or ``timeout`` seconds have passed (then the last one yielded is not finished; its tasks are kept)."""
    deadline = time.monotonic() + timeout
    last = JobProgress(job)
    while True:
        try:
            counts = job_counts(client, job.id)
            last = JobProgress(job, counts.written, counts.parked, counts.skipped)
            yield last
        except OpenSearchUnavailable:
            pass  # the cluster is down for now: keep waiting, the workers retry
        if last.finished or time.monotonic() > deadline:
            return
        time.sleep(interval)


def wait_for(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float = 3600.0,
    interval: float = 1.0,
    label: str | None = None,
    progress: bool = True,
) -> JobProgress:
    """Wait until every post of ``job`` is written, parked or skipped, or ``timeout`` seconds have passed;
    returns the last :class:`JobProgress` (check ``finished``)."""
    last = JobProgress(job)
    with progress_bar(total=job.total, desc=label or f"indexing {job.index}", unit="post", enabled=progress) as bar:
        for last in poll(client, job, timeout=timeout, interval=interval):
            bar.n = min(job.total, last.done)
            bar.refresh()
    return last


def queued_posts(job: Job) -> int | None:
    """How many of ``job``'s posts are held by task messages on the broker (queued, or held unacknowledged by a
    worker); None when the broker cannot tell (RabbitMQ) or does not answer."""
    from semdup.indexer.backlog import queued_post_ids

    try:
        ids = queued_post_ids(app, job=job.id)
    except BrokerUnavailable as exc:
        logger.warning("could not count the queued posts of job %s: %s", job.id, exc)
        return None
    return None if ids is None else len(ids)
