"""The candidate paths' requests: which paths go together in one request, and the merge of their hits.

The sequential call sends every path in one ``_msearch/template`` (:func:`search_candidates`). The overlapped call
(:mod:`semdup.reranker.reranker`) sends the lexical templates while the query is encoded and the k-NN (or
learned-sparse) query once its vector is there (:func:`search_paths` twice), then merges the two as if they had
been one request (:func:`merge_paths`). A lone k-NN or sparse query goes as a ``_search`` whose hits carry their
lexical score (:func:`with_lexical_score`), so no candidate needs a second request for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from semdup.core.errors import SemdupError
from semdup.index_format.schema import PACKED_FIELD
from semdup.reranker.candidates import (
    DOCVALUE_FIELDS,
    LEXICAL_QUERY_NAME,
    CandidateSet,
    NamedScoresUnsupported,
    call_opensearch,
    knn_query,
    merge_hits,
    response_hits,
    sparse_query,
)
from semdup.search_templates import template_id, template_params

__all__ = ["PathHits", "with_lexical_score", "search_paths", "merge_paths", "search_candidates"]


def with_lexical_score(body: dict[str, Any], field: str, text: str) -> dict[str, Any]:
    """``body`` whose hits also carry the primary template's score as the named-query score
    :data:`LEXICAL_QUERY_NAME`, their ranking unchanged (run with ``_search?include_named_queries_score=true``,
    OpenSearch ≥ 2.13; ``_msearch`` refuses the parameter and ``_search/template`` answers NaN).

    The template's score of a candidate is its ``match`` clause's score (the ``bool`` around it adds only
    filters), so the same ``match``, named, reports exactly that float for every hit it matches. It sits in a
    ``post_filter`` that also matches everything: the query, its hits and their scores stay the sparse / k-NN
    query's own (inside the query, even with boost 0, it changes which k-NN neighbours come back). The
    candidates these paths alone find need no second request for their lexical score (:func:`lexical_scores_for`).
    """
    named = {"match": {field: {"query": text, "_name": LEXICAL_QUERY_NAME}}}
    out = dict(body)
    out["post_filter"] = {"bool": {"should": [named, {"match_all": {}}]}}
    return out


@dataclass
class PathHits:
    """The hits of some candidate paths from one request, before merging (:func:`merge_paths`).

    Attributes:
        named: (path name, [(id, score)]) in request order.
        fields: the semdup fields decoded from the hits' docvalue fields.
        lexical: the primary template's score of the sparse / k-NN hits that match it (named-query scores).
        scored: the hits whose primary-template score is known (in ``lexical``, or no match = 0).
    """

    named: list[tuple[str, list[tuple[str, float]]]] = field(default_factory=list)
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)
    lexical: dict[str, float] = field(default_factory=dict)
    scored: set[str] = field(default_factory=set)


def search_paths(
    client: Any,
    index: str,
    text: str,
    *,
    templates: Sequence[str],
    variant: str,
    size: int,
    timeout: float,
    exclude_id: str | None = None,
    restrict_ids: Sequence[str] | None = None,
    sparse_terms: Mapping[str, float] | None = None,
    knn_vector: Sequence[float] | None = None,
    query_template: str | None = None,
    docvalue_fields: Sequence[str] | None = DOCVALUE_FIELDS,
    lexical_field: str | None = None,
) -> PathHits:
    """Run the given candidate paths in one ``_msearch/template`` call, unmerged (see :func:`search_candidates`).

    ``lexical_field``: the primary template's match field; with it, where one sparse or k-NN query is all that is
    asked, it goes as one ``_search`` whose hits carry their lexical score (:func:`with_lexical_score`).
    """
    body: list[dict[str, Any]] = []
    names: list[str] = []
    ids = list(restrict_ids) if restrict_ids is not None else None
    dv = list(docvalue_fields) if docvalue_fields else None
    for model in templates:
        body += [
            {"index": index},
            {
                "id": template_id(model, variant),
                "params": template_params(text, size=size, exclude_id=exclude_id, ids=ids, docvalue_fields=dv),
            },
        ]
        names.append(model)
    inline: list[tuple[str, dict[str, Any]]] = []
    if sparse_terms:
        inline.append(("sparse", sparse_query(sparse_terms, size, exclude_id, ids, dv)))
    if knn_vector is not None:
        inline.append(("knn", knn_query(knn_vector, size, exclude_id, ids, dv)))
    if lexical_field is not None and len(inline) == 1 and not templates:  # one _search, its hits with the lexical
        return _scored_search(client, index, inline[0][0], with_lexical_score(inline[0][1], lexical_field, text),
                              timeout, dv)  # fmt: skip
    plain: list[dict[str, Any]] = []
    for name, query in inline:
        if query_template:  # the stored pass-through template: no script compilation per request
            body += [{"index": index}, {"id": query_template, "params": {"body": query}}]
            names.append(name)
        else:
            plain += [{"index": index}, query]
    responses: list[Any] = []
    if body:
        try:
            resp = call_opensearch(
                client.msearch_template,
                f"searching candidates in {index!r}",
                body=body,
                params={"request_timeout": timeout},
            )
        except SemdupError as exc:
            if "no requests added" not in str(exc):
                raise
            # OpenSearch drops a template request whose stored script is missing, then refuses the empty batch
            raise SemdupError(
                f"the cluster lacks the stored search templates "
                f"{', '.join(template_id(m, variant) for m in templates)}; store them once as a user allowed "
                "cluster:admin/script/put (`semdup enable`, or the reranker itself when its user may)"
            ) from exc
        responses = list(resp["responses"])
    if plain:  # no stored pass-through template (no right to store scripts): a second round trip
        more = call_opensearch(
            client.msearch, f"searching candidates in {index!r}", body=plain, params={"request_timeout": timeout}
        )
        responses += more["responses"]
        names += [name for name, _ in inline]
    out = PathHits()
    fields: dict[str, dict[str, Any]] | None = {} if dv and PACKED_FIELD in dv else None
    out.named = [(name, response_hits(r, index, name, fields)) for name, r in zip(names, responses, strict=True)]
    out.fields = fields or {}
    return out


def _scored_search(
    client: Any, index: str, name: str, body: dict[str, Any], timeout: float, dv: list[str] | None
) -> PathHits:
    """One sparse or k-NN search whose hits carry their lexical score (:func:`with_lexical_score`).

    Raises:
        NamedScoresUnsupported: the cluster has no ``include_named_queries_score`` (OpenSearch before 2.13).
    """
    params = {"request_timeout": timeout, "include_named_queries_score": "true"}
    try:
        resp = call_opensearch(client.search, f"searching candidates in {index!r}", index=index, body=body,
                               params=params)  # fmt: skip
    except SemdupError as exc:
        if "include_named_queries_score" in str(exc):
            raise NamedScoresUnsupported(f"the cluster behind {index!r} has no include_named_queries_score") from exc
        raise
    out = PathHits()
    fields: dict[str, dict[str, Any]] | None = {} if dv and PACKED_FIELD in dv else None
    hits = response_hits(resp, index, name, fields, out.lexical)
    out.named, out.fields, out.scored = [(name, hits)], fields or {}, {doc_id for doc_id, _ in hits}
    return out


def merge_paths(parts: Sequence[PathHits], primary: str) -> CandidateSet:
    """One candidate set from the paths of several requests, as if they had been one (:func:`merge_hits` in the
    parts' order; the first decoded fields of a candidate win, the primary template's own scores over named ones)."""
    out = merge_hits([n for part in parts for n in part.named], primary=primary)
    for part in parts:
        for doc_id, value in part.fields.items():
            out.fields.setdefault(doc_id, value)
    out.scored = set(out.lexical)
    for part in parts:
        for doc_id, score in part.lexical.items():
            out.lexical.setdefault(doc_id, score)
        out.scored |= part.scored
    return out


def search_candidates(
    client: Any,
    index: str,
    text: str,
    *,
    templates: Sequence[str],
    variant: str,
    size: int,
    timeout: float,
    exclude_id: str | None = None,
    restrict_ids: Sequence[str] | None = None,
    sparse_terms: Mapping[str, float] | None = None,
    knn_vector: Sequence[float] | None = None,
    query_template: str | None = None,
    docvalue_fields: Sequence[str] | None = DOCVALUE_FIELDS,
    lexical_field: str | None = None,
) -> CandidateSet:
    """Run every candidate path in one ``_msearch/template`` call and merge the hits.

    Args:
        text: the query text (``query_text(title, body)``).
        templates: lexical models; the first one's scores become the lexical scores.
        sparse_terms: the query's learned BOW weights (adds the learned-sparse path), or None.
        knn_vector: the query's dense vector (adds the k-NN path), or None.
        query_template: the stored pass-through template (:func:`register_query_template`); without it the
            sparse and k-NN queries go in a second ``_msearch`` call.
        docvalue_fields: what each hit carries (decoded into ``CandidateSet.fields``); None = ids and scores only.
        lexical_field: the primary template's match field: the sparse / k-NN hits then carry its score too.
    """
    part = search_paths(
        client,
        index,
        text,
        templates=templates,
        variant=variant,
        size=size,
        timeout=timeout,
        exclude_id=exclude_id,
        restrict_ids=restrict_ids,
        sparse_terms=sparse_terms,
        knn_vector=knn_vector,
        query_template=query_template,
        docvalue_fields=docvalue_fields,
        lexical_field=lexical_field,
    )
    return merge_paths([part], primary=templates[0])
