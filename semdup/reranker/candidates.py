"""Candidate generation: stored lexical templates, learned-sparse and k-NN queries, merged without duplicates.

The requests (which paths go together, :mod:`semdup.reranker.path_search`): one ``_msearch/template`` runs every
stored template (BM25, LMJ, DFR, IB …) and, through a stored
pass-through template (``{{#toJson}}body{{/toJson}}``, compiled once), the learned-sparse query (a ``bool``
``should`` of ``rank_feature`` clauses on ``semdup.terms.<feature>`` with the ``linear`` function and
boost = the query's own weight, i.e. the dot product cos_bow inside OpenSearch) and the ``knn`` query on
``semdup.vector``. Every path asks for ``docvalue_fields`` ``semdup.packed`` and ``semdup.model``, so each hit
carries its exact float32 vector and term weights (:mod:`semdup.index_format.packed_fields`): no
second request. Candidates whose hits carry no packed fields (posts written before ``semdup.packed`` existed,
posts the workers have not reached, templates stored by an older semdup) are read with one ``mget`` of their
``_source`` (or the exact field cache, :mod:`semdup.reranker.field_cache`), :func:`fetch_semdup_fields`.

Measured on Travel (100 BM25 candidates, 400 dimensions; ``benchmarks/rerank_latency.py``): the docvalue fields
add a few ms to the template search, where the ``mget`` of 100 ``_source`` documents cost more than the search.

Every OpenSearch call carries an explicit ``request_timeout``; a timeout raises :class:`SearchTimeout`
(the service answers 504), a connection failure :class:`~semdup.core.errors.OpenSearchUnavailable` (503), a
missing index :class:`~semdup.core.errors.SearchIndexError` (404).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from opensearchpy import exceptions as os_exc

from semdup.core.clients import error_reason
from semdup.core.errors import OpenSearchUnavailable, SearchIndexError, SemdupError
from semdup.index_format.packed_fields import unpack_semdup_value
from semdup.index_format.schema import PACKED_FIELD
from semdup.reranker.field_cache import FieldCache
from semdup.search_templates import template_id, template_params

__all__ = [
    "SearchTimeout",
    "CandidateSet",
    "sparse_query",
    "knn_query",
    "merge_hits",
    "response_hits",
    "LEXICAL_QUERY_NAME",
    "NamedScoresUnsupported",
    "lexical_scores_for",
    "fetch_semdup_fields",
    "stored_semdup_fields",
    "call_opensearch",
    "DOCVALUE_FIELDS",
    "register_query_template",
    "MAX_SPARSE_TERMS",
    "QUERY_TEMPLATE_ID",
]

logger = logging.getLogger(__name__)

# The bool query's clause limit is 1024 by default; the heaviest query terms carry the dot product.
MAX_SPARSE_TERMS = 512
QUERY_TEMPLATE_ID = "semdup-reranker-query"
# the named query that carries the primary template's score on sparse / k-NN hits (with_lexical_score)
LEXICAL_QUERY_NAME = "semdup-lexical"
_QUERY_SOURCE = "{{#toJson}}body{{/toJson}}"
_MODEL_FIELD = "semdup.model"
# what every candidate path asks each hit to carry: the packed vector + term weights, and the model version
DOCVALUE_FIELDS = (PACKED_FIELD, _MODEL_FIELD)


class SearchTimeout(OpenSearchUnavailable):
    """OpenSearch did not answer within the reranker's request timeout (the service answers 504)."""


class NamedScoresUnsupported(SemdupError):
    """The cluster answers named queries without their scores (OpenSearch before 2.13): the lexical scores of
    sparse / k-NN candidates take their own request (:func:`lexical_scores_for`)."""


@dataclass
class CandidateSet:
    """Merged candidates of one query: ids in first-seen order, the primary template's score, the paths found,
    and the semdup fields (``{"model", "vector", "terms"}``) of the candidates whose hits carried them."""

    ids: list[str] = field(default_factory=list)
    lexical: dict[str, float] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    scored: set[str] = field(default_factory=set)  # ids whose primary-template score is known (absent = no match)


def call_opensearch(fn: Callable[..., Any], what: str, **kwargs: Any) -> Any:
    """Call the client, mapping its errors onto semdup's: timeout, unreachable, missing index."""
    try:
        return fn(**kwargs)
    except os_exc.ConnectionTimeout as exc:
        timeout = kwargs.get("request_timeout") or (kwargs.get("params") or {}).get("request_timeout")
        within = f"within {timeout} s" if timeout is not None else "within the client's timeout"
        raise SearchTimeout(
            f"OpenSearch did not answer {what} {within}; raise SEMDUP_SEARCH_TIMEOUT or check the cluster's load"
        ) from exc
    except os_exc.ConnectionError as exc:
        raise OpenSearchUnavailable(
            f"OpenSearch did not answer {what} ({exc.__class__.__name__}); start the embedded one with "
            "`semdup opensearch start` or set SEMDUP_OPENSEARCH_URL"
        ) from exc
    except os_exc.NotFoundError as exc:
        raise SearchIndexError(
            f"{what}: index not found ({getattr(exc, 'error', exc)}); index posts into it first"
        ) from exc
    except os_exc.TransportError as exc:
        if exc.status_code in (502, 503, 504) or exc.status_code == 429:
            raise OpenSearchUnavailable(f"OpenSearch answered HTTP {exc.status_code} {what}: {exc.error}") from exc
        raise SemdupError(f"OpenSearch refused {what} (HTTP {exc.status_code}): {_reason(exc)}") from exc


def _reason(exc: os_exc.TransportError) -> str:
    """The error type with OpenSearch's reason (:func:`~semdup.core.clients.error_reason`)."""
    err = exc.info.get("error") if isinstance(exc.info, dict) else None
    return f"{exc.error}: {error_reason(err)[:500]}" if isinstance(err, dict) else str(exc.error)


def _filters(exclude_id: str | None, restrict_ids: Sequence[str] | None) -> dict[str, Any]:
    clause: dict[str, Any] = {}
    if restrict_ids is not None:
        clause["filter"] = [{"ids": {"values": [str(i) for i in restrict_ids]}}]
    if exclude_id is not None:
        clause["must_not"] = [{"ids": {"values": [str(exclude_id)]}}]
    return clause


def _with_docvalues(body: dict[str, Any], docvalue_fields: Sequence[str] | None) -> dict[str, Any]:
    if docvalue_fields:
        body["docvalue_fields"] = list(docvalue_fields)
    return body


def sparse_query(
    terms: Mapping[str, float],
    size: int,
    exclude_id: str | None = None,
    restrict_ids: Sequence[str] | None = None,
    docvalue_fields: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A search body whose score is Σ_w q_w·d_w over ``semdup.terms`` (cos_bow when both sides are unit vectors).

    ``rank_feature`` with ``linear`` scores d_w; the clause boost multiplies it by the query's weight q_w
    (DESIGN.md, index schema). Only the ``MAX_SPARSE_TERMS`` heaviest query terms are kept.

    Example::

        >>> sparse_query({"mount": 0.8, "usb": 0.6}, 5)["query"]["bool"]["should"][0]
        {'rank_feature': {'field': 'semdup.terms.mount', 'linear': {}, 'boost': 0.8}}
    """
    top = sorted(terms.items(), key=lambda kv: -kv[1])[:MAX_SPARSE_TERMS]
    should = [{"rank_feature": {"field": f"semdup.terms.{name}", "linear": {}, "boost": float(w)}} for name, w in top]
    bool_q: dict[str, Any] = {"should": should, "minimum_should_match": 1, **_filters(exclude_id, restrict_ids)}
    body = {"size": int(size), "_source": False, "track_total_hits": False, "query": {"bool": bool_q}}
    return _with_docvalues(body, docvalue_fields)


def knn_query(
    vector: Sequence[float],
    size: int,
    exclude_id: str | None = None,
    restrict_ids: Sequence[str] | None = None,
    docvalue_fields: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A ``knn`` search on ``semdup.vector`` (lucene engine, cosinesimil; the filter is applied during the search).

    ``ef_search`` is 2·k: the graph is built with ef_construction 32
    (:data:`semdup.index_format.schema.HNSW_PARAMETERS`), and the wider search beam keeps the recall of the
    plugin's default build at about the same query cost.
    """
    knn: dict[str, Any] = {
        "vector": [float(x) for x in vector],
        "k": int(size),
        "method_parameters": {"ef_search": 2 * int(size)},
    }
    flt = _filters(exclude_id, restrict_ids)
    if flt:
        knn["filter"] = {"bool": flt}
    body = {"size": int(size), "_source": False, "track_total_hits": False, "query": {"knn": {"semdup.vector": knn}}}
    return _with_docvalues(body, docvalue_fields)


def merge_hits(named: Sequence[tuple[str, Sequence[tuple[str, float]]]], primary: str) -> CandidateSet:
    """Merge hit lists of several paths without duplicates, in round-robin rank order.

    ``primary`` names the path whose scores are the lexical scores of its candidates.
    """
    out = CandidateSet()
    seen: set[str] = set()
    longest = max((len(h) for _, h in named), default=0)
    for rank in range(longest):
        for name, hits in named:
            if rank < len(hits):
                doc_id = hits[rank][0]
                out.sources.setdefault(doc_id, []).append(name)
                if doc_id not in seen:
                    seen.add(doc_id)
                    out.ids.append(doc_id)
    for name, hits in named:
        if name == primary:
            out.lexical = {d: float(s) for d, s in hits}
    return out


def response_hits(
    resp: Mapping[str, Any],
    index: str,
    what: str,
    fields: dict[str, dict[str, Any]] | None = None,
    lexical: dict[str, float] | None = None,
) -> list[tuple[str, float]]:
    """(id, score) of each hit; with ``fields``, the hits' packed semdup fields are decoded into it; with
    ``lexical``, the named lexical scores of the hits that matched
    (:func:`~semdup.reranker.path_search.with_lexical_score`)."""
    if "error" in resp:
        err = resp["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"the {what} candidate search on {index!r} failed: {error_reason(err)}")
    hits = resp["hits"]["hits"]
    if fields is not None:
        for h in hits:
            doc_id = str(h["_id"])
            if doc_id not in fields:
                decoded = _hit_fields(h)
                if decoded is not None:
                    fields[doc_id] = decoded
    if lexical is not None:
        for h in hits:
            matched = h.get("matched_queries")
            if isinstance(matched, Mapping) and LEXICAL_QUERY_NAME in matched:
                lexical[str(h["_id"])] = float(matched[LEXICAL_QUERY_NAME])
            elif isinstance(matched, list):  # names without scores: the cluster ignored include_named_queries_score
                raise NamedScoresUnsupported(f"the cluster behind {index!r} returns named queries without scores")
    return [(str(h["_id"]), float(h["_score"])) for h in hits]


def _unpacked(packed: str, model: Any, where: str, feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """``{"model", "vector", "terms"}`` (+ ``"title_vector"`` from a format-3 value) of a ``semdup.packed`` value;
    a bad one raises SemdupError."""
    try:
        value = unpack_semdup_value(packed, feature_names)
    except ValueError as exc:
        raise SemdupError(f"{where}{exc}") from exc
    out = {"model": model, "vector": value.vector, "terms": value.terms}
    if value.title is not None:
        out["title_vector"] = value.title
    return out


def _hit_fields(hit: Mapping[str, Any]) -> dict[str, Any] | None:
    """``{"model", "vector", "terms"}`` from a hit's docvalue fields; None when it carries no packed value."""
    got = hit.get("fields") or {}
    packed, model = got.get(PACKED_FIELD), got.get(_MODEL_FIELD)
    if not packed or not model:
        return None
    return _unpacked(packed[0], model[0], f"candidate {hit.get('_id')}: ")


def stored_semdup_fields(semdup: Mapping[str, Any], feature_names: Sequence[str] | None = None) -> dict[str, Any]:
    """A document's ``_source.semdup`` object as the fusion reads it: the packed copy when the post has one
    (exact float32 vector and weights), else the ``vector`` / ``terms`` stored beside it (older documents).

    ``{}`` (a post the workers have not reached) stays ``{}``. ``feature_names`` (``Bundle.feature_names()``)
    lets the terms of a packed value that holds vocabulary ids be read by name; the fusion does not need it.
    """
    if not semdup:
        return {}
    packed = semdup.get("packed")
    if packed:
        return _unpacked(packed, semdup.get("model"), "", feature_names)
    out = {k: v for k, v in semdup.items() if k in ("model", "vector", "terms")}
    if out.get("vector") is not None:
        # kept as the float32 array the fusion stacks (the stored values are float32s: exact)
        out["vector"] = np.asarray(out["vector"], dtype=np.float32)
    return out


def register_query_template(client: Any, timeout: float = 10.0) -> str | None:
    """Store :data:`QUERY_TEMPLATE_ID` (renders its ``body`` parameter as the search body); None if refused.

    Inline ``source`` templates are compiled per request and hit OpenSearch's script compilation rate limit
    (75 per 5 minutes by default); a stored template is compiled once.
    """
    try:
        client.put_script(
            id=QUERY_TEMPLATE_ID,
            body={"script": {"lang": "mustache", "source": _QUERY_SOURCE}},
            request_timeout=timeout,
        )
    except os_exc.AuthorizationException:
        logger.warning(
            "not allowed to store the search template %s; learned-sparse and k-NN candidates take a "
            "second round trip (grant cluster:admin/script/put to the reranker's user)",
            QUERY_TEMPLATE_ID,
        )
        return None
    except (os_exc.ConnectionError, os_exc.TransportError) as exc:
        logger.warning(
            "could not store the search template %s (%s); learned-sparse and k-NN candidates take a second round trip",
            QUERY_TEMPLATE_ID,
            exc.__class__.__name__,
        )
        return None
    return QUERY_TEMPLATE_ID


def lexical_scores_for(
    client: Any, index: str, text: str, ids: Sequence[str], *, model: str, variant: str, timeout: float
) -> dict[str, float]:
    """The primary template's score of given candidates (those found by sparse / k-NN only); no match = absent."""
    if not ids:
        return {}
    params = template_params(text, size=len(ids), ids=list(ids))
    body = [{"index": index}, {"id": template_id(model, variant), "params": params}]
    resp = call_opensearch(
        client.msearch_template, f"scoring candidates in {index!r}", body=body, params={"request_timeout": timeout}
    )
    return dict(response_hits(resp["responses"][0], index, model))


def _doc_error(doc: Mapping[str, Any], index: str) -> None:
    if "error" in doc:
        err = doc["error"]
        if isinstance(err, dict) and err.get("type") == "index_not_found_exception":
            raise SearchIndexError(f"index {index!r} does not exist; index posts into it first")
        raise SemdupError(f"reading candidate {doc.get('_id')} of {index!r} failed: {err}")


def _semdup_of(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    if not doc.get("found"):
        return None
    return stored_semdup_fields((doc.get("_source") or {}).get("semdup") or {})


def fetch_semdup_fields(
    client: Any,
    index: str,
    ids: Sequence[str],
    *,
    timeout: float,
    cache: FieldCache | None = None,
    uuids: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any] | None]:
    """``id -> the document's semdup fields`` (:func:`stored_semdup_fields`; ``{}`` when the post has none yet,
    None when the post is gone), read from ``_source``: the fallback for candidates whose hits carried no packed
    docvalue fields.

    With a ``cache`` (and ``uuids``: concrete index name -> uuid), only the sources of documents whose version
    is not cached are read (:mod:`semdup.reranker.field_cache`).
    """
    if not ids:
        return {}
    what = f"reading {len(ids)} candidates of {index!r}"
    if cache is None or uuids is None:
        # The whole _source, unfiltered: OpenSearch copies stored bytes as they are, while source filtering parses
        # and re-serialises every float of every vector (measured: 100 Travel posts, 40 ms whole vs 108-130 ms).
        resp = call_opensearch(
            client.mget, what, index=index, body={"ids": list(ids)}, params={"request_timeout": timeout}
        )
        out: dict[str, dict[str, Any] | None] = {}
        for doc in resp["docs"]:
            _doc_error(doc, index)
            out[str(doc["_id"])] = _semdup_of(doc)
        return out
    heads = call_opensearch(
        client.mget,
        what,
        index=index,
        body={"ids": list(ids)},
        params={"_source": "false", "request_timeout": timeout},
    )["docs"]
    out = {}
    missing: dict[str, tuple[tuple[str, str], tuple[int, int, int]]] = {}
    for doc in heads:
        _doc_error(doc, index)
        doc_id = str(doc["_id"])
        if not doc.get("found"):
            out[doc_id] = None
            continue
        key = (uuids.get(doc["_index"], doc["_index"]), doc_id)
        stamp = (int(doc["_seq_no"]), int(doc["_primary_term"]), int(doc["_version"]))
        fields = cache.get(key, stamp)
        if fields is None:
            missing[doc_id] = (key, stamp)
        else:
            out[doc_id] = fields
    if missing:
        resp = call_opensearch(
            client.mget, what, index=index, body={"ids": list(missing)}, params={"request_timeout": timeout}
        )
        for doc in resp["docs"]:
            _doc_error(doc, index)
            doc_id = str(doc["_id"])
            fields = _semdup_of(doc)
            out[doc_id] = fields
            if (
                fields is not None
                and (doc.get("_seq_no"), doc.get("_primary_term"), doc.get("_version")) == missing[doc_id][1]
            ):  # cache only what matches the version the head read saw
                cache.put(missing[doc_id][0], missing[doc_id][1], fields)
    return out
