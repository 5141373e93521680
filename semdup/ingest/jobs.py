"""Index jobs: the one way posts, ids or parked records reach the workers (:func:`submit`), and the wait for them.

Every producer submits a job: ``semdup index-posts`` (:func:`enqueue_posts`, :func:`replay_parked`), ``semdup
backfill`` (:func:`semdup.ingest.backfill.enqueue_backfill`, or the sync of a connected site's index), ``semdup
watch`` (:func:`semdup.ingest.reconcile.enqueue_sync` every round), and the HTTP endpoints ``POST /v1/posts``,
``/v1/posts/sync`` and ``/v1/posts/delete`` (:mod:`semdup.service.routers.ingest`). :func:`submit` records the
job, then each batch in the job's ledger before it publishes it (:mod:`semdup.ingest.ledger`), so whoever sweeps the
job (:mod:`semdup.ingest.sweeper`: the CLI's wait, ``semdup watch``, the service's sweeping thread) can send again a
batch a worker lost. The CLI only prints what these return::

    settings = load_settings()                                # semdup.apps.settings: once, at the edge
    connect_broker(settings.broker_settings().url)            # semdup.ingest.celery_app
    ensure_index(client, "travel", dimension=bundle.dimension)
    job = enqueue_posts(client, "travel", read_posts("posts.jsonl"), bundle.version)
    result = follow(client, job, timeout=3600, sweep_after=settings.worker.sweep_after)
    done = result.progress
    print(f"{done.written} written, {done.parked} parked, {done.pending} not done")
    if result.census:                                         # the time was up
        print(f"{result.census.queued} still on the broker, {result.census.missing} missing")
    job = replay_parked(client, "travel", bundle.version)     # after fixing what parked them

A job counts what its own tasks did: each task records its outcome as its last step
(:mod:`semdup.ingest.outcomes`), and :func:`poll` sums them. So old copies already in the index, another job's
writes, or posts parked after a quick count never pass for this job's work, and a post is *pending* until its
task has finished: still queued (on the broker, :func:`queued_posts`) or, if not even there, missing.
:func:`wait_for` is a fold over :func:`poll` (as opensearch-py's ``bulk`` over ``streaming_bulk``) and returns
the last progress when the time is up (``finished`` False); :func:`follow` adds where the rest is (:func:`census`)
and the parked posts to show.

A poll with a sweep bound runs the sweeper on its job: a batch neither done nor queued for longer than the bound
(a worker killed between taking a message and recording it as unacknowledged, a producer that died mid-enqueue) is
sent again. Each progress carries what holds the job up (:class:`WaitState`: OpenSearch or the broker unreachable
and for how long, posts held on the broker), for the caller to print.

Tasks are sent by name (:mod:`semdup.core.task_names`) through the indexer queue's app
(:mod:`semdup.ingest.celery_app`; the service publishes through an app of its own); a parked record names its task,
and a record whose task is not one of the indexer's is left parked, with a warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import islice
from typing import Any

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.core.posts import Post
from semdup.core.progress import progress as progress_bar
from semdup.core.task_names import BACKFILL_BATCH, DELETE_POSTS, INDEX_POSTS, SYNC_POSTS
from semdup.index_format.layout import Shape
from semdup.index_format.mapping import common_fields, semdup_props
from semdup.index_format.mapping import mappings as index_mappings
from semdup.index_format.schema import CandidateFields
from semdup.ingest import celery_app, ledger
from semdup.ingest.ledger import TaskCall
from semdup.ingest.lexical_index import create_index
from semdup.ingest.outcomes import Job, job_counts, new_job, record_job
from semdup.ingest.parking import ParkedPost, forget_parked, iter_parked
from semdup.ingest.sweeper import DEFAULT_SWEEP_AFTER, Sweeper
from semdup.ingest.waiting import JobProgress, WaitState
from semdup.opensearch_io.boundary import OpenSearch
from semdup.opensearch_io.bulk import chunked
from semdup.opensearch_io.clients import knn_available

__all__ = [
    "BATCH",
    "Job",
    "JobProgress",
    "JobResult",
    "WaitState",
    "Census",
    "EnqueueFailed",
    "IndexState",
    "TaskCall",
    "batches",
    "submit",
    "ensure_index",
    "enqueue_posts",
    "replay_batches",
    "replay_parked",
    "poll",
    "wait_for",
    "follow",
    "queued_posts",
    "census",
]

logger = logging.getLogger(__name__)

BATCH = 64  # posts or ids per task: small enough to retry whole, large enough to encode well
_PARKED_SHOWN = 20  # parked records a finished wait hands its caller to show


class EnqueueFailed(BrokerUnavailable):
    """The broker failed part-way through a job; ``details`` (enqueued, tasks) say how far it got (the service
    answers them beside the error). The unsent batches stay in the job's ledger."""

    def __init__(self, message: str, enqueued: int, tasks: int) -> None:
        super().__init__(message)
        self.details = {"enqueued": enqueued, "tasks": tasks}


@dataclass(frozen=True)
class IndexState:
    """What :func:`ensure_index` found or did: ``created`` now, and the search structures the index holds."""

    created: bool
    fields: CandidateFields


def ensure_index(
    client: OpenSearch,
    index: str,
    *,
    dimension: int | None,
    fields: CandidateFields | None = None,
    shape: Shape | None = None,
) -> IndexState:
    """Create ``index`` with semdup's schema and the search structures ``fields`` asks for, unless it exists.

    An existing index is left as it is (``fields`` only applies at creation; ``semdup enable`` adds structures
    to an existing one): the returned state says which it holds. ``shape``: a new index's shards and replicas
    (the settings' ``IndexLayout.created()``).

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
    create_index(client, index, dimension=dimension, knn=fields.knn, sparse=fields.sparse, shape=shape)
    return IndexState(created=True, fields=fields)


def batches(
    task: str, index: str, items: Iterable[Any], extra: Sequence[Any] = (), size: int = BATCH
) -> Iterator[TaskCall]:
    """``task(index, items[i:i+size], *extra)`` for each batch of ``items``, in order (an iterator stays lazy)."""
    return (TaskCall(task, [index, chunk, *extra]) for chunk in chunked(items, size))


def submit(
    client: OpenSearch,
    index: str,
    model_version: str,
    calls: Iterable[TaskCall],
    *,
    total: int | None = None,
    app: Any = None,
    label: str = "enqueue",
    progress: bool = False,
) -> Job:
    """Record a job of ``calls`` for ``index`` with ``model_version``, then each chunk of its batches in the
    ledger, publish them through ``app`` (default: the queue's app), and return the job with the posts (or ids)
    sent and the batches published. ``total``: the posts an iterator of calls will send, as listed beforehand (the
    job's count until they are sent; a list of calls counts itself).

    Raises:
        ConfigError: ``index`` is not one index name (a pattern, a list, a system index); nothing is recorded.
        EnqueueFailed: the broker failed part-way (how far it got in ``details``; the rest is in the ledger).
        OpenSearchUnavailable: the cluster did not answer (what was published so far is in the ledger).
    """
    check_index_name(index)
    if total is None:
        calls = list(calls)
        total = sum(c.size for c in calls)
    job = new_job(index, model_version, total=total)
    record_job(client, job)  # the count first, so the job can be followed while it is being sent
    published: list[TaskCall] = []

    def sent(call: TaskCall) -> None:
        published.append(call)
        bar.update(call.size)

    with progress_bar(total=total, desc=label, unit="post", enabled=progress) as bar:
        try:
            posts = ledger.publish(client, job, calls, app=app or celery_app.app, on_sent=sent)
        except BrokerUnavailable as exc:
            cause = exc.__cause__ or exc
            done = sum(c.size for c in published)
            logger.warning("job %s for %s: broker failed after %d of %d items: %s", job.id, index, done, total, cause)
            raise EnqueueFailed(
                f"the broker did not take the tasks ({type(cause).__name__}: {cause}); {done} of {total} were "
                f"enqueued in {len(published)} task(s) before it failed. Send the request again once the broker is "
                "back (sending posts twice is harmless)",
                enqueued=done,
                tasks=len(published),
            ) from exc
    job = replace(job, total=posts, batches=len(published))
    if posts != total:
        record_job(client, job)
    return job


def enqueue_posts(
    client: OpenSearch,
    index: str,
    posts: Sequence[Post],
    model_version: str,
    *,
    batch_size: int = BATCH,
    progress: bool = True,
) -> Job:
    """Submit ``posts`` as a job of ``index_posts`` tasks of ``batch_size`` posts.

    A post id given twice is sent once, with its last content (the one that would have been written last).
    """
    payload = [p.to_json() for p in {p.id: p for p in posts}.values()]
    calls = list(batches(INDEX_POSTS, index, payload, [model_version], batch_size))
    job = submit(client, index, model_version, calls, progress=progress)
    logger.info("job %s: enqueued %d posts for %s with model %s", job.id, job.total, index, model_version)
    return job


def _replayable() -> dict[str, str]:
    """The tasks a parked record may name, by the short name it gives them (``tasks.Batch.task``, ``parking.park``)."""
    return {name.rsplit(".", 1)[-1]: name for name in (INDEX_POSTS, BACKFILL_BATCH, SYNC_POSTS, DELETE_POSTS)}


def replay_batches(
    records: Sequence[ParkedPost], index: str, model_version: str, batch_size: int = BATCH
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
        items = [r.payload or {"id": r.post_id} for r in recs] if task == INDEX_POSTS else [r.post_id for r in recs]
        calls += batches(task, index, items, [] if task == DELETE_POSTS else [model_version], batch_size)
        covered += recs
    return calls, covered


def replay_parked(
    client: OpenSearch, index: str, model_version: str, *, batch_size: int = BATCH, progress: bool = True
) -> Job:
    """Submit the parked posts of ``index`` again as a job and forget their records. A post that fails again is
    parked again, with the new error."""
    calls, covered = replay_batches(list(iter_parked(client, index)), index, model_version, batch_size)
    job = submit(client, index, model_version, calls, label="replay", progress=progress)
    forget_parked(client, covered)
    logger.info("job %s: replayed %d parked posts of %s", job.id, len(covered), index)
    return job


def poll(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float,
    interval: float = 1.0,
    sweep_after: float | None = None,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> Iterator[JobProgress]:
    """A :class:`JobProgress` after each look at the job's outcomes, every ``interval`` seconds, until the job is
    finished or ``timeout`` seconds have passed (then the last one yielded is not finished; its tasks are kept).

    A look that finds OpenSearch unreachable yields the last counts with ``waiting.opensearch_down_s`` set (the
    workers retry meanwhile; the wait goes on). With a ``sweep_after`` bound (seconds) the sweeper runs every
    :attr:`~semdup.ingest.sweeper.Sweeper.every_s` (:mod:`semdup.ingest.sweeper`), and the progress says what it
    found; once the job is finished its ledger records are deleted.
    """
    deadline = clock() + timeout
    sweeper = None if sweep_after is None else Sweeper(client, celery_app.app, sweep_after, jobs=[job.id], clock=clock)
    counts = JobProgress(job)
    state = WaitState(sweep_after_s=sweep_after)
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
            next_sweep = now + sweeper.every_s
            broker_down_since = (
                (now if broker_down_since is None else broker_down_since) if found.broker_error else None
            )
            state = _with_sweep(state, found, sweeper.resent_total, now, broker_down_since)
        last = replace(counts, waiting=state)
        yield last
        if last.finished:
            if sweeper is not None:
                sweeper.forget(job.id)
            return
        if clock() > deadline:
            return
        sleep(interval)


def _with_sweep(state: WaitState, found: Any, resent: int, now: float, broker_down_since: float | None) -> WaitState:
    return replace(
        state,
        queued_posts=found.queued_posts if found.queued_posts is not None else state.queued_posts,
        missing_posts=found.missing_posts if found.opensearch_error is None else state.missing_posts,
        missing_for_s=found.missing_for_s if found.opensearch_error is None else state.missing_for_s,
        resent_batches=resent,
        broker_down_s=None if broker_down_since is None else now - broker_down_since,
    )


def wait_for(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float = 3600.0,
    interval: float = 1.0,
    label: str | None = None,
    progress: bool = True,
    sweep_after: float | None = None,
    on_progress: Any = None,
) -> JobProgress:
    """Wait until every post of ``job`` is written, parked or skipped, or ``timeout`` seconds have passed;
    returns the last :class:`JobProgress` (check ``finished``). With a ``sweep_after`` bound missing batches are sent
    again (:func:`poll`). The bar (on a terminal) shows what holds the job up; ``on_progress(progress)`` is
    called after each look (the CLI logs the same where there is no bar)."""
    last = JobProgress(job)
    with progress_bar(total=job.total, desc=label or f"indexing {job.index}", unit="post", enabled=progress) as bar:
        for last in poll(client, job, timeout=timeout, interval=interval, sweep_after=sweep_after):
            bar.n = min(job.total, last.done)
            bar.set_postfix_str(last.describe_wait() or "", refresh=False)
            bar.refresh()
            if on_progress is not None:
                on_progress(last)
    return last


def queued_posts(job: Job) -> int | None:
    """How many of ``job``'s posts are held by task messages on the broker (queued, or held unacknowledged by a
    worker), read atomically; None when the broker cannot tell (RabbitMQ) or does not answer."""
    from semdup.ingest.backlog import queued_post_ids

    try:
        ids = queued_post_ids(celery_app.app, job=job.id)
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


def census(
    client: OpenSearch, job: Job, *, sweep_after: float = DEFAULT_SWEEP_AFTER, pause: float = 1.0
) -> Census:
    """How many of ``job``'s posts are still queued and how many are missing, by two sweeps ``pause`` seconds
    apart (a message caught between a worker's BRPOP and its HSET at one read is seen at the other); a batch
    missing for the sweep bound is sent again on the way. A job recorded before the ledger is counted by post id
    from one atomic read of the broker."""
    sweeper = Sweeper(client, celery_app.app, sweep_after, jobs=[job.id])
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


@dataclass(frozen=True)
class JobResult:
    """How a wait for a job ended: its last progress; where its pending posts are when the time was up (None:
    finished); and, when any of its posts was parked, the index's first parked records (more than
    :data:`_PARKED_SHOWN`: there are more), for the caller to show."""

    progress: JobProgress
    census: Census | None = None
    parked: tuple[ParkedPost, ...] = ()


def follow(
    client: OpenSearch,
    job: Job,
    *,
    timeout: float,
    sweep_after: float,
    label: str | None = None,
    progress: bool = True,
    on_progress: Any = None,
) -> JobResult:
    """Wait for ``job`` with the sweeper on (:func:`wait_for`); then what its caller shows: the parked posts, and
    when the time was up, where the pending ones are (:func:`census`)."""
    done = wait_for(
        client, job, timeout=timeout, label=label, progress=progress, sweep_after=sweep_after, on_progress=on_progress
    )
    parked = tuple(islice(iter_parked(client, job.index), _PARKED_SHOWN + 1)) if done.parked else ()
    found = None if done.finished else census(client, job, sweep_after=sweep_after)
    return JobResult(done, found, parked)
