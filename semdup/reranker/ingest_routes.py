"""HTTP ingest endpoints: ``POST /v1/posts``, ``/v1/posts/sync``, ``/v1/posts/delete`` (202 Accepted).

For sites that cannot talk to Celery: each request is checked like ``/v1/rerank`` (the same ``X-API-Key``
dependency, the same per-key index allow-list and 404, the same error format) and its posts or ids are enqueued
as the indexer's tasks, :data:`~semdup.reranker.ingest.BATCH` per task, through :mod:`semdup.reranker.ingest`.
202 means queued, not written: the workers write (or park) them. Deleting is a ``POST`` to ``/v1/posts/delete``
rather than ``DELETE /v1/posts`` with a body, which HTTP gives no meaning and some proxies drop.

``/v1/posts/sync`` is for a site's own index connected with ``semdup enable``: one semdup created gets 409
``NotASiteIndex`` before anything is enqueued (its workers would find no site's index to re-read and park every id).
Without a broker (``SEMDUP_BROKER_URL`` unset) or with ``SEMDUP_INGEST=0`` the endpoints answer 503 saying so;
``/readyz`` does not depend on them. Registered by :func:`semdup.reranker.service.create_app`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field, model_validator

from semdup.core.errors import BrokerUnavailable, IndexError_
from semdup.core.task_names import DELETE_POSTS, INDEX_POSTS, SYNC_POSTS
from semdup.reranker.ingest import NotASiteIndex, TaskSender, enqueue_batches
from semdup.reranker.post_fields import POST_TEXT_CONFIG, PostId, PostText, check_visible, text_field
from semdup.reranker.reranker import ModelMismatch
from semdup.reranker.service import _NOT_SERVED, MAX_INDEX_CHARS, RETRY_AFTER_HEADER, ErrorBody, _responses
from semdup.reranker.settings import ServiceSettings

__all__ = ["INGEST_PATHS", "add_ingest_routes", "ingest_models", "IngestAccepted", "IngestErrorResponse"]

logger = logging.getLogger(__name__)

INGEST_PATHS = ("/v1/posts", "/v1/posts/sync", "/v1/posts/delete")


class IngestAccepted(BaseModel):
    """What went to the broker: ``enqueued`` posts or ids in ``tasks`` tasks (queued, not yet written)."""

    index: str
    task: str = Field(description="The indexer task enqueued: index_posts, sync_posts or delete_posts.")
    model: str | None = Field(description="The bundle version the workers must run (none for deletes).")
    enqueued: int
    tasks: int


class IngestErrorResponse(BaseModel):
    """The error, and for a broker that failed part-way how many were enqueued before it."""

    error: ErrorBody
    enqueued: int | None = Field(None, description="Posts or ids enqueued before the broker failed (503 only).")
    tasks: int | None = Field(None, description="Tasks enqueued before the broker failed (503 only).")


def ingest_models(settings: ServiceSettings) -> tuple[type[BaseModel], type[BaseModel]]:
    """The request bodies (posts, ids), with this server's bounds in their schema, like ``request_model``."""
    limit, most = settings.max_text_chars, settings.max_ingest_posts
    index_field = Field(
        None,
        min_length=1,
        max_length=MAX_INDEX_CHARS,
        description="One of the indices this API key may use (default: the server's index).",
    )

    class PostIn(BaseModel):
        """A new or edited post: an id and a title or a body (or both) holding visible text, by the rules that
        `semdup index-posts --input` and the workers apply too."""

        model_config = POST_TEXT_CONFIG

        id: PostId
        title: PostText = text_field(limit, "The post's title.")
        body: PostText = text_field(limit, "The post's body (HTML allowed).")

        @model_validator(mode="after")
        def _has_text(self) -> PostIn:
            check_visible(self.title, self.body, self.id)
            return self

    class IngestPosts(BaseModel):
        """Posts to encode and write into an index semdup created (``semdup index-posts``)."""

        model_config = ConfigDict(extra="forbid", strict=True)

        index: str | None = index_field
        posts: list[PostIn] = Field(min_length=1, max_length=most, description=f"1 to {most} posts, ids distinct.")

        @model_validator(mode="after")
        def _distinct(self) -> IngestPosts:
            seen: set[str] = set()
            for post in self.posts:
                if post.id in seen:  # two versions of one post could be written in either order
                    raise ValueError(f"post id {post.id[:80]!r} appears twice; send each post once")
                seen.add(post.id)
            return self

    class IngestIds(BaseModel):
        """Ids of posts; repeated ids are sent once."""

        model_config = ConfigDict(extra="forbid", strict=True)

        index: str | None = index_field
        ids: list[PostId] = Field(min_length=1, max_length=most, description=f"1 to {most} post ids.")

    return IngestPosts, IngestIds


def _off_reason(settings: ServiceSettings) -> str:
    if settings.broker is None:
        return (
            "HTTP ingest needs the indexer's Celery broker and this server has none: set SEMDUP_BROKER_URL "
            "(e.g. redis://host:6379/0) and restart `semdup serve`"
        )
    return "HTTP ingest is turned off on this server (SEMDUP_INGEST=0); set SEMDUP_INGEST=1 to turn it on"


def add_ingest_routes(
    app: FastAPI,
    settings: ServiceSettings,
    access: Callable[..., tuple[str, ...]],
    model_version: str,
    sender: TaskSender | None,
    searched: Callable[[str], str],
) -> None:
    """Register the three endpoints; ``sender`` None answers 503 (no broker, or ingest off). ``searched(index)`` is
    the index semdup searches for ``index`` (the reranker's ``target``: itself when semdup created it, else its
    companion), which tells a site's index that sync applies to from one of semdup's own."""
    posts_model, ids_model = ingest_models(settings)

    def target(requested: str | None, allowed: tuple[str, ...]) -> tuple[str, TaskSender]:
        """The index, checked exactly as ``/v1/rerank`` checks it, and the sender (or 503)."""
        name = requested or settings.default_index(allowed)
        if name not in allowed:  # exact names only: no pattern, alias or other index reaches a task
            raise IndexError_(_NOT_SERVED.format(name=name[:MAX_INDEX_CHARS]))
        if sender is None or not settings.ingest:
            raise BrokerUnavailable(_off_reason(settings))
        return name, sender

    def post_posts(req: Any, allowed: tuple[str, ...] = Depends(access)) -> dict[str, Any]:
        """Enqueue new or edited posts (``index_posts``) for an index semdup created; 202 once they are queued."""
        name, to = target(req.index, allowed)
        done = enqueue_batches(to, INDEX_POSTS, name, [p.model_dump() for p in req.posts], [model_version])
        return _answer(name, INDEX_POSTS, model_version, done.items, done.tasks)

    def sync_posts(req: Any, allowed: tuple[str, ...] = Depends(access)) -> dict[str, Any]:
        """These posts of the site's own index (``semdup enable``) were created, edited or deleted: the workers
        re-read them from it (``sync_posts``), encode and write semdup's side, and remove the deleted ones."""
        name, to = target(req.index, allowed)
        try:
            own = searched(name) == name
        except IndexError_ as exc:
            if isinstance(exc, ModelMismatch):
                raise
            logger.warning("sync for served index %s refused: %s", name, exc)
            raise IndexError_(_NOT_SERVED.format(name=name)) from exc
        if own:
            raise NotASiteIndex(
                f"index {name!r} is one semdup created, not a site's index connected with `semdup enable`: "
                "/v1/posts/sync re-reads posts from the site's index, which it does not have. Send the posts "
                "themselves to POST /v1/posts"
            )
        done = enqueue_batches(to, SYNC_POSTS, name, list(dict.fromkeys(req.ids)), [model_version])
        return _answer(name, SYNC_POSTS, model_version, done.items, done.tasks)

    def delete_posts(req: Any, allowed: tuple[str, ...] = Depends(access)) -> dict[str, Any]:
        """Enqueue the deletion of posts by id (``delete_posts``; an id already gone is harmless)."""
        name, to = target(req.index, allowed)
        done = enqueue_batches(to, DELETE_POSTS, name, list(dict.fromkeys(req.ids)))
        return _answer(name, DELETE_POSTS, None, done.items, done.tasks)

    post_posts.__annotations__["req"] = posts_model  # classes built here: not names FastAPI could look up
    sync_posts.__annotations__["req"] = ids_model
    delete_posts.__annotations__["req"] = ids_model
    responses = _responses(401, 404, 413, 422, 500)
    responses[503] = {
        "model": IngestErrorResponse,
        "description": "No broker configured, ingest turned off, or the broker down; after a failure part-way, "
        "enqueued and tasks say how many went out before it (sending the request again is harmless). Or "
        "Overloaded: this worker has SEMDUP_MAX_IN_FLIGHT requests in flight (with Retry-After).",
        "headers": RETRY_AFTER_HEADER,
    }
    sync_responses = {**responses, **_responses(409)}  # an index semdup created, or one of another model
    for path, endpoint in zip(INGEST_PATHS, (post_posts, sync_posts, delete_posts), strict=True):
        said = sync_responses if endpoint is sync_posts else responses
        app.post(path, status_code=202, response_model=IngestAccepted, tags=["ingest"], responses=said)(endpoint)


def _answer(index: str, task: str, model: str | None, enqueued: int, tasks: int) -> dict[str, Any]:
    return {"index": index, "task": task.rsplit(".", 1)[-1], "model": model, "enqueued": enqueued, "tasks": tasks}
