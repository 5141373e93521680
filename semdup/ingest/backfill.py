"""Backfill: find posts whose ``semdup.model`` is missing or not the current bundle's, and enqueue them.

For a site's index connected with ``semdup enable`` the work is the companion's sync instead
(:func:`semdup.ingest.reconcile.enqueue_sync`: new, edited and deleted posts by content hash);
:func:`enqueue_backfill` picks the right one.

Resumable by construction: it keeps no checkpoint of its own, it asks the index what is still missing.
After a crash (of the CLI, a worker, or the cluster) running it again enqueues only what is left, and a
post enqueued twice is written twice with the same content. Its batches go through the job's ledger
(:mod:`semdup.ingest.ledger`) like every job's, so the sweeper sends again one a worker lost.

The ids are listed with a scroll over ``bool.must_not(term semdup.model = version)`` with ``_source``
off, so listing costs little even on a large index.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from semdup.core.errors import OpenSearchUnavailable, SearchIndexError
from semdup.core.index_names import check_index_name
from semdup.core.task_names import BACKFILL_BATCH
from semdup.index_format.companion import companion_of
from semdup.index_format.mapping import candidate_fields, index_model
from semdup.ingest.jobs import BATCH, batches, submit
from semdup.ingest.outcomes import Job
from semdup.opensearch_io.boundary import OpenSearch, scan

__all__ = [
    "pending_query",
    "count_pending",
    "iter_pending_ids",
    "enqueue_backfill",
    "check_backfill_target",
    "index_version",
]

logger = logging.getLogger(__name__)

_SCROLL_TIMEOUT = 60.0  # each page of the scan over a whole index (1,000 hits with their fields): a long read


def pending_query(version: str, structures: Sequence[str] = ()) -> dict[str, Any]:
    """Posts not yet holding ``version``'s fields (missing ``semdup.model`` or another value), or lacking one of
    the search ``structures`` the index maps now (added by ``enable --sparse/--knn`` after they were written)."""
    should: list[dict[str, Any]] = [{"bool": {"must_not": [{"term": {"semdup.model": version}}]}}]
    should += [{"bool": {"must_not": [{"term": {"semdup.structures": name}}]}} for name in structures]
    if len(should) == 1:
        return should[0]
    return {"bool": {"should": should, "minimum_should_match": 1}}


def check_backfill_target(client: OpenSearch, index: str, version: str) -> None:
    """Refuse early, before enqueueing anything, when the index cannot take this model's fields.

    Raises:
        SearchIndexError: missing index, no ``semdup`` mapping (run ``semdup enable``), or another model's vectors.
    """
    for name, current in index_model(client, index).items():
        if current not in (None, version):
            raise SearchIndexError(
                f"index {name!r} holds vectors of model {current}; backfilling model {version} would mix two "
                "models. Index into a new index behind an alias instead, or run the backfill with bundle "
                f"{current}"
            )
    mapping = client.indices.get_mapping(index=index)
    for name, m in mapping.items():
        if "semdup" not in (m.get("mappings", {}).get("properties") or {}):
            raise SearchIndexError(
                f"index {name!r} has no semdup fields in its mapping; add them first with "
                f"`semdup enable --index {index} --bundle PATH`"
            )


def count_pending(client: OpenSearch, index: str, version: str) -> int:
    """Posts of ``index`` still missing ``version``'s fields, as of the index's last refresh (near real time)."""
    query = pending_query(version, candidate_fields(client, index).names())
    return int(client.count(index=index, body={"query": query})["count"])


def iter_pending_ids(client: OpenSearch, index: str, version: str, page: int = 1000) -> Iterator[str]:
    """Ids of posts still missing ``version``'s fields, streamed with a scroll."""
    query = pending_query(version, candidate_fields(client, index).names())
    try:
        for hit in scan(
            client,
            index=index,
            query={"query": query, "_source": False},
            size=page,
            scroll="5m",
            request_timeout=_SCROLL_TIMEOUT,
        ):
            yield str(hit["_id"])
    except OpenSearchUnavailable as exc:
        advice = f"run the backfill of {index!r} again when it is back (it resumes with what is still missing)"
        raise exc.advising(advice) from exc


def enqueue_backfill(
    client: OpenSearch, index: str, version: str, *, batch_size: int = BATCH, progress: bool = True
) -> Job:
    """Submit ``backfill_batch`` tasks for every pending post as one job (:func:`semdup.ingest.jobs.submit`); its
    total is the number of posts enqueued (0: nothing was left to fill). A site's index connected with ``semdup
    enable`` is synced into its companion instead (:func:`semdup.ingest.reconcile.enqueue_sync`)."""
    check_index_name(index)
    if companion_of(client, index) is not None:
        from semdup.ingest.reconcile import enqueue_sync

        return enqueue_sync(client, index, version, batch_size=batch_size, progress=progress)
    check_backfill_target(client, index, version)
    ids = iter_pending_ids(client, index, version)
    calls = batches(BACKFILL_BATCH, index, ids, [version], batch_size)
    total = count_pending(client, index, version)
    job = submit(client, index, version, calls, total=total, label=f"enqueue backfill {index}", progress=progress)
    logger.info("job %s: enqueued %d posts of %s for backfill with model %s", job.id, job.total, index, version)
    return job


def index_version(client: OpenSearch, index: str) -> str:
    """The model an index (or the companion of a site's index) is claimed for: what a backfill without
    ``--bundle`` fills it with.

    Raises:
        SearchIndexError: no model claimed yet (name the bundle), or several (an alias over indices of two models).
    """
    found = companion_of(client, index)
    target = found[0] if found is not None else index
    models = {m for m in index_model(client, target).values() if m is not None}
    if len(models) != 1:
        what = "no model yet" if not models else f"models {', '.join(sorted(models))}"
        raise SearchIndexError(f"index {target!r} holds {what}; name the bundle to fill it with: --bundle PATH")
    return models.pop()
