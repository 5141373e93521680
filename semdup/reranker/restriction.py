"""The site's query in, its restriction skeleton out: which documents the site's own search allows, without its text.

A site's search says two things at once: the text it looks for (the post semdup finds the duplicates of,
:func:`semdup.reranker.rewrite.post_of_search`) and which documents may be shown at all (a tenant, the posts
that are not deleted, an ``ids`` list, a tag). semdup replaces how the text is matched (BM25 ∪ k-NN, the fusion
finds duplicates that share no word with the post) but must keep every restriction, wherever the site wrote it.
:func:`restriction` turns the site's query into a filter-context query that allows exactly what the site's query
allows, but with its text clauses in scoring positions relaxed to ``match_all``:

* **scoring positions** are the top-level query, ``bool.must`` and ``bool.should``, ``boosting.positive``,
  ``function_score.query`` and ``script_score.query`` (both without ``min_score``), ``dis_max.queries``. There a
  **text clause** (:func:`is_text_clause`) becomes ``match_all``; every other clause is walked (a compound) or
  kept verbatim (a leaf: ``ids``, ``term``, ``terms``, ``range``, ``exists``, ``prefix``, ``geo_*``, ``nested``,
  ``knn`` …);
* **filter positions** are ``bool.filter``, ``bool.must_not`` and ``constant_score.filter``: kept verbatim, text
  clauses too (a ``match`` in a filter is the site's restriction, not its search text);
* **the structure is kept:** a ``bool``'s ``should`` keeps all its clauses (text ones as ``match_all``) and its
  ``minimum_should_match``, so OpenSearch counts "at least n of" exactly as for the site's query; optional
  ``should`` clauses (beside a ``must`` or ``filter``, no ``minimum_should_match``) restrict nothing and go;
  ``dis_max`` is an "any of";
* **when in doubt, restrict:** any clause this module does not know (another plugin's query, a
  ``function_score`` or ``script_score`` with ``min_score``, whose allowance depends on the site's scores) is kept
  verbatim, so it restricts as it restricted the site's search; a ``boosting.negative`` only demotes, so it
  restricts nothing (:func:`demotions` keeps its demotion on semdup's ranking instead).

A clause is **text** when it is a full-text query (``match``, ``match_phrase``, ``match_phrase_prefix``,
``match_bool_prefix``, ``multi_match``, ``combined_fields``, ``query_string``, ``simple_query_string``) that
searches only the index's title or body field (a sub-field such as ``title.english`` or a boost ``title^2``
counts as its field), or a search box's query that names no field (or ``*`` / ``_all``); and, for
``query_string``, whose text holds no ``field:`` term (``tags:visa``, ``_exists_:closed``), which is a restriction
in the search box's syntax. Anything else on another field (``match: {tenant: "acme"}``, ``match: {status:
"open"}``) is a restriction.

The skeleton is one filter-context query (None: the site's query restricts nothing), so it goes wherever a filter
goes: today the ``filter`` of the query :func:`semdup.reranker.rewrite.ranked_query` answers (semdup's ranked
candidates, pruned by it); in the one-hop pipeline of issue #42, the ``bool.filter`` of the BM25 query and the
``filter`` of the k-NN query the node builds, so semdup ranks only what the site allows.

The walk is bounded: a query nested deeper than :data:`MAX_DEPTH` JSON levels (objects and arrays) is refused, as
is a malformed clause (a ``fields`` that is not a list of names): PostError, answered 422, after which the
pipeline runs the site's own search.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from semdup.core.errors import PostError

__all__ = ["MAX_DEPTH", "TEXT_QUERIES", "restriction", "demotions", "is_text_clause", "check_depth", "leaf_count"]

MAX_DEPTH = 96  # JSON levels of a search body: ~30 nested compound queries; a site's real search is far below
_FIELD_KEYED = ("match", "match_phrase", "match_phrase_prefix", "match_bool_prefix")
_FIELDS_LISTED = ("multi_match", "combined_fields", "query_string", "simple_query_string")
TEXT_QUERIES = _FIELD_KEYED + _FIELDS_LISTED
_SEARCH_BOX = ("*", "_all")
# a term of query_string's syntax that names a field: `tags:visa`, `title:(a b)`, `_exists_:x`, `date:[a TO b]`
_FIELD_TERM = re.compile(r"(?:^|[\s(+\-!&|])(?:[\w.*@]|\\.)+\s*:")
_MATCH_ALL: dict[str, Any] = {"match_all": {}}
_WORD = re.compile(r"\w+")
_IDEOGRAPH = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse ``value`` nested deeper than ``limit`` JSON levels (PostError; iterative, so any depth is safe)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise PostError(
                f"the search nests objects and arrays more than {limit} levels deep; semdup ranks searches up to "
                "that depth (the pipeline runs a deeper one as the site sent it)"
            )
        stack.extend((c, depth + 1) for c in children)


def leaf_count(value: Any) -> int:
    """An upper bound of the leaf queries ``value`` makes in Lucene, which ``indices.query.bool.max_clause_count``
    counts: every number and string counts once, and a string once per word (``\\w+`` runs) and per CJK
    character (a ``match`` of five words is five term queries); keys count nothing."""
    count = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            stack.extend(item.values())
            count += not item  # match_all: {}
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, str):  # CJK: the standard analyzer makes a term of each ideograph
            count += max(1, len(_WORD.findall(item)) + len(_IDEOGRAPH.findall(item)))
        else:
            count += 1
    return count


def _is_field(field: str, name: str) -> bool:
    base = field.split("^")[0]
    return base == name or base.startswith(name + ".")


def _names(spec: Mapping[str, Any], kind: str) -> list[str]:
    """The fields a fields-listed query names (``fields``, else ``default_field``); PostError when malformed."""
    fields = spec.get("fields")
    if fields is None:
        default = spec.get("default_field")
        if default is None:
            return []
        fields = [default]
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise PostError(f"{kind}.fields must be a list of field names; got {type(fields).__name__}")
    return fields


def is_text_clause(kind: str, spec: Any, text_fields: Sequence[str]) -> bool:
    """Whether the clause ``{kind: spec}`` is the site's search text (module doc), not a restriction."""
    if kind not in TEXT_QUERIES or not isinstance(spec, Mapping):
        return False
    if kind in _FIELD_KEYED:
        return bool(spec) and all(any(_is_field(str(f), t) for t in text_fields) for f in spec)
    fields = _names(spec, kind)
    if kind == "query_string" and isinstance(spec.get("query"), str) and _FIELD_TERM.search(spec["query"]):
        return False
    if not fields or all(f.split("^")[0] in _SEARCH_BOX for f in fields):
        return True
    return all(any(_is_field(f, t) for t in text_fields) for f in fields)


def _as_list(clauses: Any) -> list[Any]:
    if clauses is None:
        return []
    return list(clauses) if isinstance(clauses, list) else [clauses]


def _bool(spec: Mapping[str, Any], text_fields: Sequence[str]) -> dict[str, Any] | None:
    must = [r for c in _as_list(spec.get("must")) if (r := _scoring(c, text_fields)) is not None]
    filters = _as_list(spec.get("filter"))
    must_not = _as_list(spec.get("must_not"))
    should_in = _as_list(spec.get("should"))
    msm = spec.get("minimum_should_match")
    required = bool(_as_list(spec.get("must")) or filters)
    out: dict[str, Any] = {}
    if should_in and (msm is not None or not required):
        should = [_scoring(c, text_fields) or _MATCH_ALL for c in should_in]
        relaxed = any(s is _MATCH_ALL for s in should)
        if msm is not None or not relaxed:  # "any of" with one clause relaxed to match_all: allows everything
            out["should"] = should
            out["minimum_should_match"] = str(msm) if msm is not None else "1"  # a string: ml-commons would make 1.0
    if must or filters:
        out["filter"] = must + filters
    if must_not:
        out["must_not"] = must_not
    if not out:
        return None
    if "adjust_pure_negative" in spec:  # changes what a must_not-only bool matches
        out["adjust_pure_negative"] = spec["adjust_pure_negative"]
    return {"bool": out}


def _scoring(query: Any, text_fields: Sequence[str]) -> dict[str, Any] | None:
    """The skeleton of a clause in a scoring position (None: it restricts nothing)."""
    if not isinstance(query, Mapping) or len(query) != 1:
        return dict(query) if isinstance(query, Mapping) and query else None  # malformed: OpenSearch's to refuse
    (kind, spec), = query.items()
    if kind == "match_all":
        return None
    if is_text_clause(kind, spec, text_fields):
        return None
    if not isinstance(spec, Mapping):
        return dict(query)
    if kind == "bool":
        return _bool(spec, text_fields)
    if kind in ("function_score", "script_score") and "min_score" not in spec:
        return _scoring(spec.get("query"), text_fields) if spec.get("query") is not None else None
    if kind == "boosting":
        return _scoring(spec.get("positive"), text_fields)
    if kind == "constant_score":
        return {"bool": {"filter": _as_list(spec.get("filter"))}} if spec.get("filter") is not None else None
    if kind == "dis_max":
        parts = [_scoring(c, text_fields) for c in _as_list(spec.get("queries"))]
        if not parts or any(p is None for p in parts):
            return None
        return {"bool": {"should": parts, "minimum_should_match": "1"}}
    return dict(query)  # a leaf (ids, terms, range …) or a compound this module does not know: verbatim


def restriction(query: Any, text_fields: Sequence[str]) -> dict[str, Any] | None:
    """The restriction skeleton of the site's ``query`` (module doc): a filter-context query allowing what the
    query allows with its text relaxed, or None when it restricts nothing. ``text_fields``: the index's title and
    body fields.

    Raises:
        PostError: the query is nested deeper than :data:`MAX_DEPTH` levels, or a clause is malformed.
    """
    check_depth(query)
    return None if query is None else _scoring(query, text_fields)


def demotions(query: Any) -> list[tuple[Any, float]]:
    """``(negative, negative_boost)`` of each ``boosting`` the site's query holds in a scoring position: what the
    site demotes, to demote it in semdup's ranking as well."""
    out: list[tuple[Any, float]] = []
    stack: list[Any] = [query]
    while stack:
        item = stack.pop()
        if not isinstance(item, Mapping) or len(item) != 1:
            continue
        (kind, spec), = item.items()
        if not isinstance(spec, Mapping):
            continue
        if kind == "boosting":
            boost = spec.get("negative_boost")
            if spec.get("negative") is not None and isinstance(boost, int | float) and not isinstance(boost, bool):
                out.append((spec["negative"], float(boost)))
            stack.append(spec.get("positive"))
        elif kind == "bool":
            stack.extend(_as_list(spec.get("must")) + _as_list(spec.get("should")))
        elif kind in ("function_score", "script_score"):
            stack.append(spec.get("query"))
        elif kind == "dis_max":
            stack.extend(_as_list(spec.get("queries")))
    return out
