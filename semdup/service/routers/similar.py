"""``GET /v1/similar``: the posts most like a title being typed, for an asker before they post.

    GET /v1/similar?index=travel&title=Visa%20on%20arrival%20in%20Qatar&size=5     X-API-Key: <a search key>

Ranked from the title alone by :class:`semdup.reranker.similar.TitleSearch` (one title encoding, one ``_msearch``
of BM25 and k-NN candidates, fused). The same access rules as ``/v1/rerank``: a key with the ``search`` scope, an
index among the key's (404 otherwise, one answer for "not yours" and "not there"). A missing, empty or over-long
title, or a ``size`` out of 1..50, gets 422. The endpoint is a plain ``def`` (FastAPI's thread pool), and reads the
app's reranker from ``app.state``; its :class:`TitleSearch` is made on the first call and kept there. Each post
carries its ``url`` on the site when ``SEMDUP_POST_URL`` is set.

``GET /examples/ask.html`` (with ``ask.js`` and ``ask.css``, shipped in the package) is an example asking page
that calls ``/v1/similar`` as the title is typed, debounced; it holds no key (the user types one; a site that
puts one in its page puts in a key with the ``search`` scope alone, which only reads) and is served with a strict
Content-Security-Policy (its own script and style only, calls to this origin only).
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response

from semdup.reranker.similar import TitleSearch
from semdup.service.routers.access import access_for, bind, key_access, searchable, served_index, state
from semdup.service.routers.schemas import SimilarQuery, SimilarResponse, responses
from semdup.service.settings import ServiceSettings

__all__ = ["similar", "example", "router", "title_search", "PATH", "EXAMPLES"]

PATH = "/v1/similar"
EXAMPLES = "/examples"
_made = threading.Lock()
_FILES = {
    "ask.html": "text/html; charset=utf-8",
    "ask.js": "text/javascript; charset=utf-8",
    "ask.css": "text/css; charset=utf-8",
}
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
        "form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "max-age=300",
}


def title_search(st: Any) -> TitleSearch:
    """The app's :class:`TitleSearch` (``app.state.similar``), made from ``app.state.reranker`` on first use."""
    found = getattr(st, "similar", None)
    if found is None:
        with _made:
            found = getattr(st, "similar", None)
            if found is None:
                found = st.similar = TitleSearch(st.reranker)
    return found


def similar(
    req: Annotated[SimilarQuery, Query()], request: Request, allowed: tuple[str, ...] = Depends(key_access)
) -> dict[str, Any]:
    """The posts most similar to a title (BM25 and k-NN on the title, fused), best first."""
    st = state(request)
    name = served_index(st.settings, req.index, allowed)
    search = title_search(st)
    with searchable(name):
        found = search.search(req.title, name, req.size)
    template = st.settings.review.post_url
    out = []
    for post in found:
        shown = post.to_json()
        shown["url"] = (
            None if template is None else template.format(id=quote(post.id, safe=""), index=quote(name, safe=""))
        )
        out.append(shown)
    return {"model": search.version, "index": name, "similar": out}


def example(name: str) -> Response:
    """A file of the example asking page (``ask.html``, ``ask.js``, ``ask.css``); 404 for any other name."""
    if name not in _FILES:
        raise HTTPException(404, "no such example file; open /examples/ask.html")
    data = resources.files("semdup.reranker").joinpath("examples", name).read_bytes()
    return Response(data, media_type=_FILES[name], headers=_HEADERS)


def router(settings: ServiceSettings) -> APIRouter:
    """The ``/v1/similar`` router of an app serving ``settings``."""
    out = APIRouter()
    out.add_api_route(
        PATH,
        bind(similar, Annotated[SimilarQuery, Query()], access_for(settings)),
        methods=["GET"],
        response_model=SimilarResponse,
        tags=["similar"],
        responses=responses(401, 403, 404, 409, 422, 429, 500, 503, 504),
    )
    out.add_api_route(EXAMPLES + "/{name}", example, methods=["GET"], include_in_schema=False)
    return out
