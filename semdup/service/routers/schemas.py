"""The HTTP service's request and response bodies, one module for every router (rerank, ingest, probes).

Request bodies carry this server's bounds in their schema (``max_text_chars``, ``max_k``, ``max_ingest_posts``),
so they are made per app from its :class:`~semdup.service.settings.ServiceSettings` (:func:`request_model`,
:func:`ingest_models`); what the schema allows is what the service takes, and a schema-driven client or fuzzer
reaches the search path. Errors are ``{"error": {"type", "message"}}`` (:class:`ErrorResponse`); a 422 adds
FastAPI's ``detail`` list (:class:`ValidationErrorResponse`). :func:`responses` documents an endpoint's error
answers in the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Query
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from semdup.core.errors import OpenSearchRefused, OpenSearchUnavailable, SearchTimeout
from semdup.core.post_rules import MAX_ID_BYTES, VISIBLE_TEXT_PATTERN, blank_problem, text_problem
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.reranker.similar import MAX_SIZE, MAX_TITLE_CHARS
from semdup.service.admission import RETRY_AFTER_S
from semdup.service.post_fields import POST_TEXT_CONFIG, DocId, PostId, PostText, check_visible, text_field
from semdup.service.settings import ServiceSettings

__all__ = [
    "API_KEY_HEADER",
    "MAX_INDEX_CHARS",
    "NOT_SERVED",
    "RETRY_AFTER_HEADER",
    "cluster_message",
    "NoQuery",
    "NO_QUERY",
    "request_model",
    "ingest_models",
    "responses",
    "CandidateOut",
    "RerankResponse",
    "ErrorBody",
    "ErrorResponse",
    "ValidationItem",
    "ValidationErrorResponse",
    "ReadyResponse",
    "IngestAccepted",
    "IngestErrorResponse",
    "SimilarQuery",
    "SimilarOut",
    "SimilarResponse",
    "rewrite_model",
    "RewriteResponse",
    "documents_model",
    "DocumentScore",
    "DocumentsResponse",
]

API_KEY_HEADER = "X-API-Key"
MAX_INDEX_CHARS = 255
NOT_SERVED = "index {name!r} is not one this API key may search, or it does not exist; name one of your indices"
_CLUSTER_MESSAGES = (
    (SearchTimeout, "OpenSearch did not answer in time; try again later (the service's log says why)"),
    (OpenSearchUnavailable, "OpenSearch is unavailable; try again later (the service's log says why)"),
    (OpenSearchRefused, "OpenSearch refused the service's request; the service's log says why"),
)


def cluster_message(exc: BaseException) -> str | None:
    """What a caller is told of the cluster's failure ``exc`` (None: ``exc`` is not the cluster's): a fixed line,
    never the error's own message. That names the cluster's host, port and index paths, and the callers of
    ``/readyz``, of the review login and of a page with any cookie hold no key (a ``search`` key is anyone's too);
    the service logs the message instead (issue #34)."""
    for kind, message in _CLUSTER_MESSAGES:
        if isinstance(exc, kind):
            return message
    return None


class NoQuery(BaseModel):
    """The query string of an endpoint that reads none (the POST endpoints: what they read is in the body). An
    unknown parameter is refused with 422 naming it rather than ignored: ``POST /v1/posts?index=other`` wrote to
    the key's default index while its sender believed it wrote to ``other`` (issue #34)."""

    model_config = ConfigDict(extra="forbid")


# An endpoint's parameter that refuses every query parameter (``query: NO_QUERY = None``; see NoQuery).
NO_QUERY = Annotated[NoQuery | None, Query(include_in_schema=False)]


def _whole_number(value: Any) -> Any:
    """JSON Schema counts ``87.0`` as an integer; strict pydantic does not. Strings and booleans stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def request_model(settings: ServiceSettings) -> type[BaseModel]:
    """The ``/v1/rerank`` body, with this server's bounds in its schema: what the schema allows is what the
    service takes (but for markup-only text such as ``<p></p>``, which no regular expression tells apart). The
    title and body meet the rules every post meets (:mod:`semdup.service.post_fields`)."""
    limit = settings.max_text_chars

    class RerankRequest(BaseModel):
        """A new post to find duplicates of: a title or a body (or both) holding visible text."""

        model_config = POST_TEXT_CONFIG

        title: PostText = text_field(limit, "The new post's title.")
        body: PostText = text_field(limit, "The new post's body (HTML allowed; cleaned like indexed posts).")
        k: Annotated[int, BeforeValidator(_whole_number)] = Field(
            10, ge=1, le=settings.max_k, description="How many candidates to return."
        )
        exclude_id: str | None = Field(
            None, min_length=1, max_length=MAX_ID_BYTES, description="Leave this post out (the query itself)."
        )
        index: str | None = Field(
            None,
            min_length=1,
            max_length=MAX_INDEX_CHARS,
            description="One of the indices this API key may search (default: the server's index).",
        )
        templates: list[Literal[tuple(LEXICAL_MODELS)]] | None = Field(  # type: ignore[valid-type]
            None,
            min_length=1,
            max_length=len(LEXICAL_MODELS),
            description="Lexical candidate templates, the first one's score is lexnorm's (default: the server's).",
        )

        @model_validator(mode="after")
        def _has_text(self) -> RerankRequest:
            check_visible(self.title, self.body, markup=False)  # markup-only: the reranker's PostError, as before
            return self

    return RerankRequest


def ingest_models(settings: ServiceSettings) -> tuple[type[BaseModel], type[BaseModel]]:
    """The ingest request bodies (posts, ids), with this server's bounds in their schema, like ``request_model``."""
    limit, most = settings.max_text_chars, settings.max_ingest_posts
    index_field = Field(
        None,
        min_length=1,
        max_length=MAX_INDEX_CHARS,
        description="One of the indices this API key may use (default: the server's index).",
    )

    class PostIn(BaseModel):
        """A new or edited post: an id and a title or a body (or both) holding visible text, by the rules that
        `semdup index-posts --input` and the workers apply too."""

        model_config = POST_TEXT_CONFIG

        id: PostId
        title: PostText = text_field(limit, "The post's title.")
        body: PostText = text_field(limit, "The post's body (HTML allowed).")

        @model_validator(mode="after")
        def _has_text(self) -> PostIn:
            check_visible(self.title, self.body, self.id)
            return self

    class IngestPosts(BaseModel):
        """Posts to encode and write into an index semdup created (``semdup index-posts``)."""

        model_config = ConfigDict(extra="forbid", strict=True)

        index: str | None = index_field
        posts: list[PostIn] = Field(min_length=1, max_length=most, description=f"1 to {most} posts, ids distinct.")

        @model_validator(mode="after")
        def _distinct(self) -> IngestPosts:
            seen: set[str] = set()
            for post in self.posts:
                if post.id in seen:  # two versions of one post could be written in either order
                    raise ValueError(f"post id {post.id[:80]!r} appears twice; send each post once")
                seen.add(post.id)
            return self

    class IngestIds(BaseModel):
        """Ids of posts to delete or re-read: any id the index can hold (:data:`DocId`, so that posts written
        before the stricter rules for new ids can still be deleted); repeated ids are sent once."""

        model_config = ConfigDict(extra="forbid", strict=True)

        index: str | None = index_field
        ids: list[DocId] = Field(min_length=1, max_length=most, description=f"1 to {most} post ids.")

    return IngestPosts, IngestIds


class CandidateOut(BaseModel):
    id: str
    score: float
    components: dict[str, float | None]
    probability: float | None
    is_duplicate: bool | None
    complete: bool
    sources: list[str]


class RerankResponse(BaseModel):
    model: str
    index: str
    threshold: float | None
    candidates: list[CandidateOut]
    reason: str | None = Field(
        default=None, description="Why there are no candidates, when there are none (never a silent empty answer)."
    )


class ErrorBody(BaseModel):
    type: str = Field(description="The error's kind, e.g. Unauthorized, SearchIndexError, SearchTimeout.")
    message: str = Field(description="What was wrong and how to fix it.")


class ErrorResponse(BaseModel):
    error: ErrorBody


class ValidationItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """FastAPI's ``detail`` list, and the service's one-line ``error`` beside it."""

    detail: list[ValidationItem]
    error: ErrorBody


class ReadyResponse(BaseModel):
    ready: bool
    checks: dict[str, Any]
    reason: str | None = None


class IngestAccepted(BaseModel):
    """What went to the broker: ``enqueued`` posts or ids in ``tasks`` tasks of one job (queued, not yet written)."""

    index: str
    task: str = Field(description="The indexer task enqueued: index_posts, sync_posts or delete_posts.")
    model: str | None = Field(description="The bundle version the workers must run (none for deletes).")
    enqueued: int
    tasks: int
    job: str = Field(
        description="The job the tasks belong to (its batches are in semdup's ledger until written); follow it "
        "with `semdup index-posts --index INDEX --job JOB`."
    )


class IngestErrorResponse(BaseModel):
    """The error, and for a broker that failed part-way how many were enqueued before it."""

    error: ErrorBody
    enqueued: int | None = Field(None, description="Posts or ids enqueued before the broker failed (503 only).")
    tasks: int | None = Field(None, description="Tasks enqueued before the broker failed (503 only).")


def _visible_title(value: str) -> str:
    problem = text_problem("title", value, max_chars=None) or blank_problem(value, "")
    if problem is not None:
        raise ValueError(problem)
    return value


class SimilarQuery(BaseModel):
    """``GET /v1/similar``'s query parameters: the title being typed, the index, how many posts; any other is
    refused (422 naming it), not ignored."""

    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, AfterValidator(_visible_title)] = Field(
        min_length=1,
        max_length=MAX_TITLE_CHARS,
        description="The title the asker is typing: a visible character, no control character but tab, newline "
        "and return, no U+FFFD.",
        json_schema_extra={"pattern": VISIBLE_TEXT_PATTERN},
    )
    index: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_INDEX_CHARS,
        description="One of the indices this API key may search (default: the server's index).",
    )
    size: int = Field(5, ge=1, le=MAX_SIZE, description="How many similar posts to return.")


class SimilarOut(BaseModel):
    id: str
    score: float = Field(description="The fused score of the title against the post (higher is closer).")
    title: str | None = Field(description="The post's title as indexed (markup removed); show it as text.")
    sources: list[str] = Field(description="The candidate paths that found it: bm25, knn.")
    complete: bool = Field(description="False when the post's semdup fields are not indexed yet.")
    url: str | None = Field(description="The post's page on the site (SEMDUP_POST_URL), None without one.")


class SimilarResponse(BaseModel):
    model: str
    index: str
    similar: list[SimilarOut]


RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": f"Seconds to wait before retrying: {RETRY_AFTER_S} with the Overloaded 503, 2 with the 503 "
        "of OpenSearch or the broker down, the rest of the block with the TooManyFailures 429.",
        "schema": {"type": "integer"},
    }
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of an endpoint that may answer these error statuses."""
    said = {
        401: "Missing or wrong X-API-Key.",
        403: "The key lacks this endpoint's scope (search: rerank and similar; ingest: the /v1/posts endpoints).",
        404: "An index this key may not search, or that does not exist (the same answer for both).",
        409: "The index holds vectors of another model version, holds no encoded post yet, or (sync) is one "
        "semdup created rather than a site's index.",
        413: "Request body over the server's max_body_bytes.",
        422: "Bad input: a schema violation, malformed JSON, or a post without usable text.",
        429: "Too many wrong keys from this address (type TooManyFailures): wait Retry-After seconds.",
        500: "An unexpected error (logged by the service).",
        503: "OpenSearch is down (with Retry-After: 2), or this worker has SEMDUP_MAX_IN_FLIGHT requests in flight "
        f"(type Overloaded, with Retry-After: {RETRY_AFTER_S}); retry then, or on another replica.",
        504: "OpenSearch did not answer within the search timeout.",
    }
    out: dict[int | str, dict[str, Any]] = {
        c: {"model": ValidationErrorResponse if c == 422 else ErrorResponse, "description": said[c]} for c in codes
    }
    for code in (429, 503):
        if code in out:
            out[code]["headers"] = RETRY_AFTER_HEADER
    return out


def rewrite_model(settings: ServiceSettings) -> type[BaseModel]:
    """The ``/v1/search/rewrite`` body: a site's ``_search`` body, as the search pipeline's processor sends it."""

    class RewriteRequest(BaseModel):
        """A search body of the site's application (its ``query``, ``size``, ``from`` …) and the index it searches."""

        model_config = ConfigDict(extra="forbid")

        index: str | None = Field(
            None, min_length=1, max_length=MAX_INDEX_CHARS,
            description="The site's index the search runs on (default: the server's index).",
        )  # fmt: skip
        search: dict[str, Any] = Field(description="The site's search body; its full-text clauses give the post.")

    return RewriteRequest


class RewriteResponse(BaseModel):
    query: dict[str, Any] = Field(description="The search's new query: semdup's candidates with their fused scores.")
    model: str
    index: str
    ranked: int = Field(description="one-hop: how many of the lexical template's top k the query holds; "
                        "candidates: how many scored ids it holds (the site's size and from page through them).")
    mode: str = Field("candidates", description="one-hop: the node ranks, semdup's fusion inside the query "
                      "(semdup's own index); candidates: semdup ranked, the query holds its scored ids.")


def _unencodable(field: str, text: str) -> str | None:
    """Why ``text`` cannot be sent to the cluster (a lone surrogate UTF-8 cannot encode), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{field} holds a lone surrogate U+{ord(text[exc.start]):04X}, which UTF-8 cannot encode"
    return None


def documents_model(settings: ServiceSettings) -> type[BaseModel]:
    """The ``/v1/rerank/documents`` body: Cohere's rerank shape (what ml-commons' and Elasticsearch's rerank
    connectors send), plus what the documents are."""
    limit, most = settings.max_text_chars, settings.max_k

    class DocumentsRequest(BaseModel):
        """A query text and the documents to score against it: the site's post ids (scored from the index) or
        texts (encoded here)."""

        model_config = ConfigDict(extra="forbid")

        query: str = Field(min_length=1, max_length=limit, description="The query text (a title, or title and body).")
        documents: list[str] = Field(
            min_length=1, max_length=most,
            description=f"1 to {most} documents (texts: at most {limit} characters each, the rules of a post's text).",
        )  # fmt: skip
        top_n: int | None = Field(None, ge=1, description="Return the best top_n (default: every document).")
        documents_are: Literal["texts", "ids"] = Field(
            "texts", description="texts: each document is a post's text; ids: each is a post id of the index."
        )
        index: str | None = Field(
            None, min_length=1, max_length=MAX_INDEX_CHARS, description="The index (default: the server's)."
        )

        @model_validator(mode="after")
        def _visible(self) -> DocumentsRequest:
            problem = text_problem("query", self.query, None) or blank_problem(self.query, "")
            if problem:
                raise ValueError(f"query: {problem}")
            for n, doc in enumerate(self.documents):  # texts: the rules of a post's text; ids: encodable at all
                problem = (text_problem(f"documents[{n}]", doc, limit) if self.documents_are == "texts"
                           else _unencodable(f"documents[{n}]", doc))  # fmt: skip
                if problem:
                    raise ValueError(problem)
            return self

    return DocumentsRequest


class DocumentScore(BaseModel):
    index: int = Field(description="The document's position in the request.")
    relevance_score: float = Field(description="semdup's fused score (documents it could not score: below all).")


class DocumentsResponse(BaseModel):
    results: list[DocumentScore]
    model: str
