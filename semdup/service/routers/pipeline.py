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
  without the title term (a document's title is not told apart from its body).

Every document gets a score (to 9 significant digits); one the index does not hold (``ids``) scores below all the
others. Both endpoints need
a key with the ``search`` scope, in ``X-API-Key`` or as ``Authorization: Bearer`` (what a connector sends).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from semdup.core.posts import Post
from semdup.core.scoring import check_fusion
from semdup.reranker.rewrite import excluded_id, post_of_search, ranked_query
from semdup.service.routers.access import access_for, bind, key_access, searchable, served_index, state
from semdup.service.routers.schemas import (
    NO_QUERY,
    DocumentsResponse,
    RewriteResponse,
    documents_model,
    responses,
    rewrite_model,
)
from semdup.service.settings import ServiceSettings

__all__ = ["REWRITE_PATH", "DOCUMENTS_PATH", "ALL_CANDIDATES", "rewrite", "documents", "router"]

REWRITE_PATH = "/v1/search/rewrite"
DOCUMENTS_PATH = "/v1/rerank/documents"
ALL_CANDIDATES = 10_000  # rank every candidate the sources found (k-candidates per source, a few hundred)


def _served(st: Any, name: str) -> Any:
    """The reranker's resolution of a served index: a missing or unsearchable one is the not-served 404."""
    with searchable(name):
        return st.reranker.indices.resolve(name, st.reranker.settings)


def rewrite(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(key_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """The site's search with semdup's ranking as its query (module doc)."""
    st = state(request)
    name = served_index(st.settings, req.index, allowed)
    resolved = _served(st, name)
    post = post_of_search(req.search, *resolved.text_fields)
    ranked = st.reranker.rank(post, k=ALL_CANDIDATES, exclude_id=excluded_id(req.search), index=name)
    query = ranked_query(req.search, [(c.id, c.score) for c in ranked])
    return {"query": query, "model": st.reranker.version, "index": name, "ranked": len(ranked)}


def documents(
    req: Any, request: Request, allowed: tuple[str, ...] = Depends(key_access), query: NO_QUERY = None
) -> dict[str, Any]:
    """Cohere's rerank shape over post ids or texts (module doc)."""
    st = state(request)
    rr = st.reranker
    if req.documents_are == "ids":
        name = served_index(st.settings, req.index, allowed)
        _served(st, name)
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
