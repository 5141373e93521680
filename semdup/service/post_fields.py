"""A post's fields in the HTTP request models: the one rule set (:mod:`semdup.core.post_rules`) as pydantic types.

``/v1/rerank`` and the ingest endpoints (``/v1/posts``, ``/sync``, ``/delete``) build their request bodies from
these pieces, so the service refuses exactly what ``semdup index-posts`` skips and the workers park, with the same
reasons (``empty id``, ``id holds control character U+0001 at character 3``). Each piece also states its bounds in
the OpenAPI schema: the id's ``pattern`` (no control character, no U+FFFD, a visible character), ``minLength`` 1,
``maxLength`` 512 and ``x-max-utf8-bytes`` 512 (JSON Schema counts characters; OpenSearch's limit is in bytes, so
an id of 300 two-byte characters is within ``maxLength`` and still refused, as its description says). The ids of
``/v1/posts/delete`` and ``/sync`` are :data:`DocId`: OpenSearch's own limits only, as the workers' delete applies
them (:func:`semdup.indexer.batch_writer.check_doc_id`), so a post written before the stricter rules can go. The text's
``pattern`` (no control character but tab, newline and return, no U+FFFD) and ``maxLength`` (the server's
``max_text_chars``); and a request with a post, an ``anyOf`` that asks for a title or a body with a visible
character. Markup-only text (``<p></p>``) is refused as well, which no regular expression of the schema can say.

The checks run in the validators rather than as pydantic's own ``pattern`` constraint, so a refusal names the rule
(``id is only white space``) instead of quoting the regular expression. Lone surrogates never reach them: pydantic
refuses a string that is not valid Unicode (``string_unicode``), and the rules refuse them for the other paths.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, ValidationInfo

from semdup.core.post_rules import (
    ID_PATTERN,
    MAX_ID_BYTES,
    TEXT_PATTERN,
    VISIBLE_PATTERN,
    blank_problem,
    id_problem,
    opensearch_id_problem,
    text_problem,
    visible_problem,
)

__all__ = ["PostId", "DocId", "PostText", "POST_TEXT_CONFIG", "text_field", "check_visible"]


def _checked_id(value: str) -> str:
    problem = id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _checked_text(value: str, info: ValidationInfo) -> str:
    problem = text_problem(info.field_name or "text", value, max_chars=None)  # the length: the field's maxLength
    if problem is not None:
        raise ValueError(problem)
    return value


PostId = Annotated[
    str,
    Field(
        description=f"A post id: at most {MAX_ID_BYTES} bytes of UTF-8 (fewer characters when some take several "
        "bytes), at least one visible character, no control character and no U+FFFD.",
        json_schema_extra={
            "minLength": 1,
            "maxLength": MAX_ID_BYTES,
            "pattern": ID_PATTERN,
            "x-max-utf8-bytes": MAX_ID_BYTES,
        },
    ),
    AfterValidator(_checked_id),
]


def _checked_doc_id(value: str) -> str:
    problem = opensearch_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# The id of a post to delete or re-read (``/v1/posts/delete``, ``/sync``): any id the index can hold, so a post
# written before the stricter rules of :data:`PostId` (``p4-\u202e``, an id of zero-width spaces) can still go.
DocId = Annotated[
    str,
    Field(
        description=f"The id of a post in the index: any id OpenSearch holds (not empty, at most {MAX_ID_BYTES} "
        "bytes of UTF-8), so that a post written before the stricter rules for new posts can still be deleted.",
        json_schema_extra={"minLength": 1, "maxLength": MAX_ID_BYTES, "x-max-utf8-bytes": MAX_ID_BYTES},
    ),
    AfterValidator(_checked_doc_id),
]

PostText = Annotated[str, AfterValidator(_checked_text)]


def text_field(limit: int, description: str) -> Any:
    """A title or body field: empty by default, at most ``limit`` characters, the text pattern in the schema."""
    return Field("", max_length=limit, description=description, json_schema_extra={"pattern": TEXT_PATTERN})


def check_visible(title: str, body: str, post_id: str | None = None, *, markup: bool = True) -> None:
    """Refuse a post whose title and body hold no visible text (markup, entities and white space do not count).

    ``markup`` False checks only what the schema states (a visible character), for ``/v1/rerank``, whose
    markup-only queries the reranker refuses itself (``PostError``, 422), as it did before these rules were shared.

    Raises:
        ValueError: the rule's reason, with the post's id (cut to 80 characters) when it has one.
    """
    problem = visible_problem(title, body) if markup else blank_problem(title, body)
    if problem is not None:
        raise ValueError(problem if post_id is None else f"post {post_id[:80]!r}: {problem}")


# A request body carrying a post (rerank, ingest): nothing unknown, no coercion, and a title or a body with a
# visible character, stated in the schema as well (``check_visible`` checks it, and markup-only text besides).
POST_TEXT_CONFIG = ConfigDict(
    extra="forbid",
    strict=True,
    json_schema_extra={
        "anyOf": [
            {"required": ["title"], "properties": {"title": {"pattern": VISIBLE_PATTERN}}},
            {"required": ["body"], "properties": {"body": {"pattern": VISIBLE_PATTERN}}},
        ]
    },
)
