"""An index job: enqueue posts (or the parked ones again) as Celery tasks, then wait until each is written or parked.

The library API under ``semdup index-posts`` and ``semdup backfill``; the CLI only prints what it returns::

    settings = load_settings()                                # semdup.apps.settings: once, at the edge
    connect_broker(settings.broker_settings().url)
    ensure_index(client, "travel", dimension=bundle.dimension)
    job = enqueue_posts(client, "travel", read_posts("posts.jsonl"), bundle.version)
    done = wait_for(client, job, timeout=3600, sweep=settings.sweep_settings())
    print(f"{done.written} written, {done.parked} parked, {done.pending} not done")
    if not done.finished:
        census(client, job)                                   # how many are still on the broker, how many missing
    job = replay_parked(client, "travel", bundle.version)     # after fixing what parked them

A job counts what its own tasks did: each task records its outcome as its last step
(:mod:`semdup.indexer.outcomes`), and :func:`poll` sums them. So old copies already in the index, another job's
writes, or posts parked after a quick count never pass for this job's work, and a post is *pending* until its
task has finished: still queued (on the broker, :func:`queued_posts`) or, if not even there, missing.
:func:`wait_for` is a fold over :func:`poll` (as opensearch-py's ``bulk`` over ``streaming_bulk``) and returns
the last progress when the time is up (``finished`` False), so the caller can say what is left and why.

Every batch is recorded in the job's ledger before it is published (:mod:`semdup.indexer.ledger`), and a poll
with sweep settings runs the sweeper (:mod:`semdup.indexer.sweeper`): a batch neither done nor queued for longer
than the bound (a worker killed between taking a message and recording it as unacknowledged, a producer that
died mid-enqueue) is sent again. Each progress carries what holds the job up (:class:`WaitState`: OpenSearch or
the broker unreachable and for how long, posts held on the broker), for the caller to print.

Tasks are sent by name (:mod:`semdup.core.task_names`) through the indexer queue's app, which the composition root
points at the broker (:mod:`semdup.apps.producers`); a parked record names its task, and a record whose task is not
one of the indexer's is left parked, with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from celery import Celery

from semdup.core.bulk import chunked
from semdup.core.clients import knn_available
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.core.logs import scrub
from semdup.core.opensearch import OpenSearch
from semdup.core.posts import Post
from semdup.core.progress import progress as progress_bar
from semdup.core.settings import redact_url
from semdup.core.task_names import BACKFILL_BATCH, DELETE_POSTS, INDEX_POSTS, SYNC_POSTS
from semdup.index_format.mapping import common_fields, semdup_props
from semdup.index_format.mapping import mappings as index_mappings
from semdup.index_format.schema import CandidateFields
from semdup.indexer import ledger
from semdup.indexer.celery_app import DEFAULT_VISIBILITY_TIMEOUT, app, configure_app
from semdup.indexer.ledger import TaskCall
from semdup.indexer.lexical_index import create_index
from semdup.indexer.outcomes import Job, job_counts, new_job, record_job
from semdup.indexer.parking import ParkedPost, forget_parked, iter_parked
from semdup.indexer.sweeper import Sweep, Sweeper, SweepSettings
from semdup.indexer.waiting import JobProgress, WaitState

__all__ = [
    "Job",
    "JobProgress",
    "WaitState",
    "Census",
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
    "census",
    "publish_job",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexState:
    """What :func:`ensure_index` found or did: ``created`` now, and the search structures the index holds."""

    created: bool
    fields: CandidateFields


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
        SearchIndexError: the index exists but semdup did not create it (a site's index: ``semdup enable``
            connects it).
    """
    check_index_name(index)
    if client.indices.exists(index=index):
        found = index_mappings(client, index)
        foreign = [name for name, m in found.items() if semdup_props(m) is None]
        if foreign:
            raise SearchIndexError(
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


def publish_job(
    client: OpenSearch,
    job: Job,
    calls: Iterator[TaskCall] | Sequence[TaskCall],
    label: str,
    progress: bool,
    total: int | None = None,
) -> int:
    """Publish ``calls`` as ``job``'s batches through the ledger (:func:`semdup.indexer.ledger.publish`), with a
    progress bar of posts; returns the posts sent."""
    if total is None and isinstance(calls, Sequence):
        total = sum(c.size for c in calls)
    with progress_bar(total=total, desc=label, unit="post", enabled=progress) as bar:
        return ledger.publish(client, job, calls, on_sent=lambda c: bar.update(c.size))


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
    calls = [TaskCall(INDEX_POSTS, [index, b, model_version], job.id) for b in chunked(payload, batch_size)]
    publish_job(client, job, calls, "enqueue", progress)
    logger.info("job %s: enqueued %d posts for %s with model %s", job.id, len(payload), index, model_version)
    return job


def _replayable() -> dict[str, str]:
    """The tasks a parked record may name, by the short name it gives them (``tasks.Batch.task``, ``parking.park``)."""
    return {name.rsplit(".", 1)[-1]: name for name in (INDEX_POSTS, BACKFILL_BATCH, SYNC_POSTS, DELETE_POSTS)}


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
        if task == INDEX_POSTS:
            items: list[Any] = [r.payload or {"id": r.post_id} for r in recs]
        else:
            items = [r.post_id for r in recs]
        extra = [] if task == DELETE_POSTS else [model_version]
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
    job = Job(job.id, index, model_version, total=sum(c.size for c in calls))
    record_job(client, job)
    publish_job(client, job, calls, "replay", progress)
    forget_parked(client, covered)
    logger.info("job %s: replayed %d parked posts of %s", job.id, len(covered), index)
    return job


def poll(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float,
    interval: float = 1.0,
    sweep: SweepSettings | None = None,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> Iterator[JobProgress]:
    """A :class:`JobProgress` after each look at the job's outcomes, every ``interval`` seconds, until the job is
    finished or ``timeout`` seconds have passed (then the last one yielded is not finished; its tasks are kept).

    A look that finds OpenSearch unreachable yields the last counts with ``waiting.opensearch_down_s`` set (the
    workers retry meanwhile; the wait goes on). With ``sweep`` settings the sweeper runs every
    ``sweep.every_s`` (:mod:`semdup.indexer.sweeper`), and the progress says what it found; once the job is
    finished its ledger records are deleted.
    """
    deadline = clock() + timeout
    sweeper = Sweeper(client, app, job, sweep, clock=clock) if sweep is not None else None
    counts = JobProgress(job)
    state = WaitState(sweep_after_s=sweep.after_s if sweep else None)
    down_since: float | None = None
    broker_down_since: float | None = None
    next_sweep = clock()
    while True:
        now = clock()
        try:
            c = job_counts(client, job.id)
            counts = JobProgress(job, c.written, c.parked, c.skipped)
            down_since = None
            state = replace(state, opensearch_down_s=None, opensearch_error=None)
        except OpenSearchUnavailable as exc:  # the cluster is down for now: keep waiting, the workers retry
            down_since = now if down_since is None else down_since
            state = replace(state, opensearch_down_s=now - down_since, opensearch_error=str(exc))
        if sweeper is not None and not counts.finished and now >= next_sweep:
            found = sweeper.sweep()
            next_sweep = now + sweep.every_s  # type: ignore[union-attr]
            broker_down_since = (
                (now if broker_down_since is None else broker_down_since) if found.broker_error else None
            )
            state = _with_sweep(state, found, sweeper.resent_total, now, broker_down_since)
        last = replace(counts, waiting=state)
        yield last
        if last.finished:
            if sweeper is not None:
                _forget_ledger(client, job)
            return
        if clock() > deadline:
            return
        sleep(interval)


def _with_sweep(state: WaitState, found: Sweep, resent: int, now: float, broker_down_since: float | None) -> WaitState:
    return replace(
        state,
        queued_posts=found.queued_posts if found.queued_posts is not None else state.queued_posts,
        missing_posts=found.missing_posts if found.opensearch_error is None else state.missing_posts,
        missing_for_s=found.missing_for_s if found.opensearch_error is None else state.missing_for_s,
        resent_batches=resent,
        broker_down_s=None if broker_down_since is None else now - broker_down_since,
    )


def _forget_ledger(client: OpenSearch, job: Job) -> None:
    try:
        ledger.forget_batches(client, job.id)
    except OpenSearchUnavailable as exc:  # harmless: the records are only read while the job is unfinished
        logger.warning("job %s finished but its ledger records stay in the jobs index for now: %s", job.id, exc)


def wait_for(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float = 3600.0,
    interval: float = 1.0,
    label: str | None = None,
    progress: bool = True,
    sweep: SweepSettings | None = None,
    on_progress: Any = None,
) -> JobProgress:
    """Wait until every post of ``job`` is written, parked or skipped, or ``timeout`` seconds have passed;
    returns the last :class:`JobProgress` (check ``finished``). With ``sweep`` settings missing batches are sent
    again (:func:`poll`). The bar (on a terminal) shows what holds the job up; ``on_progress(progress)`` is
    called after each look (the CLI logs the same where there is no bar)."""
    last = JobProgress(job)
    with progress_bar(total=job.total, desc=label or f"indexing {job.index}", unit="post", enabled=progress) as bar:
        for last in poll(client, job, timeout=timeout, interval=interval, sweep=sweep):
            bar.n = min(job.total, last.done)
            bar.set_postfix_str(last.describe_wait() or "", refresh=False)
            bar.refresh()
            if on_progress is not None:
                on_progress(last)
    return last


def queued_posts(job: Job) -> int | None:
    """How many of ``job``'s posts are held by task messages on the broker (queued, or held unacknowledged by a
    worker), read atomically; None when the broker cannot tell (RabbitMQ) or does not answer."""
    from semdup.indexer.backlog import queued_post_ids

    try:
        ids = queued_post_ids(app, job=job.id)
    except BrokerUnavailable as exc:
        logger.warning("could not count the queued posts of job %s: %s", job.id, exc)
        return None
    return None if ids is None else len(ids)


@dataclass(frozen=True)
class Census:
    """Where a job's pending posts are, confirmed by two reads: ``queued`` on the broker (None: it cannot tell),
    ``missing`` in batches neither done nor queued at both reads (being sent again by the sweeper)."""

    queued: int | None
    missing: int
    resent: int = 0


def census(client: OpenSearch, job: Job, *, sweep: SweepSettings | None = None, pause: float = 1.0) -> Census:
    """How many of ``job``'s posts are still queued and how many are missing, by two sweeps ``pause`` seconds
    apart (a message caught between a worker's BRPOP and its HSET at one read is seen at the other); a batch
    missing for the sweep bound is sent again on the way. A job recorded before the ledger is counted by post id
    from one atomic read of the broker."""
    sweeper = Sweeper(client, app, job, sweep or SweepSettings())
    first = sweeper.sweep()
    if first.batches == 0:
        queued = queued_posts(job)
        return Census(queued=queued, missing=0)
    time.sleep(pause)
    second = sweeper.sweep()
    if second.opensearch_error or second.broker_error:
        raise (OpenSearchUnavailable if second.opensearch_error else BrokerUnavailable)(
            second.opensearch_error or second.broker_error
        )
    return Census(queued=second.queued_posts, missing=second.missing_posts, resent=sweeper.resent_total)
