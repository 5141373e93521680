"""A site's own ``_search`` body in, the same search ranked by semdup out: what the search pipeline asks for.

OpenSearch's ``ml_inference`` search request processor (:mod:`semdup.search_pipeline`) sends semdup the search
body the site's application sent (its ``query``, ``size``, ``from``, ``_source`` …) and puts the ``query`` semdup
answers in its place; everything else in the request stays the site's. Two steps:

1. :func:`post_of_search`: the post the site searches with. The texts of the full-text clauses in the query
   (``match``, ``match_phrase``, ``match_bool_prefix``, ``multi_match``, ``combined_fields``, ``query_string``,
   ``simple_query_string``, anywhere inside ``bool``, ``boosting``, ``constant_score``, ``dis_max``,
   ``function_score``), each by the field it searches: a clause on the index's title field gives the title, one
   on its body field the body, and one on several fields or on any other (``text``, ``*``, ``_all``) is a
   search-box query, taken as the title. Several texts of one role are joined with a space. A query without any
   text (a filter, ``match_all``) is refused: there is nothing to find duplicates of.
2. :func:`ranked_query`: semdup's candidates, best first, as a query on the site's index: each id a
   ``constant_score`` clause whose boost is its fused score, so ``_score`` is semdup's score and the order is
   semdup's. Every candidate of the rerank goes in (~200; at most as many as keep the query within the cluster's
   ``indices.query.bool.max_clause_count``, :func:`candidate_room`), so the site's own ``size`` and ``from`` page
   through them. Every restriction of the site's query is kept, wherever it wrote it: its restriction skeleton
   (:func:`semdup.reranker.restriction.restriction`) is the ranking's ``filter``, and its ``boosting`` negatives
   demote the ranking as they demoted its search; a restricted-out candidate leaves the page, the others move up.
   The ranking is for the pipeline's own index only (a ``terms`` on ``_index``): any other index searched with the
   same pipeline gets the site's own query. One id excluded by the top-level ``must_not`` (the post itself, when
   a site looks for the duplicates of a post it holds) is left out of semdup's candidates as well
   (:func:`excluded_id`).

Lucene scores are float32 and must be positive: a boost is the fused score rounded to float32, and where two
candidates would tie or a score is not above 0, the later one gets the next float32 below the earlier one's, so
the order is exactly semdup's (its ties are broken by id, as ``/v1/rerank`` breaks them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from semdup.core.errors import PostError
from semdup.core.posts import Post
from semdup.reranker.restriction import TEXT_QUERIES, check_depth, demotions, leaf_count, restriction

__all__ = [
    "CLAUSE_HEADROOM",
    "DEFAULT_MAX_CLAUSES",
    "MAX_QUERY_DEPTH",
    "TEXT_QUERIES",
    "candidate_room",
    "check_encodable",
    "excluded_id",
    "framed",
    "post_of_search",
    "ranked_query",
]

MAX_QUERY_DEPTH = 32  # nested compound queries followed; deeper ones are a malformed or hostile body
DEFAULT_MAX_CLAUSES = 1024  # indices.query.bool.max_clause_count's default (OpenSearch 2.x)
CLAUSE_HEADROOM = 0.9  # of max_clause_count: leaf_count is an upper bound, but an analyzer may split finer
# full-text queries and the key of their text (a field-keyed one: {"match": {FIELD: TEXT or {"query": TEXT}}})
_FIELD_KEYED = ("match", "match_phrase", "match_phrase_prefix", "match_bool_prefix")
_FIELDS_LISTED = ("multi_match", "combined_fields", "query_string", "simple_query_string")
_COMPOUND_LISTS = ("must", "should", "filter", "must_not")
_SMALLEST = np.float32(1e-30)


def _texts(query: Any, depth: int = 0) -> Iterator[tuple[tuple[str, ...], str]]:
    """``(fields, text)`` of every full-text clause in ``query`` (fields empty: the clause names none)."""
    if depth > MAX_QUERY_DEPTH or not isinstance(query, Mapping):
        return
    for kind, spec in query.items():
        if kind in _FIELD_KEYED and isinstance(spec, Mapping):
            for field, value in spec.items():
                text = value.get("query") if isinstance(value, Mapping) else value
                if isinstance(text, str):
                    yield (str(field),), text
        elif kind in _FIELDS_LISTED and isinstance(spec, Mapping):
            text = spec.get("query")
            fields = spec.get("fields") or ([spec["default_field"]] if "default_field" in spec else [])
            if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
                raise PostError(f"{kind}.fields must be a list of field names; got {type(fields).__name__}")
            if isinstance(text, str):
                yield tuple(f.split("^")[0] for f in fields), text
        elif kind == "bool" and isinstance(spec, Mapping):
            for part in ("must", "should"):  # filter / must_not select, they do not describe the post
                clauses = spec.get(part)
                for clause in clauses if isinstance(clauses, list) else [clauses]:
                    yield from _texts(clause, depth + 1)
        elif kind in ("constant_score", "function_score", "script_score") and isinstance(spec, Mapping):
            yield from _texts(spec.get("query") or spec.get("filter"), depth + 1)
        elif kind == "boosting" and isinstance(spec, Mapping):
            yield from _texts(spec.get("positive"), depth + 1)
        elif kind == "dis_max" and isinstance(spec, Mapping):
            for clause in spec.get("queries") or []:
                yield from _texts(clause, depth + 1)


def _field_is(field: str, name: str) -> bool:
    """``Title``, ``Title.english`` (a sub-field) and ``Title^2`` all search the title field ``Title``."""
    base = field.split("^")[0]
    return base == name or base.startswith(name + ".")


def post_of_search(search: Mapping[str, Any], title_field: str, body_field: str) -> Post:
    """The post a site's search body searches with (module doc).

    Raises:
        PostError: the query holds no text (nothing to rank by), is malformed or nested too deeply.
    """
    check_depth(search.get("query"))
    title: list[str] = []
    body: list[str] = []
    for fields, text in _texts(search.get("query")):
        if len(fields) == 1 and _field_is(fields[0], body_field) and not _field_is(fields[0], title_field):
            body.append(text)
        else:
            title.append(text)
    if not any(t.strip() for t in (*title, *body)):
        raise PostError(
            "the search holds no text to rank by (semdup reads match, multi_match, query_string and the other "
            "full-text queries); the pipeline leaves such a search as it is"
        )
    return Post("_search", " ".join(title), " ".join(body))


def _boosts(scores: Sequence[float]) -> list[float]:
    """float32 boosts in the order given, each strictly below the one before and above 0 (module doc)."""
    out: list[float] = []
    prev: np.float32 | None = None
    for s in scores:
        b = max(np.float32(s), _SMALLEST)
        if prev is not None and b >= prev:
            b = np.nextafter(prev, np.float32(0))
        b = max(b, np.float32(np.finfo(np.float32).smallest_subnormal))
        out.append(float(b))
        prev = b
    return out


def _top_must_not(search: Mapping[str, Any]) -> list[Any]:
    """The site's top-level ``bool`` ``must_not`` clauses (as a list)."""
    query = search.get("query")
    spec = query.get("bool") if isinstance(query, Mapping) else None
    clauses = spec.get("must_not") if isinstance(spec, Mapping) else None
    return [] if not clauses else list(clauses) if isinstance(clauses, list) else [clauses]


def excluded_id(search: Mapping[str, Any]) -> str | None:
    """The one post id the site's top-level ``bool`` ``must_not`` excludes by an ``ids`` clause (the post being
    edited, when a site looks for its duplicates), which semdup then leaves out of its candidates too: left in, it
    would take a k-NN place and set lexnorm's maximum (a post matches itself best)."""
    ids = [v for c in _top_must_not(search) if isinstance(c, Mapping) and isinstance(c.get("ids"), Mapping)
           for v in (c["ids"].get("values") or [])]  # fmt: skip
    return str(ids[0]) if len(ids) == 1 else None


def check_encodable(value: Any) -> None:
    """Refuse a search holding a string UTF-8 cannot encode (a lone surrogate such as ``"\\ud800"``, which JSON
    can carry): neither the cluster nor the answer could be written with it (PostError, answered 422)."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise PostError(
                    "the search holds a lone surrogate (a \\ud800-\\udfff escape without its pair), which is not "
                    "text UTF-8 can encode; send the character itself or its pair"
                ) from None


def candidate_room(search: Mapping[str, Any], text_fields: Sequence[str], index: str | None, max_clauses: int) -> int:
    """How many candidates :func:`ranked_query` puts in its query: as many as keep its leaf clauses, the site's
    own (counted by :func:`~semdup.reranker.restriction.leaf_count`, an upper bound) and one per candidate, within
    :data:`CLAUSE_HEADROOM` of ``max_clauses``.

    Raises:
        PostError: the site's own clauses leave no room (the site's own search is near the limit itself).
    """
    site = search.get("query")
    fixed: list[Any] = [restriction(site, text_fields), [n for n, _ in demotions(site)]]
    if index is not None:
        fixed += [site, [index], [index]]  # the pass-through branch and the two _index clauses
    room = int(max_clauses * CLAUSE_HEADROOM) - leaf_count(fixed) - 2  # 2: the empty query's match_all, slack
    if room < 1:
        raise PostError(
            f"the search's own clauses leave no room for semdup's candidates within the cluster's "
            f"indices.query.bool.max_clause_count ({max_clauses}); the pipeline runs it as the site sent it"
        )
    return room


def ranked_query(
    search: Mapping[str, Any],
    ranked: Sequence[tuple[str, float]],
    text_fields: Sequence[str],
    index: str | None = None,
    max_clauses: int = DEFAULT_MAX_CLAUSES,
) -> dict[str, Any]:
    """The query that ranks the site's index as semdup does (module doc): ``ranked`` = (id, fused score), best
    first, restricted by the site's restriction skeleton (:func:`~semdup.reranker.restriction.restriction`,
    ``text_fields`` the index's title and body fields) and demoted by its ``boosting`` negatives; on ``index``
    only, any other index searched through the pipeline gets the site's own query. At most as many candidates as
    keep the query's leaf clauses within ``max_clauses`` (the cluster's ``indices.query.bool.max_clause_count``).
    No candidate: a query that matches nothing on ``index`` (semdup found no duplicate candidate).

    Raises:
        PostError: a malformed or too deeply nested query, or one whose own clauses leave no room for a candidate.
    """
    site = search.get("query")
    skeleton = restriction(site, text_fields)
    ranked = list(ranked)[: candidate_room(search, text_fields, index, max_clauses)]
    if ranked:
        should = [
            {"constant_score": {"filter": {"ids": {"values": [doc_id]}}, "boost": boost}}
            for (doc_id, _), boost in zip(ranked, _boosts([s for _, s in ranked]), strict=True)
        ]
        query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": "1",
                                          **({"filter": [skeleton]} if skeleton is not None else {})}}  # fmt: skip
    else:
        query = {"bool": {"must_not": [{"match_all": {}}]}}
    return framed(search, query, index)


def framed(search: Mapping[str, Any], ranking: dict[str, Any], index: str | None) -> dict[str, Any]:
    """``ranking`` (semdup's query, the site's restriction skeleton already inside it) demoted by the site's
    ``boosting`` negatives as its search demoted, and applied to ``index`` only: any other index searched through
    the pipeline gets the site's own query (module doc)."""
    site = search.get("query")
    query = ranking
    for negative, boost in demotions(site):
        query = {"boosting": {"positive": query, "negative": negative, "negative_boost": boost}}
    if index is None:
        return query
    on_index = [{"terms": {"_index": [index]}}]
    other = {"bool": {"must": [site if site is not None else {"match_all": {}}], "must_not": on_index}}
    return {"bool": {"should": [{"bool": {"must": [query], "filter": on_index}}, other], "minimum_should_match": "1"}}
