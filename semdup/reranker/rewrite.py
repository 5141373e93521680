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
   semdup's. Every candidate of the rerank goes in (~200), so the site's own ``size`` and ``from`` page through
   them, and the site's ``filter`` and ``must_not`` clauses (of its top-level ``bool``) are kept: a filtered-out
   candidate leaves the page, the others move up. One id excluded by ``must_not`` (the post itself, when a site
   looks for the duplicates of a post it holds) is left out of semdup's candidates as well (:func:`excluded_id`).

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

__all__ = ["MAX_QUERY_DEPTH", "TEXT_QUERIES", "excluded_id", "post_of_search", "ranked_query"]

MAX_QUERY_DEPTH = 32  # nested compound queries followed; deeper ones are a malformed or hostile body
# full-text queries and the key of their text (a field-keyed one: {"match": {FIELD: TEXT or {"query": TEXT}}})
_FIELD_KEYED = ("match", "match_phrase", "match_phrase_prefix", "match_bool_prefix")
_FIELDS_LISTED = ("multi_match", "combined_fields", "query_string", "simple_query_string")
TEXT_QUERIES = _FIELD_KEYED + _FIELDS_LISTED
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
            if isinstance(text, str):
                yield tuple(str(f).split("^")[0] for f in fields), text
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
        PostError: the query holds no text (nothing to rank by).
    """
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


def _kept_clauses(search: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The site's top-level ``bool`` ``filter`` and ``must_not`` clauses (as lists)."""
    query = search.get("query")
    spec = query.get("bool") if isinstance(query, Mapping) else None
    out: dict[str, list[Any]] = {}
    if isinstance(spec, Mapping):
        for part in ("filter", "must_not"):
            clauses = spec.get(part)
            if clauses:
                out[part] = list(clauses) if isinstance(clauses, list) else [clauses]
    return out


def excluded_id(search: Mapping[str, Any]) -> str | None:
    """The one post id the site's top-level ``bool`` ``must_not`` excludes by an ``ids`` clause (the post being
    edited, when a site looks for its duplicates), which semdup then leaves out of its candidates too: left in, it
    would take a k-NN place and set lexnorm's maximum (a post matches itself best)."""
    ids = [v for c in _kept_clauses(search).get("must_not", []) if isinstance(c, Mapping) and "ids" in c
           for v in (c["ids"].get("values") or [])]  # fmt: skip
    return str(ids[0]) if len(ids) == 1 else None


def ranked_query(search: Mapping[str, Any], ranked: Sequence[tuple[str, float]]) -> dict[str, Any]:
    """The query that ranks the site's index as semdup does: ``ranked`` = (id, fused score), best first (module
    doc). No candidate: a query that matches nothing (semdup found no duplicate candidate)."""
    if not ranked:
        return {"bool": {"must_not": [{"match_all": {}}]}}
    should = [
        {"constant_score": {"filter": {"ids": {"values": [doc_id]}}, "boost": boost}}
        for (doc_id, _), boost in zip(ranked, _boosts([s for _, s in ranked]), strict=True)
    ]
    return {"bool": {"should": should, "minimum_should_match": "1", **_kept_clauses(search)}}
