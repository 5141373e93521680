"""Index jobs, their batches and their tasks' outcomes, kept in the ``semdup-jobs`` index: how a job counts what it
did, and the ledger that lets nothing of it be lost.

A job (one ``semdup index-posts``, backfill, sync, replay, or HTTP ingest request) has a record ``job/<id>`` with
its index, model version, the number of posts it sends and how many of its batches are published so far
(``sent``). Each batch is recorded in the ledger (``batch/<job>/<key>``, :mod:`semdup.ingest.ledger`) before it is
published, and each task of the job writes, as its last step, an outcome record ``outcome/<job>/<key>``: how many
of its posts it wrote, parked, or skipped (deleted before a backfill reached them). A job's progress is the sum of
its outcomes, so it counts what its own tasks did: never documents that happen to exist (old copies, another job's
writes), and nothing for a task that has not finished (no worker running, a batch still retried). The record is
keyed by job and batch, not by Celery task id, so a batch that runs twice (retried, redelivered after a crash,
or sent again by the sweeper while its first message was still alive) rewrites the same record: it is never
counted twice.

Kept in OpenSearch, beside the parked posts, rather than in a Celery result backend: it works the same with
Redis and RabbitMQ, and the tasks already write there.

Example::

    job = new_job("travel", bundle.version, total=len(posts))
    record_job(client, job)
    ... tasks call record_outcome(client, job.id, "17", "travel", "index_posts", written=62, parked=2)
    job_counts(client, job.id)        # JobCounts(written=62, parked=2, skipped=0)
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from semdup.core.errors import OpenSearchMissing, SearchIndexError
from semdup.index_format.system_indices import JOBS, ensure
from semdup.opensearch_io.boundary import OpenSearch

__all__ = [
    "JOBS_INDEX",
    "Job",
    "JobCounts",
    "new_job",
    "record_job",
    "read_job",
    "record_outcome",
    "outcome_id",
    "job_counts",
    "ensure_jobs_index",
]

logger = logging.getLogger(__name__)

JOBS_INDEX = JOBS.name  # semdup-jobs, declared in semdup.index_format.system_indices


@dataclass(frozen=True)
class Job:
    """One index job: its id (sent with every task), target index, model version, posts (or ids) sent, and the
    batches published (known once they are: :func:`semdup.ingest.jobs.submit`, the record's ``sent``)."""

    id: str
    index: str
    model_version: str
    total: int
    batches: int = 0


@dataclass(frozen=True)
class JobCounts:
    """The sum of a job's finished tasks."""

    written: int = 0
    parked: int = 0
    skipped: int = 0


def new_job(index: str, model_version: str, total: int = 0) -> Job:
    return Job(id=uuid.uuid4().hex[:16], index=index, model_version=model_version, total=total)


def ensure_jobs_index(client: OpenSearch) -> None:
    """The jobs index with the current mapping (for the ledger's writers).

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    ensure(client, JOBS)


def record_job(client: OpenSearch, job: Job) -> None:
    """Write (or update: a backfill knows its total only once it has listed every post) the job's record."""
    body = {"kind": "job", "job": job.id, "index": job.index, "model_version": job.model_version}
    ensure(client, JOBS)
    client.update(  # an update, so the ledger's count of published batches (``sent``) is kept
        index=JOBS_INDEX,
        id=f"job/{job.id}",
        body={"doc": {**body, "total": job.total, "at": int(time.time())}, "doc_as_upsert": True},
    )


def read_job(client: OpenSearch, job_id: str) -> Job:
    """The job ``job_id`` as recorded when it was enqueued.

    Raises:
        SearchIndexError: no such job (the message says where job ids come from).
    """
    try:
        doc = client.get(index=JOBS_INDEX, id=f"job/{job_id}")["_source"]
    except OpenSearchMissing as exc:
        raise SearchIndexError(
            f"no index job {job_id!r} in {JOBS_INDEX!r}; use the job id `semdup index-posts` printed when it "
            "enqueued the posts"
        ) from exc
    return Job(job_id, doc["index"], doc["model_version"], int(doc["total"]), int(doc.get("sent") or 0))


def outcome_id(job_id: str, batch: str) -> str:
    """The ``_id`` of a batch's outcome record: one per job and batch, however often the batch runs."""
    return f"outcome/{job_id}/{batch}"


def record_outcome(
    client: OpenSearch,
    job_id: str,
    batch: str,
    index: str,
    task: str,
    *,
    written: int,
    parked: int,
    skipped: int = 0,
) -> None:
    """A batch's outcome, under its job and batch key (a batch run twice rewrites the same record). ``batch`` is
    the ledger's key; a message sent without one (an older producer) passes its task id.

    Raises:
        OpenSearchUnavailable: the cluster did not answer (the task is retried; its writes are idempotent).
    """
    body = {
        "kind": "outcome",
        "job": job_id,
        "index": index,
        "task": task,
        "batch": batch,
        "written": written,
        "parked": parked,
        "skipped": skipped,
        "at": int(time.time()),
    }
    ensure(client, JOBS)
    client.index(index=JOBS_INDEX, id=outcome_id(job_id, batch), body=body)


def job_counts(client: OpenSearch, job_id: str) -> JobCounts:
    """The sum of the outcomes recorded so far for ``job_id`` (zeros before the first one).

    Raises:
        OpenSearchUnavailable: the cluster did not answer, or answered 429 / 502 / 503 / 504 (recovering: shards
            not allocated yet, or overloaded; a wait goes on, as for one down).
    """
    query = {"bool": {"filter": [{"term": {"job": job_id}}, {"term": {"kind": "outcome"}}]}}
    aggs = {k: {"sum": {"field": k}} for k in ("written", "parked", "skipped")}
    client.indices.refresh(index=JOBS_INDEX, ignore_unavailable=True)
    out = client.search(index=JOBS_INDEX, body={"query": query, "size": 0, "aggs": aggs}, ignore_unavailable=True)
    sums = out.get("aggregations") or {}
    return JobCounts(**{k: int((sums.get(k) or {}).get("value") or 0) for k in ("written", "parked", "skipped")})
