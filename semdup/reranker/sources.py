"""Candidate sources: where a query's candidates come from, each building its own request and parsing its hits.

    sources = (TemplateSource("bm25"), KnnSource())
    found = search(client, "travel", sources, SourceQuery(text, size=100, vector=v), timeout=5.0)
    candidates = merge(found, primary="bm25")

pyserini's hybrid searcher is the model: every source answers the same query, and fusion is a separate step
(:mod:`semdup.reranker.fusion`). Three sources:

* :class:`TemplateSource`: a stored lexical template (BM25, LMJ, DFR, IB …, :mod:`semdup.search_templates`), asked
  through ``_msearch/template``; the first one's scores are the lexical scores T-SCQA's lexnorm reads;
* :class:`SparseSource`: learned-sparse, a ``bool`` ``should`` of ``rank_feature`` clauses on
  ``semdup.terms.<feature>`` (``linear``, boost = the query's own weight): the dot product cos_bow inside OpenSearch;
* :class:`KnnSource`: ``knn`` on ``semdup.vector`` with the query's dense vector.

The last two need the query's encoding (``needs_encoding``) and are plain search bodies. :func:`search` sends the
sources it is given as one request: template calls as one ``_msearch/template``, bodies as one ``_msearch``, and a
lone body, when the caller wants the lexical score of its hits, as one ``_search`` whose hits carry it as a named
query (:func:`with_lexical_score`): the candidates only k-NN found need no second request for it. Every source
asks its hits to carry the candidate's packed fields (:data:`~semdup.reranker.stored_fields.DOCVALUE_FIELDS`), so
the fusion needs no fetch. :func:`merge` joins the sources' hits without duplicates, in round-robin rank order.
:func:`search_in_background` runs a search on a pool thread (the reranker's lexical search, while the query is
encoded).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from semdup.core.errors import OpenSearchRefused, SearchIndexError, SemdupError
from semdup.core.opensearch import error_reason
from semdup.reranker.stored_fields import DOCVALUE_FIELDS, hit_fields
from semdup.search_templates import template_id, template_params

__all__ = [
    "LEXICAL_QUERY_NAME",
    "MAX_SPARSE_TERMS",
    "CandidateSource",
    "Candidates",
    "Hit",
    "KnnSource",
    "NamedScoresUnsupported",
    "SourceQuery",
    "SparseSource",
    "TemplateSource",
    "knn_query",
    "lexical_scores",
    "merge",
    "parse_hits",
    "search",
    "search_in_background",
    "sparse_query",
    "with_lexical_score",
]

# The bool query's clause limit is 1024 by default; the heaviest query terms carry the dot product.
MAX_SPARSE_TERMS = 512
# the named query that carries the first template's score on sparse / k-NN hits (with_lexical_score)
LEXICAL_QUERY_NAME = "semdup-lexical"
_BACKGROUND_THREADS = 64  # searches in flight while queries are encoded (threads start on demand)
_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own


class NamedScoresUnsupported(SemdupError):
    """The cluster answers named queries without their scores (OpenSearch before 2.13): the lexical scores of
    sparse / k-NN candidates take their own request (:func:`lexical_scores`)."""


@dataclass(frozen=True)
class SourceQuery:
    """What every source of one query reads.

    Attributes:
        text: the query text (``query_text(title, body)``; the title alone for the ``title`` variant).
        size: hits per source.
        exclude_id: a post never to return (the query's own).
        restrict_ids: search only these posts.
        vector: the query's unit dense vector (k-NN), None before the encoding or without a dense encoder.
        terms: the query's learned BOW weights (learned-sparse), None likewise.
    """

    text: str
    size: int
    exclude_id: str | None = None
    restrict_ids: tuple[str, ...] | None = None
    vector: np.ndarray | None = None
    terms: Mapping[str, float] | None = None

    def filters(self) -> dict[str, Any]:
        """The ``bool`` clauses of the restriction and the exclusion (empty when neither is set)."""
        clause: dict[str, Any] = {}
        if self.restrict_ids is not None:
            clause["filter"] = [{"ids": {"values": list(self.restrict_ids)}}]
        if self.exclude_id is not None:
            clause["must_not"] = [{"ids": {"values": [self.exclude_id]}}]
        return clause


@dataclass(frozen=True, slots=True)
class Hit:
    """One hit of one source: the post id, the source's score, and what the hit carried besides.

    Attributes:
        fields: the candidate's semdup fields decoded from its doc values (None: the hit carried none).
        lexical: the first template's score of the candidate from the named query (0.0: it did not match; None:
            not asked).
        title: the post's title from ``_source`` (None: not asked, or absent).
    """

    id: str
    score: float
    fields: dict[str, Any] | None = None
    lexical: float | None = None
    title: str | None = None


class CandidateSource(Protocol):
    """A source of candidates (module doc): its name (in each candidate's ``sources``), whether it needs the
    query's encoding, whether its request is a stored-template call, the request itself, and its hits."""

    name: str
    needs_encoding: bool
    template: bool

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        """The request line of an ``_msearch`` (``_msearch/template`` for a template call); None: nothing to ask
        (a k-NN source without a vector)."""

    def hits(self, response: Mapping[str, Any], index: str) -> list[Hit]:
        """This source's hits in ``response`` (its part of the answer), best first."""


def parse_hits(response: Mapping[str, Any], index: str, what: str) -> list[Hit]:
    """The hits of one response of an ``_msearch`` or ``_search``, each with what it carried."""
    if "error" in response:
        err = response["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"the {what} candidate search on {index!r} failed: {error_reason(err)}")
    out = []
    for h in response["hits"]["hits"]:
        matched, lexical = h.get("matched_queries"), None
        if isinstance(matched, Mapping):
            lexical = float(matched.get(LEXICAL_QUERY_NAME, 0.0))
        elif isinstance(matched, list):  # names without scores: the cluster ignored include_named_queries_score
            raise NamedScoresUnsupported(f"the cluster behind {index!r} returns named queries without scores")
        title = (h.get("_source") or {}).get("title")
        out.append(Hit(str(h["_id"]), float(h["_score"]), hit_fields(h), lexical,
                       title if isinstance(title, str) else None))  # fmt: skip
    return out


@dataclass(frozen=True)
class TemplateSource:
    """A stored lexical template (``semdup-<model>-<variant>``); ``docvalues`` False: ids and scores only."""

    model: str = "bm25"
    variant: str = "text"
    docvalues: bool = True
    needs_encoding = False
    template = True

    @property
    def name(self) -> str:
        return self.model

    def request(self, query: SourceQuery) -> dict[str, Any]:
        ids = list(query.restrict_ids) if query.restrict_ids is not None else None
        dv = list(DOCVALUE_FIELDS) if self.docvalues else None
        params = template_params(query.text, size=query.size, exclude_id=query.exclude_id, ids=ids, docvalue_fields=dv)
        return {"id": template_id(self.model, self.variant), "params": params}

    def hits(self, response: Mapping[str, Any], index: str) -> list[Hit]:
        return parse_hits(response, index, self.model)


def sparse_query(terms: Mapping[str, float], query: SourceQuery) -> dict[str, Any]:
    """A search body whose score is Σ_w q_w·d_w over ``semdup.terms`` (cos_bow when both sides are unit vectors).

    ``rank_feature`` with ``linear`` scores d_w; the clause boost multiplies it by the query's weight q_w
    (DESIGN.md, index schema). Only the ``MAX_SPARSE_TERMS`` heaviest query terms are kept.

    Example::

        >>> sparse_query({"mount": 0.8, "usb": 0.6}, SourceQuery("", 5))["query"]["bool"]["should"][0]
        {'rank_feature': {'field': 'semdup.terms.mount', 'linear': {}, 'boost': 0.8}}
    """
    top = sorted(terms.items(), key=lambda kv: -kv[1])[:MAX_SPARSE_TERMS]
    should = [{"rank_feature": {"field": f"semdup.terms.{name}", "linear": {}, "boost": float(w)}} for name, w in top]
    bool_q = {"should": should, "minimum_should_match": 1, **query.filters()}
    body = {"size": int(query.size), "_source": False, "track_total_hits": False, "query": {"bool": bool_q}}
    return {**body, "docvalue_fields": list(DOCVALUE_FIELDS)}


def knn_query(vector: Sequence[float], query: SourceQuery, source: Sequence[str] = ()) -> dict[str, Any]:
    """A ``knn`` search on ``semdup.vector`` (lucene engine, cosinesimil; the filter is applied during the search),
    its hits with ``source`` from ``_source`` (none by default).

    ``ef_search`` is 2·k: the graph is built with ef_construction 32
    (:data:`semdup.index_format.schema.HNSW_PARAMETERS`), and the wider search beam keeps the recall of the
    plugin's default build at about the same query cost.
    """
    knn: dict[str, Any] = {
        "vector": [float(x) for x in vector],
        "k": int(query.size),
        "method_parameters": {"ef_search": 2 * int(query.size)},
    }
    flt = query.filters()
    if flt:
        knn["filter"] = {"bool": flt}
    return {
        "size": int(query.size),
        "_source": list(source) if source else False,
        "track_total_hits": False,
        "query": {"knn": {"semdup.vector": knn}},
        "docvalue_fields": list(DOCVALUE_FIELDS),
    }


@dataclass(frozen=True)
class SparseSource:
    """Learned-sparse candidates: the ``rank_feature`` dot product with the query's BOW weights."""

    name = "sparse"
    needs_encoding = True
    template = False

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        return sparse_query(query.terms, query) if query.terms else None

    def hits(self, response: Mapping[str, Any], index: str) -> list[Hit]:
        return parse_hits(response, index, self.name)


@dataclass(frozen=True)
class KnnSource:
    """k-NN candidates on ``semdup.vector``; ``source``: the ``_source`` fields each hit carries."""

    source: tuple[str, ...] = ()
    name = "knn"
    needs_encoding = True
    template = False

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        return None if query.vector is None else knn_query(query.vector, query, self.source)

    def hits(self, response: Mapping[str, Any], index: str) -> list[Hit]:
        return parse_hits(response, index, self.name)


def with_lexical_score(body: dict[str, Any], field: str, text: str) -> dict[str, Any]:
    """``body`` whose hits also carry the first template's score as the named-query score
    :data:`LEXICAL_QUERY_NAME`, their ranking unchanged (run with ``_search?include_named_queries_score=true``,
    OpenSearch ≥ 2.13; ``_msearch`` refuses the parameter and ``_search/template`` answers NaN).

    The template's score of a candidate is its ``match`` clause's score (the ``bool`` around it adds only
    filters), so the same ``match``, named, reports exactly that float for every hit it matches. It sits in a
    ``post_filter`` that also matches everything: the query, its hits and their scores stay the sparse / k-NN
    query's own (inside the query, even with boost 0, it changes which k-NN neighbours come back).
    """
    named = {"match": {field: {"query": text, "_name": LEXICAL_QUERY_NAME}}}
    return {**body, "post_filter": {"bool": {"should": [named, {"match_all": {}}]}}}


def search(
    client: Any,
    index: str,
    sources: Sequence[CandidateSource],
    query: SourceQuery,
    timeout: float,
    lexical_field: str | None = None,
) -> list[tuple[str, list[Hit]]]:
    """Ask ``sources`` in one request: ``(source name, its hits)`` for each source that had something to ask.

    Args:
        sources: all template calls, or all search bodies (one request cannot hold both).
        lexical_field: the first template's match field; with it, a lone search body goes as one ``_search`` whose
            hits carry their lexical score (:func:`with_lexical_score`).

    Raises:
        NamedScoresUnsupported: ``lexical_field`` on a cluster without ``include_named_queries_score``.
        SearchTimeout / OpenSearchUnavailable / OpenSearchMissing / OpenSearchRefused: from the client
            (:mod:`semdup.core.opensearch`).
    """
    asked = [(s, r) for s in sources if (r := s.request(query)) is not None]
    if not asked:
        return []
    if len({s.template for s, _ in asked}) > 1:
        raise ValueError("one request holds stored-template calls or search bodies, not both")
    named = lexical_field is not None and len(asked) == 1 and not asked[0][0].template
    params: dict[str, Any] = {"request_timeout": timeout}
    if named:  # one _search: _msearch refuses include_named_queries_score
        params["include_named_queries_score"] = "true"
        body = with_lexical_score(asked[0][1], lexical_field, query.text)
        call, args = client.search, {"index": index, "body": body}
    else:
        call = client.msearch_template if asked[0][0].template else client.msearch
        args = {"body": [line for _, request in asked for line in ({"index": index}, request)]}
    try:
        resp = call(params=params, **args)
    except OpenSearchRefused as exc:
        if named and exc.status == 400 and "include_named_queries_score" in exc.reason:
            raise NamedScoresUnsupported(f"the cluster behind {index!r} has no include_named_queries_score") from exc
        if exc.status == 400 and "no requests added" in exc.reason:  # a template whose stored script is missing
            raise SemdupError(
                f"the cluster lacks the stored search templates {', '.join(r['id'] for _, r in asked)}; store them "
                "once as a user allowed cluster:admin/script/put (`semdup enable`, or the reranker itself when its "
                "user may)"
            ) from exc
        raise
    if named:  # a hit the named query did not match carries no matched_queries at all: its lexical score is 0
        source = asked[0][0]
        hits = source.hits(resp, index)
        return [(source.name, [h if h.lexical is not None else replace(h, lexical=0.0) for h in hits])]
    return [(s.name, s.hits(r, index)) for (s, _), r in zip(asked, resp["responses"], strict=True)]


def _background() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            pool = ThreadPoolExecutor(max_workers=_BACKGROUND_THREADS, thread_name_prefix="semdup-search")
            _pool = (os.getpid(), pool)
        return _pool[1]


def search_in_background(
    client: Any, index: str, sources: Sequence[CandidateSource], query: SourceQuery, timeout: float
) -> Future[list[tuple[str, list[Hit]]]]:
    """:func:`search` on a pool thread (one pool per process: onnxruntime and the wait for OpenSearch both release
    the GIL, so a search runs while the calling thread encodes)."""
    return _background().submit(search, client, index, sources, query, timeout)


def lexical_scores(
    client: Any, index: str, text: str, ids: Sequence[str], *, model: str, variant: str, timeout: float
) -> dict[str, float]:
    """The template ``model``'s score of given posts (those other sources found); no match = absent."""
    if not ids:
        return {}
    source = TemplateSource(model, variant, docvalues=False)
    found = search(client, index, [source], SourceQuery(text, len(ids), restrict_ids=tuple(map(str, ids))), timeout)
    return {h.id: h.score for _, hits in found for h in hits}


@dataclass
class Candidates:
    """The merged candidates of one query (:func:`merge`).

    Attributes:
        ids: in round-robin rank order over the sources, each once.
        lexical: the first template's score where known (its own hits, named scores of the others; 0.0 = no
            match); absent: unknown (found by another source only, not asked).
        sources: id -> the sources that found it.
        fields: id -> the semdup fields its hits carried.
        titles: id -> the title its hits carried.
    """

    ids: list[str] = field(default_factory=list)
    lexical: dict[str, float] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)


def merge(found: Sequence[tuple[str, Sequence[Hit]]], primary: str) -> Candidates:
    """The hits of several sources as one candidate list, without duplicates, in round-robin rank order; the
    ``primary`` source's scores are the lexical scores of its candidates (over named scores of the same posts)."""
    out = Candidates()
    longest = max((len(h) for _, h in found), default=0)
    for rank in range(longest):
        for name, hits in found:
            if rank < len(hits):
                doc_id = hits[rank].id
                if doc_id not in out.sources:
                    out.ids.append(doc_id)
                out.sources.setdefault(doc_id, []).append(name)
    for name, hits in found:
        if name == primary:
            out.lexical.update((h.id, h.score) for h in hits)
    for _, hits in found:
        for h in hits:
            if h.fields is not None:
                out.fields.setdefault(h.id, h.fields)
            if h.lexical is not None:
                out.lexical.setdefault(h.id, h.lexical)
            if h.title is not None:
                out.titles.setdefault(h.id, h.title)
    return out
