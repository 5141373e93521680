"""The job ledger: every batch of a job is recorded in ``semdup-jobs`` before it is published, so none can be lost.

A batch is one task message: task name, JSON arguments, and a key (its sequence number in the job). The
producer writes the ledger records of a chunk of batches (one bulk request), publishes them, then records on the
job how many batches are published so far (``sent``). Each message carries ``job`` and ``batch`` in its kwargs
and has the task id ``<job>-<batch>``, the same every time the batch is sent, so the broker's copy can be matched
to the ledger (:func:`semdup.ingest.backlog.queued_task_ids`) and a task's outcome is recorded once per batch
(:func:`semdup.ingest.outcomes.record_outcome`). A batch is then *done* (an outcome record), *queued* (a message
on the broker), or *missing*: neither, which the sweeper (:mod:`semdup.ingest.sweeper`) confirms over time and
sends again from its record here. The readers take a set of jobs (or every unfinished job of some indices), so a
sweeper of many jobs reads each store once per sweep; a batch is named by its :data:`Key`, (job, batch key).

What it costs: one more bulk request per :data:`CHUNK` batches while enqueueing, one small update of the job
record per chunk, and the batches' arguments stored once more in ``semdup-jobs`` (``call`` is an object with
``enabled: false``: kept in ``_source`` only, nothing indexed, no doc values; ``index_posts`` batches carry the
posts' text, the others only ids). The records of a finished job are deleted by whoever sees it finish
(:func:`forget_batches`), so the store holds only unfinished jobs' batches; the outcome records (a few numbers
per batch) stay.

Example::

    calls = [TaskCall(INDEX_POSTS, [index, posts, version]) for posts in chunked(payload, 64)]
    publish(client, job, calls, app=app)         # ledger chunk, publish chunk, job.sent, ... in that order
    ledger_entries(client, jobs=[job.id])        # {(job.id, "0"): LedgerEntry(seq=0, size=64), ...}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from semdup.core.errors import BrokerUnavailable, OpenSearchRefused, OpenSearchUnavailable
from semdup.ingest.outcomes import JOBS_INDEX, Job, ensure_jobs_index
from semdup.opensearch_io.boundary import OpenSearch, mget_docs, scan
from semdup.opensearch_io.bulk import bulk_write, chunked

__all__ = [
    "CHUNK",
    "Key",
    "TaskCall",
    "LedgerEntry",
    "SentMark",
    "task_id",
    "publish",
    "ledger_entries",
    "done_batches",
    "read_calls",
    "sent_marks",
    "forget_batches",
]

Key = tuple[str, str]  # (job id, batch key): one batch of one job

logger = logging.getLogger(__name__)

CHUNK = 100  # batches per ledger bulk request (at most ~100 x 64 posts of text) and per `sent` update
_BULK_TIMEOUT = 60.0  # a ledger chunk is up to 100 batches of posts' text (20 MB): more than a small request
_MAX_BULK_BYTES = 20 * 1024 * 1024


def task_id(job: str, batch: str) -> str:
    """The Celery task id of a batch: the same each time the batch is sent, so the broker's copies can be matched
    to the ledger."""
    return f"{job}-{batch}"


@dataclass(frozen=True)
class TaskCall:
    """One task message: the task's name (:mod:`semdup.core.task_names`), its JSON-native arguments, the job it
    belongs to and its key in the job's ledger (given by :func:`publish`). Sent by name through the indexer queue's
    app (:mod:`semdup.ingest.celery_app`, pointed at the broker by the composition root): a producer never needs
    the workers' task module."""

    task: str
    args: list[Any]
    job: str | None = None
    batch: str | None = None

    @property
    def size(self) -> int:
        """Posts or ids the message carries."""
        return len(self.args[1]) if len(self.args) > 1 else 0

    @property
    def kwargs(self) -> dict[str, str]:
        return {k: v for k, v in (("job", self.job), ("batch", self.batch)) if v}

    def send(self, app: Any) -> None:
        """Publish through ``app`` (a Celery app); a broker that refuses is :class:`BrokerUnavailable`."""
        tid = task_id(self.job, self.batch) if self.job and self.batch else None
        try:
            app.send_task(self.task, args=self.args, kwargs=self.kwargs, task_id=tid)
        except Exception as exc:  # kombu and redis raise transport-specific errors
            raise BrokerUnavailable(f"the broker refused a message ({type(exc).__name__}: {exc})") from exc


@dataclass(frozen=True)
class LedgerEntry:
    """What the sweeper needs of a batch without its arguments: its place in the job and its size."""

    seq: int
    size: int


@dataclass(frozen=True)
class SentMark:
    """How many of a job's batches its producer has published (in ledger order), and when it last said so."""

    sent: int
    at: float


def _bulk(client: OpenSearch, actions: list[dict[str, Any]], what: str) -> None:
    report = bulk_write(
        client, actions, chunk_size=len(actions), max_chunk_bytes=_MAX_BULK_BYTES, request_timeout=_BULK_TIMEOUT
    )
    if report.failed:  # nothing of the chunk is published: the producer fails, and sending again is harmless
        first = report.failed[0]
        raise first.error(
            f"{JOBS_INDEX} refused {len(report.failed)} records while {what}; first: {first.id}: {first}",
            OpenSearchUnavailable if first.transient else OpenSearchRefused,
        )


def _record(client: OpenSearch, job: Job, calls: Sequence[TaskCall], first_seq: int) -> None:
    now = int(time.time())
    actions = [
        {
            "_op_type": "index",
            "_index": JOBS_INDEX,
            "_id": f"batch/{job.id}/{c.batch}",
            "_source": {
                "kind": "batch",
                "job": job.id,
                "index": job.index,
                "task": c.task.rsplit(".", 1)[-1],
                "batch": c.batch,
                "seq": first_seq + n,
                "size": c.size,
                "call": {"task": c.task, "args": c.args},
                "at": now,
            },
        }
        for n, c in enumerate(calls)
    ]
    _bulk(client, actions, f"recording {len(calls)} batches of job {job.id}")


def _mark_sent(client: OpenSearch, job: Job, sent: int) -> None:
    client.update(
        index=JOBS_INDEX,
        id=f"job/{job.id}",
        body={"doc": {"sent": sent, "sent_at": int(time.time())}},
        retry_on_conflict=3,
    )


def publish(
    client: OpenSearch,
    job: Job,
    calls: Iterable[TaskCall],
    *,
    app: Any,
    on_sent: Callable[[TaskCall], None] | None = None,
) -> int:
    """Record each chunk of ``calls`` in the ledger, publish it through ``app``, then mark it sent on the job
    record. The job record must exist (:func:`semdup.ingest.outcomes.record_job`). ``on_sent`` is called after
    each message (a progress bar). Returns the posts or ids sent.

    A producer that dies part-way leaves its unpublished batches in the ledger: the sweeper sends them.

    Raises:
        OpenSearchUnavailable: the cluster did not answer (the batches published so far are in the ledger).
        BrokerUnavailable: the broker refused a message (the batches from it on are in the ledger, unsent).
    """
    ensure_jobs_index(client)
    seq = sent = 0
    for chunk in chunked(calls, CHUNK):
        keyed = [replace(c, job=job.id, batch=str(seq + n)) for n, c in enumerate(chunk)]
        _record(client, job, keyed, seq)
        for call in keyed:
            call.send(app)
            sent += call.size
            if on_sent is not None:
                on_sent(call)
        seq += len(keyed)
        _mark_sent(client, job, seq)
    return sent


def _scan(client: OpenSearch, kind: str, field: str, values: Sequence[str], fields: list[str]) -> Iterable[dict]:
    """The records of ``kind`` whose ``field`` is one of ``values`` (by 1,000: a terms query's comfortable size)."""
    client.indices.refresh(index=JOBS_INDEX, ignore_unavailable=True)
    for part in chunked(list(dict.fromkeys(values)), 1000):
        query = {"bool": {"filter": [{"terms": {field: part}}, {"term": {"kind": kind}}]}}
        yield from scan(
            client,
            index=JOBS_INDEX,
            query={"query": query, "_source": fields},
            size=2000,
            scroll="2m",
            ignore_unavailable=True,
        )


def ledger_entries(
    client: OpenSearch, *, jobs: Sequence[str] = (), indices: Sequence[str] = ()
) -> dict[Key, LedgerEntry]:
    """``(job, batch) -> LedgerEntry`` of every batch recorded for ``jobs``, or for the unfinished jobs of ``indices``
    (a finished job's records are deleted); none for a job recorded before the ledger.

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    field, values = ("job", jobs) if jobs else ("index", indices)
    out: dict[Key, LedgerEntry] = {}
    for hit in _scan(client, "batch", field, values, ["job", "batch", "seq", "size"]):
        src = hit.get("_source") or {}
        out[(str(src["job"]), str(src["batch"]))] = LedgerEntry(int(src.get("seq", 0)), int(src.get("size", 0)))
    return out


def done_batches(client: OpenSearch, jobs: Sequence[str]) -> set[Key]:
    """The batches of ``jobs`` that recorded an outcome (written, parked or skipped: finished).

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    hits = _scan(client, "outcome", "job", jobs, ["job", "batch"])
    return {(str(h["_source"]["job"]), str(h["_source"]["batch"])) for h in hits if "batch" in h["_source"]}


def read_calls(client: OpenSearch, keys: Sequence[Key]) -> list[tuple[Key, str, list[Any]]]:
    """``(key, task name, args)`` of the given batches, from their ledger records (those still there).

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    if not keys:
        return []
    found = client.mget(index=JOBS_INDEX, body={"ids": [f"batch/{job}/{batch}" for job, batch in keys]})
    out = []
    for doc in mget_docs(found, f"GET /{JOBS_INDEX}/_mget"):
        if doc.get("found"):
            src = doc["_source"]
            key = (str(src["job"]), str(src["batch"]))
            out.append((key, str(src["call"]["task"]), list(src["call"]["args"])))
    return out


def sent_marks(client: OpenSearch, jobs: Sequence[str]) -> dict[str, SentMark]:
    """How many of each job's batches are published, per its producer (none for a job recorded before the ledger).

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    if not jobs:
        return {}
    found = client.mget(index=JOBS_INDEX, body={"ids": [f"job/{j}" for j in jobs]})
    out = {}
    for doc in mget_docs(found, f"GET /{JOBS_INDEX}/_mget"):
        src = doc.get("_source") or {}
        if doc.get("found") and "sent" in src:
            out[str(src["job"])] = SentMark(int(src["sent"]), float(src.get("sent_at") or src.get("at") or 0))
    return out


def forget_batches(client: OpenSearch, job_id: str) -> int:
    """Delete the ledger records of a finished job (its outcomes stay); returns how many were deleted.

    Raises:
        OpenSearchUnavailable: the cluster did not answer.
    """
    query = {"bool": {"filter": [{"term": {"job": job_id}}, {"term": {"kind": "batch"}}]}}
    out = client.delete_by_query(index=JOBS_INDEX, body={"query": query}, conflicts="proceed", ignore_unavailable=True)
    return int(out.get("deleted", 0))
