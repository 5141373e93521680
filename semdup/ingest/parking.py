"""Parked documents: posts that could not be indexed, kept for operators to see and replay. Never dropped.

The store is an OpenSearch index, ``semdup-parked`` (one per cluster), rather than a Redis list: it lives
beside the data it is about, survives broker restarts and broker swaps (RabbitMQ works the same), and
operators can search it with the tools they already use. A parked record's ``_id`` is a hash of (index, post
id) (:func:`parked_id`), so parking the same post twice keeps one record (the latest error), and a post whose id
OpenSearch refuses as a document ``_id`` (over 512 bytes) can still be parked; the raw id is kept in ``post_id``.

A record holds ``index``, ``post_id``, ``task`` (``index_posts`` or ``backfill_batch``), ``error``,
``model_version``, ``payload`` (the post as JSON for ``index_posts``; ``None`` for backfill, whose text is
in the index) and ``parked_at``. Replay re-enqueues each record and deletes it only if it did not change
meanwhile (``if_seq_no``), so a post that fails again is parked again, never lost.

Parking happens only when OpenSearch answers (a per-document failure, or a bad post); a cluster that is
down is a transient error, and the task is retried instead. A post written later forgets its parked record
(:func:`unpark`), so a post is in one state only.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from semdup.core.errors import OpenSearchRefused
from semdup.core.logs import scrub
from semdup.index_format.system_indices import PARKED, ensure
from semdup.opensearch_io.boundary import ItemFailure, OpenSearch
from semdup.opensearch_io.bulk import bulk_write

__all__ = [
    "PARKED_INDEX",
    "ParkedPost",
    "park",
    "unpark",
    "iter_parked",
    "count_parked",
    "forget_parked",
    "parked_id",
]

logger = logging.getLogger(__name__)

PARKED_INDEX = PARKED.name  # semdup-parked, declared in semdup.index_format.system_indices


@dataclass(frozen=True)
class ParkedPost:
    """One parked post; ``record_id``/``seq_no``/``primary_term`` identify the version read, for a safe delete."""

    index: str
    post_id: str
    task: str
    error: str
    model_version: str
    payload: dict[str, Any] | None
    parked_at: int
    seq_no: int = -1
    primary_term: int = -1
    record_id: str = ""


def parked_id(index: str, post_id: str) -> str:
    """The record's ``_id``: a hash, because ``<index>/<post id>`` can exceed OpenSearch's 512-byte ``_id``."""
    return "p-" + hashlib.sha256(f"{index}\x00{post_id}".encode("utf-8", "surrogatepass")).hexdigest()[:40]


def park(
    client: OpenSearch,
    index: str,
    failures: list[ItemFailure],
    *,
    task: str,
    model_version: str,
    payloads: dict[str, dict[str, Any]] | None = None,
) -> int:
    """Keep the posts of ``failures`` in ``semdup-parked``, each with its error; returns how many records were
    written.

    Raises:
        OpenSearchUnavailable: the cluster did not answer, or the store refused a record (the caller's task is
            retried, nothing is lost).
    """
    if not failures:
        return 0
    payloads = payloads or {}
    now = int(time.time())
    actions = [
        {
            "_op_type": "index",
            "_index": PARKED_INDEX,
            "_id": parked_id(index, f.id),
            "_source": {
                "index": index,
                "post_id": f.id,
                "task": task,
                "error": scrub(str(f))[:2000],  # shown by --list-parked and kept: never a credential
                "model_version": model_version,
                "payload": payloads.get(f.id),
                "parked_at": now,
            },
        }
        for f in failures
    ]
    ensure(client, PARKED)
    report = bulk_write(client, actions)
    client.indices.refresh(index=PARKED_INDEX)
    if report.failed:
        # The park store itself refused them: raise so the task is retried rather than losing the posts.
        first = report.failed[0]
        raise first.error(
            f"could not park {len(report.failed)} posts in {PARKED_INDEX!r} ({str(first)[:200]}); "
            "check the cluster's health and disk space"
        )
    for f in failures:
        logger.warning("parked post %s of index %s (%s): %s", f.id, index, task, str(f)[:200])
    return report.written


def unpark(client: OpenSearch, index: str, post_ids: list[str]) -> int:
    """Forget the parked records of posts that were just written; returns how many there were.

    One search when the store exists (none usually match), a delete only for those that do.

    Raises:
        OpenSearchUnavailable: the cluster did not answer (the caller's task is retried; the writes are idempotent).
    """
    if not post_ids:
        return 0
    query = {"bool": {"filter": [_query(index), {"terms": {"post_id": post_ids}}]}}
    hits = client.search(
        index=PARKED_INDEX,
        body={"query": query, "_source": False, "size": len(post_ids)},
        ignore_unavailable=True,
    )["hits"]["hits"]
    if not hits:
        return 0
    bulk_write(client, [{"_op_type": "delete", "_index": PARKED_INDEX, "_id": h["_id"]} for h in hits])
    client.indices.refresh(index=PARKED_INDEX)
    logger.info("forgot %d parked records of %s: the posts are written now", len(hits), index)
    return len(hits)


def _query(index: str | None) -> dict[str, Any]:
    return {"term": {"index": index}} if index else {"match_all": {}}


def count_parked(client: OpenSearch, index: str | None = None, ids: list[str] | None = None) -> int:
    """Parked records of ``index`` (all when None), optionally only those of ``ids``."""
    if not client.indices.exists(index=PARKED_INDEX):
        return 0
    query: dict[str, Any] = _query(index)
    if ids is not None:
        query = {"bool": {"filter": [query, {"terms": {"post_id": ids}}]}}
    return int(client.count(index=PARKED_INDEX, body={"query": query})["count"])


def iter_parked(client: OpenSearch, index: str | None = None, page: int = 500) -> Iterator[ParkedPost]:
    """Every parked record of ``index`` (all indices when None), oldest first."""
    if not client.indices.exists(index=PARKED_INDEX):
        return
    client.indices.refresh(index=PARKED_INDEX)
    after: list[Any] | None = None
    while True:
        body: dict[str, Any] = {
            "query": _query(index),
            "size": page,
            "sort": [{"parked_at": "asc"}, {"post_id": "asc"}],
            "seq_no_primary_term": True,
        }
        if after:
            body["search_after"] = after
        hits = client.search(index=PARKED_INDEX, body=body)["hits"]["hits"]
        if not hits:
            return
        for hit in hits:
            s = hit["_source"]
            yield ParkedPost(
                index=s["index"],
                post_id=s["post_id"],
                task=s["task"],
                error=s["error"],
                model_version=s["model_version"],
                payload=s.get("payload"),
                parked_at=int(s["parked_at"]),
                seq_no=hit.get("_seq_no", -1),
                primary_term=hit.get("_primary_term", -1),
                record_id=hit["_id"],
            )
        after = hits[-1]["sort"]


def forget_parked(client: OpenSearch, records: list[ParkedPost]) -> int:
    """Delete records that were replayed, unless they changed since they were read (parked again)."""
    deleted = 0
    for r in records:
        try:
            client.delete(
                index=PARKED_INDEX,
                id=r.record_id or parked_id(r.index, r.post_id),  # records of older semdups have other ids
                if_seq_no=r.seq_no,
                if_primary_term=r.primary_term,
            )
            deleted += 1
        except OpenSearchRefused as exc:
            if exc.status not in (404, 409):
                raise
            continue  # parked again meanwhile (409), or already gone (404): keep the newer record
    client.indices.refresh(index=PARKED_INDEX)
    return deleted
