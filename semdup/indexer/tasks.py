"""Celery tasks of the indexer: thin wrappers over ``semdup.indexer.batch_writer`` with the retry and parking rules.

Every post a task carries ends in exactly one of three states: **written**, **parked** (in ``semdup-parked``,
with the reason), or **still queued** (its message still on the broker). Never acknowledged and dropped:

* Posts that cannot be written for good (no text, binary, an id OpenSearch refuses, refused by the mapping or
  a write block, an index holding another model) are parked; the batch's other posts are written.
* Transient errors (:data:`~semdup.indexer.retry.TRANSIENT_ERRORS`: the cluster unreachable or overloaded, a task
  past its soft time limit, a batch for another bundle than this worker's) are retried by Celery
  (``autoretry_for``, ``retry_backoff``: :class:`~semdup.indexer.retry.RetryingTask`) for at least the retry budget
  (``SEMDUP_RETRY_BUDGET``, 30 minutes by default), then the batch is parked whole. Any other error parks it
  whole at once, with the error.
* If parking fails too (the store is on the same unreachable cluster), or the worker cannot load its bundle, the
  batch is kept queued (:class:`~semdup.indexer.retry.StillQueued`) and retried with the longest wait, as often as
  it takes: each later attempt tries to write the batch first, then to park it. A retry that cannot be sent hands
  the message back to the broker instead (``Reject(requeue=True)``).

Arguments are JSON-native (index name, small batches of posts or ids, the bundle version id, the job id). Every
write has a deterministic ``_id`` and content, so a task delivered twice writes the same thing (``acks_late`` is
safe, see ``celery_app``). A task of a job records its outcome (:mod:`semdup.ingest.outcomes`) as its last step.

Example (the producers do this for you, :func:`semdup.ingest.jobs.submit`)::

    from semdup.indexer.tasks import index_posts
    index_posts.delay("travel", [{"id": "1", "title": "Visa?", "body": "..."}], bundle.version, job="9f2c...")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Task
from celery.utils.log import get_task_logger

from semdup.core import task_names
from semdup.core.errors import OpenSearchError, SearchIndexError
from semdup.index_format.companion import companion_for
from semdup.indexer import batch_writer, sync, worker_metrics
from semdup.indexer.retry import TRANSIENT_ERRORS, OtherBundle, RetryingTask, StillQueued
from semdup.indexer.runtime import WorkerRuntime, runtime
from semdup.ingest import outcomes, parking
from semdup.ingest.celery_app import TASK_SOFT_TIME_LIMIT, app
from semdup.opensearch_io.boundary import ItemFailure

__all__ = [
    "index_posts",
    "backfill_batch",
    "sync_posts",
    "delete_posts",
    "Batch",
    "Outcome",
    "OtherBundle",
]

logger = get_task_logger(__name__)
worker_metrics.connect_signals()  # Prometheus counts from Celery task signals; off unless the worker app turns them on

_TASK_OPTIONS: dict[str, Any] = {
    "bind": True,
    "ignore_result": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "soft_time_limit": TASK_SOFT_TIME_LIMIT,
}


class IndexerTask(RetryingTask):
    """Retries as :class:`~semdup.indexer.retry.RetryingTask`, and logs what reaches Celery as a failure: a lost
    worker process (its message is requeued) or a bug in the guard itself; every error of the work is handled in
    :func:`_deliver`."""

    def on_failure(self, exc: BaseException, task_id: str, args: tuple, kwargs: dict, einfo: Any) -> None:
        batch = Batch.of(self.name, args, kwargs)
        logger.error(
            "task %s of index %s failed (%s: %s); with acks_late its message is handed back when the worker was "
            "lost, else look for these ids in the index and the parked store: %s",
            task_id,
            batch.index,
            type(exc).__name__,
            exc,
            ",".join(batch.ids)[:5000],
        )


_ARG_NAMES = {
    "index_posts": ("index", "posts", "model_version", "job", "batch"),
    "backfill_batch": ("index", "ids", "model_version", "job", "batch"),
    "sync_posts": ("index", "ids", "model_version", "job", "batch"),
    "delete_posts": ("index", "ids", "job", "batch"),
}


@dataclass(frozen=True)
class Batch:
    """A task's arguments: index, posts (as JSON) or ids, model version, job, and its key in the job's ledger."""

    task: str
    index: str
    items: list[Any]
    model_version: str = ""
    job: str | None = None
    key: str | None = None

    @property
    def ids(self) -> list[str]:
        return [str(i["id"]) if isinstance(i, dict) and "id" in i else str(i) for i in self.items]

    @property
    def payloads(self) -> dict[str, dict[str, Any]]:
        return {str(i["id"]): i for i in self.items if isinstance(i, dict) and "id" in i}

    @classmethod
    def of(cls, name: str, args: tuple | list, kwargs: dict) -> Batch:
        short = name.rsplit(".", 1)[-1]
        keys = _ARG_NAMES.get(short, _ARG_NAMES["backfill_batch"])
        values = dict(zip(keys, args, strict=False)) | kwargs
        return cls(
            task=short,
            index=str(values.get("index", "")),
            items=list(values.get(keys[1]) or []),
            model_version=str(values.get("model_version") or ""),
            job=values.get("job"),
            key=values.get("batch"),
        )


@dataclass
class Outcome:
    """What a task did with its posts: written (with their ids, to forget stale parked records), parked, skipped."""

    written: int = 0
    parked: int = 0
    skipped: int = 0
    written_ids: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {"written": self.written, "parked": self.parked, "skipped": self.skipped}


def _check_version(rt: WorkerRuntime, model_version: str) -> None:
    if model_version != rt.bundle.version:
        raise OtherBundle(
            f"this batch was enqueued for model {model_version} but the worker runs bundle {rt.bundle.version}; "
            "start workers with the same bundle as `semdup index-posts --bundle`, then replay the parked posts"
        )


def _park_whole(rt: WorkerRuntime, batch: Batch, exc: BaseException, why: str = "") -> Outcome:
    """Park every post of the batch with ``exc`` as its error (``why``: said before it), keeping OpenSearch's status
    and error type when it answered one."""
    status = exc.status if isinstance(exc, OpenSearchError) else None
    kind = (exc.type if isinstance(exc, OpenSearchError) else None) or type(exc).__name__
    failures = [ItemFailure(i, status, kind, f"{why}{exc}") for i in batch.ids]
    parking.park(
        rt.client, batch.index, failures, task=batch.task, model_version=batch.model_version, payloads=batch.payloads
    )
    logger.error("parked all %d posts of a %s batch of %s: %s", len(failures), batch.task, batch.index, failures[0])
    return Outcome(parked=len(failures))


def _finish(rt: WorkerRuntime, task: Task, batch: Batch, outcome: Outcome) -> dict[str, int]:
    if outcome.written_ids:
        parking.unpark(rt.client, batch.index, outcome.written_ids)
    if batch.job:
        outcomes.record_outcome(
            rt.client,
            batch.job,
            batch.key or str(task.request.id),  # the ledger's key; a message from an older producer has none
            batch.index,
            batch.task,
            written=outcome.written,
            parked=outcome.parked,
            skipped=outcome.skipped,
        )
    return outcome.as_dict()


def _deliver(task: Task, batch: Batch, work: Callable[[WorkerRuntime], Outcome]) -> dict[str, int]:
    """Run ``work`` so that every post of the batch ends written, parked or still queued (the module doc).

    A transient error within the retry budget propagates: Celery's autoretry sends the batch again after its
    backoff. Once the budget is spent, or for any other error, the batch is parked; when even that fails the
    batch is kept queued (:class:`StillQueued`, retried like a transient error, without a limit).
    """
    try:
        rt = runtime()
    except Exception as exc:  # no bundle or client in this process: nothing can be written or parked here
        raise StillQueued(f"this worker cannot load its bundle or client ({exc}); the batch stays queued") from exc
    retries = int(task.request.retries or 0)
    failed: BaseException | None = None
    why = ""
    try:
        outcome = work(rt)
    except SearchIndexError as exc:  # refused before any write (wrong model, no index): park it whole
        failed = exc
    except TRANSIENT_ERRORS as exc:
        if retries < rt.retry.max_retries:
            raise  # Celery's autoretry sends the batch again after its backoff
        failed, why = exc, f"after {retries} retries over at least {rt.retry.budget_s:.0f} s (SEMDUP_RETRY_BUDGET): "
    except Exception as exc:
        logger.exception("a %s batch of %s failed for good", batch.task, batch.index)
        failed = exc
    try:
        if failed is not None:
            outcome = _park_whole(rt, batch, failed, why)
        return _finish(rt, task, batch, outcome)
    except Exception as exc:  # parking or recording failed too: keep the batch on the broker, never drop it
        raise StillQueued(
            f"a {batch.task} batch of {batch.index} ({len(batch.items)} posts) could neither be written nor parked "
            f"({type(exc).__name__}: {exc}); it stays on the broker and is tried again"
        ) from exc


@app.task(name=task_names.INDEX_POSTS, base=IndexerTask, **_TASK_OPTIONS)
def index_posts(
    self: Task,
    index: str,
    posts: list[dict[str, Any]],
    model_version: str,
    job: str | None = None,
    batch: str | None = None,
) -> dict[str, int]:
    """Encode and write a batch of posts (``{"id", "title", "body"}``) with lexical and semdup fields."""
    current = Batch("index_posts", index, posts, model_version, job, batch)

    def work(rt: WorkerRuntime) -> Outcome:
        _check_version(rt, model_version)
        search = batch_writer.ensure_index_model(rt.client, index, model_version)
        result = batch_writer.index_batch(rt.client, index, posts, rt.bundle, search=search)
        parking.park(
            rt.client, index, result.failed, task="index_posts", model_version=model_version, payloads=result.payloads
        )
        failed = {f.id for f in result.failed}
        logger.info("index_posts %s: %d written, %d parked", index, result.written, len(result.failed))
        written_ids = [i for i in dict.fromkeys(current.ids) if i not in failed]
        _flag_later(rt, index, written_ids, model_version)
        return Outcome(written=result.written, parked=len(result.failed), written_ids=written_ids)

    return _deliver(self, current, work)


@app.task(name=task_names.SYNC_POSTS, base=IndexerTask, **_TASK_OPTIONS)
def sync_posts(
    self: Task, index: str, ids: list[str], model_version: str, job: str | None = None, batch: str | None = None
) -> dict[str, int]:
    """Make the companion of the site's ``index`` hold the site's current version of ``ids`` (new, edited or
    deleted posts alike; :mod:`semdup.indexer.sync`)."""
    current = Batch("sync_posts", index, ids, model_version, job, batch)

    def work(rt: WorkerRuntime) -> Outcome:
        _check_version(rt, model_version)
        companion, source = companion_for(rt.client, index, model_version)
        search = batch_writer.ensure_index_model(rt.client, companion, model_version)
        result = sync.sync_batch(rt.client, companion, source, ids, rt.bundle, search=search)
        parking.park(rt.client, index, result.failed, task="sync_posts", model_version=model_version)
        done = {f.id for f in result.failed} | set(result.missing)
        removed = len(result.missing)
        logger.info("sync %s: %d written, %d parked, %d removed", index, result.written, len(result.failed), removed)
        written_ids = [i for i in dict.fromkeys(current.ids) if i not in done]
        _flag_later(rt, index, written_ids, model_version)
        return Outcome(
            written=result.written, parked=len(result.failed), skipped=len(result.missing), written_ids=written_ids
        )

    return _deliver(self, current, work)


def _flag_later(rt: WorkerRuntime, index: str, ids: list[str], model_version: str) -> None:
    """With ``SEMDUP_FLAG_DUPLICATES=1``, send the written posts to the duplicate flagging task (by name: it lives in
    :mod:`semdup.alerts`, above this package). A failure to send is logged, never fails the write."""
    if not ids or not rt.flag_duplicates:
        return
    try:
        app.send_task(task_names.FLAG_DUPLICATES, args=[index, ids, model_version])
    except Exception as exc:  # the broker is down: the posts are written; `semdup duplicates --scan` can catch up
        logger.warning("could not send %d posts of %s to duplicate flagging: %s", len(ids), index, exc)


@app.task(name=task_names.BACKFILL_BATCH, base=IndexerTask, **_TASK_OPTIONS)
def backfill_batch(
    self: Task, index: str, ids: list[str], model_version: str, job: str | None = None, batch: str | None = None
) -> dict[str, int]:
    """Fill only the semdup fields of posts already in ``index``, reading their text from it."""
    current = Batch("backfill_batch", index, ids, model_version, job, batch)

    def work(rt: WorkerRuntime) -> Outcome:
        _check_version(rt, model_version)
        search = batch_writer.ensure_index_model(rt.client, index, model_version)
        result = batch_writer.backfill_batch(rt.client, index, ids, rt.bundle, search)
        parking.park(rt.client, index, result.failed, task="backfill_batch", model_version=model_version)
        gone = len(result.missing)
        logger.info("backfill %s: %d written, %d parked, %d gone", index, result.written, len(result.failed), gone)
        done = {f.id for f in result.failed} | set(result.missing)
        return Outcome(
            written=result.written,
            parked=len(result.failed),
            skipped=len(result.missing),
            written_ids=[i for i in dict.fromkeys(current.ids) if i not in done],
        )

    return _deliver(self, current, work)


@app.task(name=task_names.DELETE_POSTS, base=IndexerTask, **_TASK_OPTIONS)
def delete_posts(
    self: Task, index: str, ids: list[str], job: str | None = None, batch: str | None = None
) -> dict[str, int]:
    """Delete posts by id (deleting an id twice is harmless)."""
    current = Batch("delete_posts", index, ids, "", job, batch)

    def work(rt: WorkerRuntime) -> Outcome:
        result = batch_writer.delete_batch(rt.client, index, ids)
        parking.park(rt.client, index, result.failed, task="delete_posts", model_version="")
        return Outcome(written=result.written, parked=len(result.failed))

    return _deliver(self, current, work)
