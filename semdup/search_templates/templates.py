"""Stored mustache templates for candidate retrieval: one per lexical model and query variant.

Template ids are ``semdup-<model>-<variant>``: ``model`` is one of ``bm25 lmj lmd dfr ib tfidf`` (the six
lexical models of BOW-CNN, dos Santos et al. 2015, Tables 3–4) and ``variant`` is ``title`` (match the query
text against titles) or ``text`` (against title + body). Parameters:

    text         the query text (JSON-escaped by OpenSearch's mustache engine)
    size         how many candidates (default 10)
    exclude_id   optional: leave this post out (the query itself, when it is indexed)
    ids          optional: restrict candidates to these post ids (SemEval's 10 candidates); pass
                 ``has_ids: true`` beside it, since a mustache section over a list repeats per element
    docvalue_fields  optional: fields each hit carries from doc values, with ``has_docvalue_fields: true`` beside it
    script_fields    optional: script fields each hit carries (the reranker's fusion components,
                 :mod:`semdup.search_templates.components`), with ``has_script_fields: true`` beside it

Rendered with ``_render/template`` and run with ``_search/template`` / ``_msearch/template``.

:func:`template_body` builds in Python the body a template renders from the same parameters (a test holds every
template's ``_render/template`` against it): the reranker sends it, with its k-NN and learned-sparse bodies, as one
plain ``_msearch``. Rendering mustache in the cluster cost a rerank about a tenth of its time (its parameters carry
the query's vectors for the cosines, rendered through ``toJson`` and parsed again), and an inline template is
compiled anew for every query (OpenSearch refuses more than 75 compilations in 5 minutes).
"""

from __future__ import annotations

from typing import Any

from semdup.index_format.schema import LEXICAL_MODELS, lexical_field

__all__ = ["VARIANTS", "template_id", "template_source", "template_body", "all_templates", "template_params"]

VARIANTS = ("title", "text")

_SOURCE = """{
  "size": {{size}}{{^size}}10{{/size}},
  "_source": false,
  {{#has_docvalue_fields}}"docvalue_fields": {{#toJson}}docvalue_fields{{/toJson}},{{/has_docvalue_fields}}
  {{#has_script_fields}}"script_fields": {{#toJson}}script_fields{{/toJson}},{{/has_script_fields}}
  "track_total_hits": false,
  "query": {
    "bool": {
      "must": [{"match": {"FIELD": {"query": "{{text}}"}}}],
      "filter": [{{#has_ids}}{"ids": {"values": {{#toJson}}ids{{/toJson}}}}{{/has_ids}}],
      "must_not": [{{#exclude_id}}{"ids": {"values": ["{{exclude_id}}"]}}{{/exclude_id}}]
    }
  }
}"""


def template_id(model: str, variant: str = "text") -> str:
    if model not in LEXICAL_MODELS:
        raise ValueError(f"unknown lexical model {model!r}; known: {', '.join(LEXICAL_MODELS)}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown template variant {variant!r}; known: {', '.join(VARIANTS)}")
    return f"semdup-{model}-{variant}"


def template_source(model: str, variant: str = "text") -> str:
    """The mustache source of one template (a string: its sections make it invalid JSON before rendering)."""
    template_id(model, variant)  # validates both names
    return _SOURCE.replace("FIELD", lexical_field(model, variant))


def all_templates() -> dict[str, str]:
    """Every template id with its source."""
    return {template_id(m, v): template_source(m, v) for m in LEXICAL_MODELS for v in VARIANTS}


def template_body(model: str, variant: str, params: dict[str, Any]) -> dict[str, Any]:
    """The search body the stored template ``semdup-<model>-<variant>`` renders from ``params``
    (:func:`template_params`), built here: what ``_render/template`` answers, key for key.

    Example::

        >>> template_body("bm25", "title", template_params("visa qatar", size=3))["query"]["bool"]["must"]
        [{'match': {'title': {'query': 'visa qatar'}}}]
    """
    body: dict[str, Any] = {"size": int(params.get("size") or 10), "_source": False}
    if params.get("has_docvalue_fields"):
        body["docvalue_fields"] = list(params["docvalue_fields"])
    if params.get("has_script_fields"):
        body["script_fields"] = params["script_fields"]
    body["track_total_hits"] = False
    exclude = params.get("exclude_id")
    body["query"] = {"bool": {
        "must": [{"match": {lexical_field(model, variant): {"query": params["text"]}}}],
        "filter": [{"ids": {"values": list(params["ids"])}}] if params.get("has_ids") else [],
        "must_not": [{"ids": {"values": [exclude]}}] if exclude else [],
    }}
    return body


def template_params(
    text: str,
    size: int = 10,
    exclude_id: str | None = None,
    ids: list[str] | None = None,
    docvalue_fields: list[str] | None = None,
    script_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Parameters for a template call; ``ids`` also sets ``has_ids``, ``docvalue_fields`` ``has_docvalue_fields``,
    ``script_fields`` ``has_script_fields``."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    params: dict[str, Any] = {"text": text, "size": int(size)}
    if exclude_id is not None:
        params["exclude_id"] = str(exclude_id)
    if ids is not None:
        params["ids"] = [str(i) for i in ids]
        params["has_ids"] = True
    if docvalue_fields:
        params["docvalue_fields"] = [str(f) for f in docvalue_fields]
        params["has_docvalue_fields"] = True
    if script_fields:
        params["script_fields"] = script_fields
        params["has_script_fields"] = True
    return params
