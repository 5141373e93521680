"""The endpoints an OpenSearch search pipeline (or another engine's reranker) calls: semdup inside ``_search``.

``POST /v1/search/rewrite`` (``{"index", "search"}`` → ``{"query", …}``) is what semdup's pipeline calls
(:mod:`semdup.search_pipeline`): ml-commons' ``ml_inference`` search request processor sends the site's own search
body, semdup ranks the post its full-text clauses hold (:func:`semdup.reranker.rewrite.post_of_search`) exactly as
``/v1/rerank`` does, and answers a query that ranks the site's index that way
(:func:`semdup.reranker.rewrite.ranked_query`); the processor puts it in place of the site's query.

``POST /v1/rerank/documents`` speaks Cohere's rerank shape (``{query, documents, top_n}`` →
``{results: [{index, relevance_score}]}``), what ml-commons' ``connector.pre_process.cohere.rerank`` /
``post_process.cohere.rerank`` functions and Elasticsearch's ``custom`` rerank inference endpoint send and read:

* ``documents_are: "ids"``: each document is a post id of the index, scored from the companion's stored fields
  (the rerank's fused score restricted to those posts: no candidate is encoded). The query text is the post's
  title (one text is all the shape carries; its title term is then the query's);
* ``documents_are: "texts"`` (the default): each document is a post's text, encoded here and scored by the
  bundle's fusion without its lexical term (a list of texts has no index statistics to score BM25 with) and
  without the title term (a document's title is not told apart from its body). Encoding up to ``max_k`` texts
  of up to a MiB costs seconds of CPU (100 texts of 9 kB: 3.9 s, issue #45), where ``/v1/rerank`` encodes one
  post: texts mode needs a key that also holds the ``ingest`` scope (the back end's, which already makes the
  workers encode), never a ``search`` key alone, the one that may sit in a browser. ``ids`` mode encodes nothing
  and takes a ``search`` key.

Every document gets a score (to 9 significant digits); one the index does not hold (``ids``) scores below all the
others. Both endpoints need
a key with the ``search`` scope, in ``X-API-Key`` or as ``Authorization: Bearer`` (what a connector sends).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request

from semdup.core.errors import OpenSearchError, PostError
from semdup.core.post_rules import text_problem
from semdup.core.posts import Post
from semdup.core.scoring import check_fusion
from semdup.reranker import onehop
from semdup.reranker.rewrite import (
    DEFAULT_MAX_CLAUSES,
    candidate_room,
    check_encodable,
    excluded_id,
    post_of_search,
    ranked_query,
)
from semdup.service.routers.access import (
    access_for,
    bind,
    key_access,
    require_scope,
    searchable,
    served_index,
    state,
)
from semdup.service.routers.schemas import (
    NO_QUERY,
    DocumentsResponse,
    RewriteResponse,
    documents_model,
    responses,
    rewrite_model,
)
from semdup.service.settings import INGEST, ServiceSettings

__all__ = ["REWRITE_PATH", "DOCUMENTS_PATH", "ALL_CANDIDATES", "MAX_CLAUSES_SETTING", "max_clauses", "rewrite",
           "documents", "router"]  # fmt: skip

logger = logging.getLogger(__name__)

REWRITE_PATH = "/v1/search/rewrite"
DOCUMENTS_PATH = "/v1/rerank/documents"
ALL_CANDIDATES = 10_000  # rank every candidate the sources found (k-candidates per source, a few hundred)
MAX_CLAUSES_SETTING = "indices.query.bool.max_clause_count"
CLAUSES_TTL_S = 300.0  # the setting is dynamic: read again after this long


def _served(st: Any, name: str) -> Any:
    """The reranker's resolution of a served index: a missing or unsearchable one is the not-served 404."""
    with searchable(name):
        return st.reranker.indices.resolve(name, st.reranker.settings)


def _every_ttl(st: Any, attr: str, read: Callable[[Any], Any]) -> Any:
    """A cluster fact kept on the app state as ``attr``, read again (``read(the value before, or None)``) once
    every :data:`CLAUSES_TTL_S`: both facts the rewrite reads can change while the service runs."""
    cached = getattr(st, attr, None)
    if cached is not None and cached[1] > time.monotonic():
        return cached[0]
    value = read(None if cached is None else cached[0])
    setattr(st, attr, (value, time.monotonic() + CLAUSES_TTL_S))
    return value


def _fused_script(st: Any) -> bool:
    """Whether the cluster holds the one-hop query's fused script (:func:`_every_ttl`); said once in the log when it
    does not (the service then answers the candidate query)."""

    def read(before: bool | None) -> bool:
        ready = onehop.script_ready(st.reranker.client, st.reranker.settings.search_timeout)
        if not ready and before is not False:  # first read, or stored before and gone since
            logger.warning("the cluster lacks semdup's fused script; the pipeline gets the candidate query until it "
                           "is stored (`semdup enable`, or a user with cluster:admin/script/put starting the service)")
        return ready

    return bool(_every_ttl(st, "fused_script", read))


def max_clauses(st: Any) -> int:
    """The cluster's ``indices.query.bool.max_clause_count`` (the smallest of its transient, persistent and default
    values), read once every :data:`CLAUSES_TTL_S` (:func:`_every_ttl`); the OpenSearch default when the service
    may not read the cluster's settings."""

    def read(_: int | None) -> int:
        try:
            got = st.reranker.client.cluster.get_settings(params={
                "include_defaults": "true", "filter_path": f"*.{MAX_CLAUSES_SETTING}",  # nested: flat keys hold dots
                "request_timeout": st.reranker.settings.search_timeout})  # fmt: skip
            values = []
            for part in got.values():  # persistent, transient, defaults
                for key in MAX_CLAUSES_SETTING.split("."):
                    part = part.get(key) if isinstance(part, dict) else None
                if part is not None:
                    values.append(int(part))
            return min(values) if values else DEFAULT_MAX_CLAUSES
        except (OpenSearchError, ValueError) as exc:
            logger.warning("could not read %s (%s); the rewrite assumes %d", MAX_CLAUSES_SETTING, exc,
                           DEFAULT_MAX_CLAUSES)  # fmt: skip
            return DEFAULT_MAX_CLAUSES

    return int(_every_ttl(st, "max_clauses", read))


def rewrite(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(key_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """The site's search with semdup's ranking as its query (module doc)."""
    st = state(request)
    name = served_index(st.settings, req.index, allowed)
    check_encodable(req.search)
    resolved = _served(st, name)
    post = post_of_search(req.search, *resolved.text_fields)
    for field, text in (("title", post.title), ("body", post.body)):  # the limits /v1/rerank's schema applies
        if (problem := text_problem(f"the search's {field}", text, st.settings.max_text_chars)) is not None:
            raise PostError(problem)
    if onehop.serves(resolved, st.reranker.bundle.dimension is not None) and _fused_script(st):
        answer = onehop.rewrite(st.reranker, req.search, post, resolved, name)
        return {"query": answer.query, "model": st.reranker.version, "index": name, "ranked": answer.lexical,
                "mode": "one-hop"}  # fmt: skip
    room = candidate_room(req.search, resolved.text_fields, name, max_clauses(st))
    ranked = st.reranker.rank(post, k=ALL_CANDIDATES, exclude_id=excluded_id(req.search), index=name)[:room]
    query = ranked_query(req.search, [(c.id, c.score) for c in ranked], resolved.text_fields, index=name,
                         max_clauses=max_clauses(st))  # fmt: skip
    return {"query": query, "model": st.reranker.version, "index": name, "ranked": len(ranked), "mode": "candidates"}


def documents(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(key_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """Cohere's rerank shape over post ids or texts (module doc)."""
    st = state(request)
    rr = st.reranker
    name = served_index(st.settings, req.index, allowed)  # texts too: a missing or foreign index is the 404
    if req.documents_are == "texts":  # refused before anything else is asked of the cluster
        require_scope(request, INGEST, "documents_are: texts (every document encoded here)")
    _served(st, name)
    if req.documents_are == "ids":
        ids = [d for d in dict.fromkeys(req.documents) if d.strip()]  # an empty id (a hit without it) scores last
        found = {c.id: c.score for c in rr.rank(Post("_query", req.query, ""), k=len(ids), restrict_ids=ids,
                                                 index=name)} if ids else {}  # fmt: skip
        scores = [found.get(doc) for doc in req.documents]
    else:
        from semdup.bundle.scorer import BundleScorer

        posts = [Post(str(i), "", text) for i, text in enumerate(req.documents)]
        scorer = BundleScorer(rr.bundle)
        scorer.fusion = check_fusion({**rr.fusion, "alpha": 0.0, "beta_title": 0.0})
        scores = scorer.score(Post("_query", req.query, ""), posts).tolist()
    known = [s for s in scores if s is not None]
    floor = (min(known) if known else 0.0) - 1.0
    # 9 significant digits (a float32's): ml-commons' Cohere post-processing reads longer decimals as BigDecimal and
    # fails to cast them; the rerank processor keeps the scores as float32 hit scores anyway
    results = [{"index": i, "relevance_score": float(f"{s if s is not None else floor:.9g}")}
               for i, s in enumerate(scores)]
    results.sort(key=lambda r: -r["relevance_score"])
    return {"results": results[: req.top_n] if req.top_n else results, "model": rr.version}


def router(settings: ServiceSettings) -> APIRouter:
    """The pipeline endpoints of an app serving ``settings``."""
    out = APIRouter()
    errors = responses(401, 403, 404, 409, 413, 422, 429, 500, 503, 504)
    out.add_api_route(REWRITE_PATH, bind(rewrite, rewrite_model(settings), access_for(settings)), methods=["POST"],
                      response_model=RewriteResponse, tags=["pipeline"], responses=errors)  # fmt: skip
    out.add_api_route(DOCUMENTS_PATH, bind(documents, documents_model(settings), access_for(settings)),
                      methods=["POST"], response_model=DocumentsResponse, tags=["pipeline"],
                      responses=errors)  # fmt: skip
    return out
