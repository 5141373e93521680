"""``POST /v1/rerank``: the top-k duplicate candidates of a new post, with fused scores and decisions.

The endpoint is a plain ``def``: FastAPI runs it in its thread pool (``SEMDUP_THREADS`` threads), so the event loop
never waits on OpenSearch. :func:`router` makes the router of one app (its body model carries the app's bounds);
:func:`rerank` is the endpoint itself.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from semdup.service.routers.access import access_for, bind, key_access, searchable, served_index, state
from semdup.service.routers.schemas import NO_QUERY, RerankResponse, request_model, responses
from semdup.service.settings import ServiceSettings

__all__ = ["rerank", "router", "PATH"]

PATH = "/v1/rerank"


def rerank(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(key_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """Top-k duplicate candidates for a post: fused score, components, probability, decision."""
    from semdup.core.posts import Post

    st = state(request)
    name = served_index(st.settings, req.index, allowed)
    rr = st.reranker
    if req.templates:
        rr = rr.with_settings(templates=tuple(dict.fromkeys(req.templates)))
    post = Post(id=req.exclude_id or "_query", title=req.title, body=req.body)
    with searchable(name):
        cands = rr.rank(post, k=req.k, exclude_id=req.exclude_id, index=name)
        reason = rr.empty_reason(name) if not cands else None
    return {
        "model": rr.version,
        "index": name,
        "threshold": rr.threshold,
        "candidates": [c.to_json() for c in cands],
        "reason": reason,
    }


def router(settings: ServiceSettings) -> APIRouter:
    """The ``/v1/rerank`` router of an app serving ``settings``."""
    out = APIRouter()
    out.add_api_route(
        PATH,
        bind(rerank, request_model(settings), access_for(settings)),
        methods=["POST"],
        response_model=RerankResponse,
        tags=["rerank"],
        responses=responses(401, 403, 404, 409, 413, 422, 429, 500, 503, 504),
    )
    return out
