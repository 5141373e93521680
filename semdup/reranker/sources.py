"""Candidate sources: where a query's candidates come from, each building its own request and parsing its hits.

    sources = (TemplateSource("bm25"), KnnSource())
    found = search(client, "travel", sources, SourceQuery(text, size=100, vector=v, components=p), timeout=5.0)
    candidates = merge(found, primary="bm25")

pyserini's hybrid searcher is the model: every source answers the same query, and fusion is a separate step
(:mod:`semdup.reranker.fusion`). The sources:

* :class:`TemplateSource`: a lexical template (BM25, LMJ, DFR, IB …, :mod:`semdup.search_templates`: the body its
  stored template renders, built here); the first one's scores are the lexical scores T-SCQA's lexnorm reads;
* :class:`SparseSource`: learned-sparse, a ``bool`` ``should`` of ``rank_feature`` clauses on
  ``semdup.terms.<feature>`` (``linear``, boost = the query's own weight): the dot product cos_bow inside OpenSearch;
* :class:`KnnSource`: ``knn`` on ``semdup.vector`` with the query's dense vector;
* :class:`RestrictSource`: exactly the posts a caller names (SemEval's ten candidates), so each carries its
  components even when no other source found it.

Scores are computed where the data is. With ``SourceQuery.components`` (the query's encoding as the parameters of
the stored components script, :mod:`semdup.search_templates.components`) every hit carries the fusion's three
cosines as a script field, and nothing else: no packed fields cross the wire. The vector sources' hits also carry
the first template's score, by a ``rescore`` with its ``match`` clause (``query_weight`` 0: the score is exactly
the template's, 0 where it does not match; the candidates stay the source's own, chosen before the rescore).
:func:`search` sends every source of a query as one plain ``_msearch``: one round trip after the encoding, and
nothing for the cluster to render or compile.
:func:`merge` joins the sources' hits without duplicates, in round-robin rank order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from semdup.core.errors import SearchIndexError, SemdupError
from semdup.index_format.schema import feature_name
from semdup.opensearch_io.boundary import error_reason
from semdup.search_templates import template_body, template_params
from semdup.search_templates.components import COMPONENTS_FIELD, script_fields

__all__ = [
    "DFS",
    "MAX_SPARSE_TERMS",
    "CandidateSource",
    "Candidates",
    "Components",
    "Hit",
    "KnnSource",
    "RestrictSource",
    "SourceQuery",
    "SparseSource",
    "TemplateSource",
    "heaviest_terms_text",
    "knn_query",
    "lexical_scores",
    "merge",
    "parse_hits",
    "search",
    "sparse_query",
    "with_components",
]

DFS = "dfs_query_then_fetch"  # the search type that gathers every shard's term statistics first
# The bool query's clause limit is 1024 by default; the heaviest query terms carry the dot product.
MAX_SPARSE_TERMS = 512

Components = tuple[float, float, float, float]  # cos_bow, cos_dense, cos_title, same model (1, 0 other, -1 none)


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
        components: the components script's parameters
            (:func:`~semdup.search_templates.components.components_params`): every hit then carries the fusion's
            cosines; None: hits carry ids and scores only.
        lexical_field: the first template's ``match`` field: the vector sources' hits then carry its score.
        shards: primary shards behind the index; a vector source asks each for its top ``size`` and keeps the
            best ``size`` of them itself (a rescore reorders hits, so the cluster cannot choose them).
        global_stats: search with ``dfs_query_then_fetch``: every shard scores with the index's term statistics,
            not its own (:meth:`~semdup.reranker.settings.RerankerSettings.global_stats`, on where ``shards`` > 1).
    """

    text: str
    size: int
    exclude_id: str | None = None
    restrict_ids: tuple[str, ...] | None = None
    vector: np.ndarray | None = None
    terms: Mapping[str, float] | None = None
    components: dict[str, Any] | None = None
    lexical_field: str | None = None
    shards: int = 1
    global_stats: bool = False

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
        components: the fusion's cosines computed in the cluster (None: not asked, or the post has no packed
            value of format 2 or later: read it from ``_source``).
        lexical: the first template's score of the candidate (0.0: it did not match; None: not asked).
        title: the post's title from ``_source`` (None: not asked, or absent).
        other_model: the bundle version that indexed the post, when it is not the query's.
    """

    id: str
    score: float
    components: Components | None = None
    lexical: float | None = None
    title: str | None = None
    other_model: str | None = None


class CandidateSource(Protocol):
    """A source of candidates (module doc): its name (in each candidate's ``sources``), its search body, and its
    hits."""

    name: str

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        """The search body of its line in the ``_msearch``; None: nothing to ask (a k-NN source without a vector)."""

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        """This source's hits in ``response`` (its part of the answer), best first."""


def _components(h: Mapping[str, Any]) -> tuple[Components | None, str | None]:
    """A hit's script field: its components, and the other model that indexed it (module doc)."""
    got = (h.get("fields") or {}).get(COMPONENTS_FIELD)
    if not got or got[0] is None or len(got) < 4:
        return None, None
    return (float(got[0]), float(got[1]), float(got[2]), float(got[3])), (str(got[4]) if len(got) > 4 else None)


def parse_hits(response: Mapping[str, Any], index: str, what: str, rescored: bool = False) -> list[Hit]:
    """The hits of one response of an ``_msearch``, each with what it carried; ``rescored``: the score is the
    first template's (the vector sources' rescore), kept as the hit's lexical score."""
    if "error" in response:
        err = response["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"the {what} candidate search on {index!r} failed: {error_reason(err)}")
    out = []
    for h in response["hits"]["hits"]:
        score = float(h["_score"])
        title = (h.get("_source") or {}).get("title")
        comps, other = _components(h)
        out.append(Hit(str(h["_id"]), score, comps, score if rescored else None,
                       title if isinstance(title, str) else None, other))  # fmt: skip
    return out


def with_components(body: dict[str, Any], query: SourceQuery) -> dict[str, Any]:
    """``body`` whose hits carry the fusion's cosines (when the query has the components script's parameters)."""
    return {**body, "script_fields": script_fields(query.components)} if query.components is not None else body


def _rescored(body: dict[str, Any], query: SourceQuery, window: int) -> dict[str, Any]:
    """``body`` whose hits' scores become the first template's score (0 where it does not match), its hits
    unchanged: a rescore of the top ``window`` per shard with the template's ``match`` and weight 0 on the
    original score."""
    if query.lexical_field is None:
        return body
    rescore_query = {"match": {query.lexical_field: {"query": query.text}}}
    return {**body, "rescore": {"window_size": window, "query": {
        "rescore_query": rescore_query, "query_weight": 0.0, "rescore_query_weight": 1.0, "score_mode": "total"}}}


def _best(hits: list[Hit], query: SourceQuery, at: int) -> list[Hit]:
    """A vector source's top ``query.size`` hits by the cosine at ``at`` of their components (the source's own
    score before the rescore; hits without components last), from the ``size`` each shard returned."""
    if query.lexical_field is None and query.shards == 1:
        return hits
    ranked = sorted(hits, key=lambda h: (h.components is None, -(h.components or (0.0,) * 4)[at]))
    return ranked[: query.size]


@dataclass(frozen=True)
class TemplateSource:
    """A lexical template (``semdup-<model>-<variant>``): the body the stored template renders."""

    model: str = "bm25"
    variant: str = "text"

    @property
    def name(self) -> str:
        return self.model

    def request(self, query: SourceQuery) -> dict[str, Any]:
        ids = list(query.restrict_ids) if query.restrict_ids is not None else None
        fields = script_fields(query.components) if query.components is not None else None
        params = template_params(query.text, size=query.size, exclude_id=query.exclude_id, ids=ids,
                                 script_fields=fields)  # fmt: skip
        return template_body(self.model, self.variant, params)

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        return parse_hits(response, index, self.model)


def heaviest_terms_text(tokens: Sequence[str], terms: Mapping[str, float], n: int) -> str:
    """``tokens``, in their order and with their repeats, that are among the ``n`` heaviest of them by ``terms``
    or that ``terms`` lacks (a word the bundle's vocabulary never saw may be in posts indexed since): the text a
    lexical template matches (``RerankerSettings.lexical_terms``). Empty when no token is kept.

    Example::

        >>> heaviest_terms_text(["visa", "for", "qatar", "visa", "covid"], {"visa": 0.5, "for": 0.04, "qatar": 0.6}, 2)
        'visa qatar visa covid'
    """
    names = {t: feature_name(t) for t in tokens}  # the names the bundle's weights go by
    weighed = {t: terms[name] for t, name in names.items() if name in terms}
    top = set(sorted(weighed, key=lambda t: (-weighed[t], t))[:n])
    return " ".join(t for t in tokens if t in top or t not in weighed)


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
    size = int(query.size) * (query.shards if query.lexical_field is not None else 1)
    body = {"size": size, "_source": False, "track_total_hits": False, "query": {"bool": bool_q}}
    return with_components(_rescored(body, query, int(query.size)), query)


def knn_query(vector: Sequence[float], query: SourceQuery, source: Sequence[str] = ()) -> dict[str, Any]:
    """A ``knn`` search on ``semdup.vector`` (lucene engine, cosinesimil; the filter is applied during the search),
    its hits with ``source`` from ``_source`` (none by default).

    ``k`` is per shard, and every shard's ``k`` come back (``size`` = k × shards): their order after the rescore
    is the lexical score's, so the source keeps the best ``k`` by cosine itself (:func:`_best`). ``ef_search`` is
    2·k: the graph is built with ef_construction 32 (:data:`semdup.index_format.schema.HNSW_PARAMETERS`), and the
    wider search beam keeps the recall of the plugin's default build at about the same query cost.
    """
    knn: dict[str, Any] = {
        "vector": np.asarray(vector, dtype=np.float32),
        "k": int(query.size),
        "method_parameters": {"ef_search": 2 * int(query.size)},
    }
    flt = query.filters()
    if flt:
        knn["filter"] = {"bool": flt}
    body = {
        "size": int(query.size) * query.shards,
        "_source": list(source) if source else False,
        "track_total_hits": False,
        "query": {"knn": {"semdup.vector": knn}},
    }
    return with_components(_rescored(body, query, int(query.size)), query)


@dataclass(frozen=True)
class SparseSource:
    """Learned-sparse candidates: the ``rank_feature`` dot product with the query's BOW weights."""

    name = "sparse"

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        return sparse_query(query.terms, query) if query.terms else None

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        return _best(parse_hits(response, index, self.name, query.lexical_field is not None), query, 0)


@dataclass(frozen=True)
class KnnSource:
    """k-NN candidates on ``semdup.vector``; ``source``: the ``_source`` fields each hit carries."""

    source: tuple[str, ...] = ()
    name = "knn"

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        return None if query.vector is None else knn_query(query.vector, query, self.source)

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        return _best(parse_hits(response, index, self.name, query.lexical_field is not None), query, 1)


@dataclass(frozen=True)
class RestrictSource:
    """Exactly the posts of ``restrict_ids``: each comes with its components, those no other source found with
    lexical score 0 (they did not match the first template, which searched the same posts)."""

    name = "restrict"

    def request(self, query: SourceQuery) -> dict[str, Any] | None:
        if query.restrict_ids is None or query.components is None:
            return None
        body = {"size": max(len(query.restrict_ids), 1), "_source": False, "track_total_hits": False,
                "query": {"bool": {"filter": [{"ids": {"values": list(query.restrict_ids)}}],
                                   **({"must_not": query.filters()["must_not"]} if query.exclude_id else {})}}}
        return with_components(body, query)

    def hits(self, response: Mapping[str, Any], index: str, query: SourceQuery) -> list[Hit]:
        return [Hit(h.id, 0.0, h.components, 0.0, None, h.other_model) for h in parse_hits(response, index, self.name)]


def search(
    client: Any, index: str, sources: Sequence[CandidateSource], query: SourceQuery, timeout: float
) -> list[tuple[str, list[Hit]]]:
    """Ask ``sources`` in one ``_msearch``: ``(source name, its hits)`` for each source that had something to ask.

    Raises:
        SearchTimeout / OpenSearchUnavailable / OpenSearchMissing / OpenSearchRefused: from the client
            (:mod:`semdup.opensearch_io.boundary`).
    """
    asked = [(s, r) for s in sources if (r := s.request(query)) is not None]
    if not asked:
        return []
    header: dict[str, Any] = {"index": index}
    if query.global_stats:  # BM25's document frequencies and lengths of the whole index, not of each shard
        header["search_type"] = DFS
    body = [line for _, r in asked for line in (header, r)]
    resp = client.msearch(body=body, params={"request_timeout": timeout})
    return [(s.name, s.hits(r, index, query)) for (s, _), r in zip(asked, resp["responses"], strict=True)]


def lexical_scores(
    client: Any,
    index: str,
    text: str,
    ids: Sequence[str],
    *,
    model: str,
    variant: str,
    timeout: float,
    global_stats: bool = False,
) -> dict[str, float]:
    """The template ``model``'s score of given posts (those other sources found); no match = absent.
    ``global_stats``: as the candidate search that found the others scored (:class:`SourceQuery`)."""
    if not ids:
        return {}
    source = TemplateSource(model, variant)
    query = SourceQuery(text, len(ids), restrict_ids=tuple(map(str, ids)), global_stats=global_stats)
    found = search(client, index, [source], query, timeout)
    return {h.id: h.score for _, hits in found for h in hits}


@dataclass
class Candidates:
    """The merged candidates of one query (:func:`merge`).

    Attributes:
        ids: in round-robin rank order over the sources, each once.
        lexical: the first template's score where known (its own hits, the rescored score of the others; 0.0 =
            no match); absent: unknown (found by another template only).
        sources: id -> the sources that found it.
        components: id -> the fusion's cosines its hits carried (computed in the cluster).
        titles: id -> the title its hits carried.
        other_models: id -> the other bundle version that indexed it (a candidate of another model).
    """

    ids: list[str] = field(default_factory=list)
    lexical: dict[str, float] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    components: dict[str, Components] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    other_models: dict[str, str] = field(default_factory=dict)


def merge(found: Sequence[tuple[str, Sequence[Hit]]], primary: str) -> Candidates:
    """The hits of several sources as one candidate list, without duplicates, in round-robin rank order; the
    ``primary`` source's scores are the lexical scores of its candidates (over the rescored scores of the same
    posts). A post found only by :class:`RestrictSource` joins last, as ``restrict``."""
    out = Candidates()
    ranked = [(n, h) for n, h in found if n != RestrictSource.name]
    longest = max((len(h) for _, h in ranked), default=0)
    for rank in range(longest):
        for name, hits in ranked:
            if rank < len(hits):
                doc_id = hits[rank].id
                if doc_id not in out.sources:
                    out.ids.append(doc_id)
                out.sources.setdefault(doc_id, []).append(name)
    for name, hits in found:
        if name == RestrictSource.name:
            for h in hits:
                if h.id not in out.sources:
                    out.ids.append(h.id)
                    out.sources[h.id] = [name]
        if name == primary:
            out.lexical.update((h.id, h.score) for h in hits)
    for _, hits in found:
        for h in hits:
            if h.components is not None:
                out.components.setdefault(h.id, h.components)
            if h.lexical is not None:
                out.lexical.setdefault(h.id, h.lexical)
            if h.title is not None:
                out.titles.setdefault(h.id, h.title)
            if h.other_model is not None:
                out.other_models[h.id] = h.other_model
    return out
