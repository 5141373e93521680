"""The service's error answers: every error is JSON ``{"error": {"type", "message"}}`` with the status of
:func:`error_status` (the list is in :mod:`semdup.apps.http`), counted in the metrics and scrubbed of credentials;
:func:`add_error_handlers` puts the handlers on an app."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from semdup.core.errors import (
    BrokerUnavailable,
    ConfigError,
    OpenSearchRefused,
    OpenSearchUnavailable,
    PostError,
    SearchIndexError,
    SearchTimeout,
    SemdupError,
)
from semdup.core.json_input import (
    TOO_DEEP,
    TOO_DEEP_TYPE,
    TOO_LONG_NUMBER,
    TOO_LONG_NUMBER_TYPE,
    is_too_deep,
    is_too_long_number,
)
from semdup.core.logs import scrub
from semdup.reranker.reranker import ModelMismatch, NothingIndexed
from semdup.service.auth_throttle import Throttled, retry_after
from semdup.service.metrics import path_label
from semdup.service.routers.access import AuthError, ScopeError
from semdup.service.routers.ingest import NotASiteIndex
from semdup.service.routers.schemas import cluster_message

__all__ = ["error_status", "add_error_handlers", "UNAVAILABLE_RETRY_AFTER_S"]

logger = logging.getLogger("semdup.apps.http")  # the error records keep the logger name operators filter on

UNAVAILABLE_RETRY_AFTER_S = 2  # the Retry-After of a 503 for OpenSearch or the broker down (not Overloaded's own)


def error_status(exc: BaseException) -> int:
    """The HTTP status for an error raised while reranking."""
    if isinstance(exc, (PostError, ConfigError)):
        return 422
    if isinstance(exc, (ModelMismatch, NothingIndexed, NotASiteIndex)):
        return 409
    if isinstance(exc, SearchIndexError):
        return 404
    if isinstance(exc, SearchTimeout):
        return 504
    if isinstance(exc, (OpenSearchUnavailable, BrokerUnavailable)):
        return 503
    return 500


def _validation_items(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's error list without the inputs (they may hold the whole post) or context objects."""
    return [
        {
            "loc": [x if isinstance(x, (str, int)) else str(x) for x in e.get("loc", ())],
            "msg": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]


def _error(
    request: Request, status: int, kind: str, message: str, headers: dict[str, str] | None = None, **more: Any
) -> JSONResponse:
    request.app.state.metrics.errors_total.labels(path_label(request.url.path), kind).inc()
    return JSONResponse(
        {"error": {"type": kind, "message": scrub(message)}, **more}, status_code=status, headers=headers
    )


async def _auth(request: Request, exc: Exception) -> JSONResponse:
    return _error(request, 401, "Unauthorized", str(exc))


async def _scope(request: Request, exc: Exception) -> JSONResponse:
    return _error(request, 403, "Forbidden", str(exc))


async def _throttled(request: Request, exc: Exception) -> JSONResponse:
    seconds = exc.seconds if isinstance(exc, Throttled) else 1.0
    return _error(request, 429, "TooManyFailures", str(exc), headers={"Retry-After": str(retry_after(seconds))})


async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    items = _validation_items(exc.errors())
    first = items[0] if items else {}
    unknown = [str(e["loc"][-1])[:64] for e in items if e["type"] == "extra_forbidden" and e["loc"][:1] == ["query"]]
    if unknown:  # NoQuery, SimilarQuery: refused rather than ignored (POST /v1/posts?index=other)
        many = len(unknown) > 1
        message = (
            f"unknown query parameter{'s' if many else ''} {', '.join(map(repr, unknown))}: this endpoint does not "
            f"read {'them' if many else 'it'}; see /openapi.json for what it takes (a POST reads its body only)"
        )
    elif first.get("type") == "json_invalid":
        message = f"the body is not valid JSON (error at character {first['loc'][-1]}); send a JSON object"
    else:
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        message = f"{where or 'body'}: {first.get('msg', 'invalid request')}; see /openapi.json for the request schema"
    return _error(request, 422, "ValidationError", message, detail=items)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 400:  # FastAPI could not read the body: bad input like any other, 422
        if is_too_deep(exc.__cause__):  # the rule `semdup index-posts --input` skips a line by
            message = f"the body {TOO_DEEP}; send the flat JSON object the schema at /openapi.json describes"
            kind = TOO_DEEP_TYPE
        elif is_too_long_number(exc.__cause__):  # {"k": 1 followed by 5,000 digits}: JSON, but not readable
            message = f"the body {TOO_LONG_NUMBER}; send numbers within the bounds /openapi.json gives"
            kind = TOO_LONG_NUMBER_TYPE
        else:  # not UTF-8
            message = f"{exc.detail}: the body is not UTF-8 JSON; send a UTF-8 JSON object"
            kind = "body_unreadable"
        detail = [{"loc": ["body"], "msg": message, "type": kind}]
        return _error(request, 422, "ValidationError", message, detail=detail)
    return _error(request, exc.status_code, "HTTPError", str(exc.detail), headers=exc.headers)


async def _semdup(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, OpenSearchRefused) and exc.status is None:
        # The client failed itself (an answer it could not read): nothing a caller can act on. Answered as any
        # unexpected error (_any, the server error handler: 500 InternalError, and uvicorn logs the traceback).
        raise exc
    status = error_status(exc)
    public = cluster_message(exc) if status >= 500 else None
    if status == 500 or public is not None:  # the detail (the cluster's address, the index paths) in the log only
        level = logging.ERROR if status == 500 else logging.WARNING
        logger.log(level, "%s answered %d: %s", path_label(request.url.path), status, exc)
    # 503: worth trying again soon (a node lost is replaced by its replicas within seconds, a broker restarts):
    # every 503 says when, as the Overloaded one does, so a caller's client backs off instead of hammering
    retry = {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)} if status == 503 else None
    if public is not None:
        return _error(request, status, type(exc).__name__, public, headers=retry)
    if status == 422:
        detail = [{"loc": ["body"], "msg": scrub(str(exc)), "type": "value_error"}]
        return _error(request, 422, type(exc).__name__, str(exc), detail=detail)
    # e.g. an ingest request's broker failure: how many were enqueued before it
    return _error(request, status, type(exc).__name__, str(exc), headers=retry, **getattr(exc, "details", {}))


async def _any(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error while answering %s", request.url.path)
    return _error(request, 500, "InternalError", f"{type(exc).__name__}; see the service log")


def add_error_handlers(app: FastAPI) -> None:
    """Every error the service answers, as JSON (401, 403, 429, 422, FastAPI's and Starlette's, semdup's, any)."""
    app.add_exception_handler(AuthError, _auth)
    app.add_exception_handler(ScopeError, _scope)
    app.add_exception_handler(Throttled, _throttled)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(SemdupError, _semdup)
    app.add_exception_handler(Exception, _any)
