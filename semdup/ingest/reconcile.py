"""Freshness of a companion: which posts of the site's index semdup must (re-)encode or remove, whatever wrote them.

The site writes, edits (partial updates or a full reindex) and deletes posts without telling semdup. This compares
the two sides by content hash: one scroll over the site's index reading only the title and body fields, one over
the companion reading only ``semdup.content_hash`` / ``model`` / ``structures`` as doc values. A post is stale when
the companion lacks it, holds another model's vectors, lacks a search structure the companion now maps (``enable
--sparse`` after a first enable), or holds the hash of other text; an id only the companion has was deleted.

It keeps no checkpoint: each run asks both indices, so a crash loses nothing and a run repeated enqueues only what
is still stale. Memory is one short hash per post (about 100 bytes each in Python: 100 MB for a million posts).
``semdup backfill`` runs it once, ``semdup watch`` every ``--interval`` seconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from semdup.core.errors import OpenSearchUnavailable
from semdup.core.task_names import SYNC_POSTS
from semdup.index_format.companion import SourceFields, companion_for, source_post
from semdup.index_format.documents import content_hash
from semdup.index_format.mapping import candidate_fields
from semdup.ingest import celery_app
from semdup.ingest.jobs import BATCH, batches, submit
from semdup.ingest.outcomes import Job
from semdup.ingest.sweeper import Sweeper
from semdup.opensearch_io.boundary import OpenSearch, scan

__all__ = ["SyncPlan", "plan_sync", "enqueue_sync", "watch"]

logger = logging.getLogger(__name__)

_PAGE = 1000
_SCROLL = "5m"
_SCROLL_TIMEOUT = 60.0  # each page of the scan over a whole site index: a long read, as in backfill


@dataclass
class SyncPlan:
    """Ids to (re-)encode, ids to remove, and how many posts were already current."""

    stale: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    current: int = 0

    @property
    def ids(self) -> list[str]:
        return self.stale + self.deleted


def _scan(client: OpenSearch, index: str, body: dict[str, Any], what: str) -> Iterator[dict[str, Any]]:
    try:
        yield from scan(client, index=index, query=body, size=_PAGE, scroll=_SCROLL, request_timeout=_SCROLL_TIMEOUT)
    except OpenSearchUnavailable as exc:
        raise exc.advising(
            f"while reading {what}: run it again when it is back (nothing is lost: it resumes from what the indices "
            "hold)"
        ) from exc


def site_hashes(client: OpenSearch, source: SourceFields) -> dict[str, str]:
    """``id -> content hash`` of every post in the site's index (or alias), as the workers would hash it."""
    out: dict[str, str] = {}
    body = {"query": {"match_all": {}}, "_source": [source.title, source.body]}
    for hit in _scan(client, source.index, body, f"the posts of {source.index!r}"):
        post = source_post(str(hit["_id"]), hit.get("_source") or {}, source)
        out[post["id"]] = content_hash(post["title"], post["body"])
    return out


def companion_state(client: OpenSearch, companion: str) -> dict[str, tuple[str | None, str | None, frozenset[str]]]:
    """``id -> (content hash, model, structures)`` of every document in the companion."""
    out: dict[str, tuple[str | None, str | None, frozenset[str]]] = {}
    body = {
        "query": {"match_all": {}},
        "_source": False,
        "docvalue_fields": ["semdup.content_hash", "semdup.model", "semdup.structures"],
    }
    for hit in _scan(client, companion, body, f"the companion {companion!r}"):
        got = hit.get("fields") or {}
        h, m = got.get("semdup.content_hash"), got.get("semdup.model")
        structures = frozenset(got.get("semdup.structures") or ())
        out[str(hit["_id"])] = (h[0] if h else None, m[0] if m else None, structures)
    return out


def plan_sync(client: OpenSearch, index: str, version: str, companion: str | None = None) -> SyncPlan:
    """What a sync of the site's ``index`` must do to make its companion for model ``version`` current
    (``companion``: that index instead, e.g. the new one ``semdup upgrade`` fills before it switches the alias)."""
    pinned, source = companion_for(client, index, version)
    companion = companion or pinned
    wanted = set(candidate_fields(client, companion).names())
    site = site_hashes(client, source)
    ours = companion_state(client, companion)
    plan = SyncPlan()
    for doc_id, h in site.items():
        have = ours.get(doc_id)
        if have is None or have[0] != h or have[1] != version or not wanted <= have[2]:
            plan.stale.append(doc_id)
        else:
            plan.current += 1
    plan.deleted = [i for i in ours if i not in site]
    return plan


def enqueue_sync(
    client: OpenSearch, index: str, version: str, *, batch_size: int = BATCH, progress: bool = True
) -> Job:
    """Plan, then submit ``sync_posts`` tasks for every stale or deleted id as one job (total 0: all current)."""
    plan = plan_sync(client, index, version)
    calls = list(batches(SYNC_POSTS, index, plan.ids, [version], batch_size))
    job = submit(client, index, version, calls, label=f"enqueue sync {index}", progress=progress)
    logger.info(
        "job %s: %d stale and %d deleted posts of %s enqueued (%d current)",
        job.id,
        len(plan.stale),
        len(plan.deleted),
        index,
        plan.current,
    )
    return job


def watch(
    client: OpenSearch,
    index: str,
    version: str,
    *,
    interval: float = 30.0,
    rounds: int | None = None,
    on_round: Callable[[Job], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    sweep_after: float | None = None,
) -> None:
    """Sync every ``interval`` seconds (``rounds`` times, or until interrupted): posts the site wrote, edited or
    deleted without calling semdup become current within about one interval plus the encoding time.

    With a ``sweep_after`` bound (seconds) each round also sweeps the unfinished jobs of ``index``
    (:mod:`semdup.ingest.sweeper`: the earlier rounds', and any other's, HTTP syncs included): a batch a worker
    lost is sent again (the next round's plan would enqueue its posts again too, but the lost round's job would never
    finish), and a finished job's ledger is deleted."""
    done = 0
    sweeper = None if sweep_after is None else Sweeper(client, celery_app.app, sweep_after, indices=[index])
    while rounds is None or done < rounds:
        started = time.monotonic()
        try:
            job = enqueue_sync(client, index, version, progress=False)
        except OpenSearchUnavailable as exc:  # the cluster is down: try again next round, lose nothing
            logger.warning("watch %s: %s", index, exc)
        else:
            if on_round is not None:
                on_round(job)
        if sweeper is not None:
            sweeper.sweep()  # says what it could not read: it never raises for an outage
        done += 1
        if rounds is not None and done >= rounds:
            break
        sleep(max(0.0, interval - (time.monotonic() - started)))
