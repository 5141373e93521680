"""HTTP ingest endpoints: ``POST /v1/posts``, ``/v1/posts/sync``, ``/v1/posts/delete`` (202 Accepted).

For sites that cannot talk to Celery: each request needs a key with the ``ingest`` scope (a ``search`` key gets
403: it may be in a browser) and is checked like ``/v1/rerank`` otherwise (the same per-key index allow-list and
404, the same error format), and its posts or ids are submitted as one job of the indexer's tasks,
:data:`~semdup.ingest.jobs.BATCH` per task, exactly as ``semdup index-posts`` submits a file
(:func:`semdup.ingest.jobs.submit`): each batch is recorded in the job's ledger before it is published, and the
service's sweeping thread (:class:`semdup.ingest.sweeper.SweepLoop`) sends again a batch a worker lost. 202 means
queued, not written: the workers write (or park) them; the answer's ``job`` can be followed with ``semdup
index-posts --index INDEX --job JOB``. Deleting is a ``POST`` to ``/v1/posts/delete`` rather than ``DELETE
/v1/posts`` with a body, which HTTP gives no meaning and some proxies drop.

``/v1/posts/sync`` is for a site's own index connected with ``semdup enable``: one semdup created gets 409
``NotASiteIndex`` before anything is enqueued (its workers would find no site's index to re-read and park every id).
Without a broker (``SEMDUP_BROKER_URL`` unset) or with ``SEMDUP_INGEST=0`` the endpoints answer 503 saying so;
``/readyz`` does not depend on them. The endpoints read the Celery app they publish through (``app.state.broker``,
None: off) and the reranker (``app.state.reranker``: its model, its client, which holds the job's ledger, and which
index it searches for a site's index) from the app; :func:`router` makes the router of one app.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Request

from semdup.core.errors import BrokerUnavailable, SearchIndexError
from semdup.core.task_names import DELETE_POSTS, INDEX_POSTS, SYNC_POSTS
from semdup.ingest.jobs import batches, submit
from semdup.reranker.reranker import ModelMismatch
from semdup.service.routers.access import access_for, bind, ingest_access, served_index, state
from semdup.service.routers.schemas import (
    NO_QUERY,
    NOT_SERVED,
    RETRY_AFTER_HEADER,
    IngestAccepted,
    IngestErrorResponse,
    ingest_models,
    responses,
)
from semdup.service.settings import INGEST, ServiceSettings

__all__ = ["INGEST_PATHS", "NotASiteIndex", "router", "post_posts", "sync_posts", "delete_posts"]

logger = logging.getLogger(__name__)

INGEST_PATHS = ("/v1/posts", "/v1/posts/sync", "/v1/posts/delete")


class NotASiteIndex(SearchIndexError):
    """``/v1/posts/sync`` named an index semdup created: the workers would find no site's index to re-read the posts
    from and park every id, so the request is refused before anything is enqueued (the service answers 409)."""


def _off_reason(settings: ServiceSettings) -> str:
    if settings.broker is None:
        return (
            "HTTP ingest needs the indexer's Celery broker and this server has none: set SEMDUP_BROKER_URL "
            "(e.g. redis://host:6379/0) and restart `semdup serve`"
        )
    return "HTTP ingest is turned off on this server (SEMDUP_INGEST=0); set SEMDUP_INGEST=1 to turn it on"


def _target(request: Request, requested: str | None, allowed: tuple[str, ...]) -> tuple[str, Any]:
    """The index (checked exactly as ``/v1/rerank`` checks it) and the app's state, or 503 when ingest is off."""
    st = state(request)
    name = served_index(st.settings, requested, allowed)
    if st.broker is None or not st.settings.ingest:
        raise BrokerUnavailable(_off_reason(st.settings))
    return name, st


def _submit(st: Any, index: str, task: str, items: list[Any], extra: list[Any]) -> dict[str, Any]:
    """``items`` as one job of ``task`` batches (:func:`semdup.ingest.jobs.submit`), and the 202 answer."""
    version = st.reranker.version
    job = submit(st.reranker.client, index, version, list(batches(task, index, items, extra)), app=st.broker)
    model = None if task == DELETE_POSTS else version
    return {
        "index": index,
        "task": task.rsplit(".", 1)[-1],
        "model": model,
        "enqueued": job.total,
        "tasks": job.batches,
        "job": job.id,
    }


def post_posts(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(ingest_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """Enqueue new or edited posts (``index_posts``) for an index semdup created; 202 once they are queued."""
    name, st = _target(request, req.index, allowed)
    return _submit(st, name, INDEX_POSTS, [p.model_dump() for p in req.posts], [st.reranker.version])


def sync_posts(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(ingest_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """These posts of the site's own index (``semdup enable``) were created, edited or deleted: the workers
    re-read them from it (``sync_posts``), encode and write semdup's side, and remove the deleted ones."""
    name, st = _target(request, req.index, allowed)
    try:
        own = st.reranker.target(name) == name  # looked up on the first sync request, not at start
    except SearchIndexError as exc:
        if isinstance(exc, ModelMismatch):
            raise
        logger.warning("sync for served index %s refused: %s", name, exc)
        raise SearchIndexError(NOT_SERVED.format(name=name)) from exc
    if own:
        raise NotASiteIndex(
            f"index {name!r} is one semdup created, not a site's index connected with `semdup enable`: "
            "/v1/posts/sync re-reads posts from the site's index, which it does not have. Send the posts "
            "themselves to POST /v1/posts"
        )
    return _submit(st, name, SYNC_POSTS, list(dict.fromkeys(req.ids)), [st.reranker.version])


def delete_posts(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(ingest_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """Enqueue the deletion of posts by id (``delete_posts``; an id already gone is harmless)."""
    name, st = _target(request, req.index, allowed)
    return _submit(st, name, DELETE_POSTS, list(dict.fromkeys(req.ids)), [])


def router(settings: ServiceSettings) -> APIRouter:
    """The three ingest endpoints of an app serving ``settings`` (their bodies carry its bounds)."""
    posts_model, ids_model = ingest_models(settings)
    access = access_for(settings, INGEST)
    said = responses(401, 403, 404, 413, 422, 429, 500)
    said[503] = {
        "model": IngestErrorResponse,
        "description": "No broker configured, ingest turned off, or the broker down; after a failure part-way, "
        "enqueued and tasks say how many went out before it (sending the request again is harmless). Or "
        "Overloaded: this worker has SEMDUP_MAX_IN_FLIGHT requests in flight (with Retry-After).",
        "headers": RETRY_AFTER_HEADER,
    }
    sync_said = {**said, **responses(409)}  # an index semdup created, or one of another model
    out = APIRouter()
    for path, endpoint, body in zip(
        INGEST_PATHS, (post_posts, sync_posts, delete_posts), (posts_model, ids_model, ids_model), strict=True
    ):
        out.add_api_route(
            path,
            bind(endpoint, body, access),
            methods=["POST"],
            status_code=202,
            response_model=IngestAccepted,
            tags=["ingest"],
            responses=sync_said if endpoint is sync_posts else said,
        )
    return out
