"""The query-time HTTP service (FastAPI): ``POST /v1/rerank``, ``/healthz``, ``/readyz``, ``/metrics``.

    app = create_app(ServiceSettings.from_env())      # or: semdup serve --bundle B --index I
    uvicorn semdup.reranker.service:app_from_env --factory --workers 2

Nothing is created at import time: the factory loads the bundle (one onnxruntime session per process, so
one per uvicorn worker) and a client whose every call carries the reranker's timeout. Endpoints that call
OpenSearch are plain ``def`` functions, so FastAPI runs them in its thread pool and the event loop never
blocks; the pool holds ``threads`` workers.

Every error is JSON ``{"error": {"type", "message"}}``: 400 bad input (empty, huge or binary text, bad
fields), 401 missing or wrong ``X-API-Key``, 404 unknown index, 409 index of another model version,
413 body over ``max_body_bytes``, 503 OpenSearch down, 504 OpenSearch too slow, 500 anything else (logged).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from semdup.core.errors import ConfigError, IndexError_, OpenSearchUnavailable, PostError, SemdupError
from semdup.core.logs import active_format, configure_logging, log_format_from_env
from semdup.reranker.candidates import SearchTimeout
from semdup.reranker.reranker import ModelMismatch, Reranker
from semdup.reranker.settings import ServiceSettings

__all__ = ["create_app", "app_from_env", "configure_service_logging", "error_status", "STARTUP_FAILURE"]

logger = logging.getLogger(__name__)

API_KEY_HEADER = "X-API-Key"
STARTUP_FAILURE = 3  # uvicorn's exit status for a worker that cannot start: its supervisor stops, not restarts
_OPEN_PATHS = {"/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/redoc"}


def error_status(exc: BaseException) -> int:
    """The HTTP status for an error raised while reranking."""
    if isinstance(exc, (PostError, ConfigError, ValueError)):
        return 400
    if isinstance(exc, ModelMismatch):
        return 409
    if isinstance(exc, IndexError_):
        return 404
    if isinstance(exc, SearchTimeout):
        return 504
    if isinstance(exc, OpenSearchUnavailable):
        return 503
    return 500


class RerankRequest(BaseModel):
    title: str = Field("", description="The new post's title.")
    body: str = Field("", description="The new post's body (HTML allowed; cleaned like indexed posts).")
    k: int = Field(10, ge=1, description="How many candidates to return (at most the server's max_k).")
    exclude_id: str | None = Field(None, description="Leave this post out (the query itself when indexed).")
    index: str | None = Field(None, description="Index to search (default: the server's).")
    templates: list[str] | None = Field(None, description="Lexical candidate templates (default: the server's).")


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


class _BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, by Content-Length or by counting a chunked body."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await _send_json(
                send,
                413,
                "BodyTooLarge",
                f"request body of {int(length)} bytes is over the limit of "
                f"{self.limit} bytes; shorten the post or raise SEMDUP_MAX_BODY_BYTES",
            )
            return
        seen = 0

        async def limited() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(seen)
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge as exc:
            await _send_json(
                send,
                413,
                "BodyTooLarge",
                f"request body over the limit of {self.limit} bytes "
                f"({exc.args[0]} read); shorten the post or raise SEMDUP_MAX_BODY_BYTES",
            )


class _TooLarge(Exception):
    pass


class _AuthError(Exception):
    pass


async def _send_json(send: Any, status: int, kind: str, message: str) -> None:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def create_app(settings: ServiceSettings, reranker: Reranker | None = None) -> Any:
    """The ASGI app. ``reranker`` may be given (tests, embedding); else it is built from ``settings``.

    Raises:
        ConfigError: no API key while auth is on (raised by ``ServiceSettings``), a bad bundle or setting.
    """
    if reranker is None:
        from semdup.core.clients import connect

        client = connect(settings.opensearch, check=False)  # the service starts while the cluster is down
        reranker = Reranker.from_bundle(
            settings.bundle,
            client,
            settings.index,
            templates=settings.reranker.templates,
            variant=settings.reranker.variant,
            sparse=settings.reranker.sparse,
            knn=settings.reranker.knn,
            k_candidates=settings.reranker.k_candidates,
            search_timeout=settings.reranker.search_timeout,
            calibration=settings.calibration,
            field_cache=settings.reranker.field_cache,
        )
    registry = CollectorRegistry()
    requests_total = Counter("semdup_rerank_requests", "HTTP requests", ["path", "status"], registry=registry)
    latency = Histogram(
        "semdup_rerank_request_seconds",
        "HTTP request latency",
        ["path"],
        registry=registry,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    )
    errors_total = Counter("semdup_rerank_errors", "HTTP error answers by type", ["path", "type"], registry=registry)

    def require_key(request: Request) -> None:
        if not settings.auth:
            return
        given = request.headers.get(API_KEY_HEADER)
        if given is None or not hmac.compare_digest(given.encode("utf-8"), (settings.api_key or "").encode("utf-8")):
            raise _AuthError("missing or wrong API key; send it in the X-API-Key header")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # the pool that runs the blocking endpoints (and so the OpenSearch calls)
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        yield

    app = FastAPI(
        title="semdup reranker",
        version=reranker.version,
        lifespan=lifespan,
        description="Ranked duplicate candidates for a new post, with fused scores and decisions.",
    )
    app.state.reranker = reranker
    app.state.settings = settings

    @app.middleware("http")
    async def _observe(request: Request, call_next: Any) -> Any:
        start = time.perf_counter()
        path = request.url.path if request.url.path in _OPEN_PATHS | {"/v1/rerank"} else "other"
        try:
            response = await call_next(request)
        except Exception:  # an error no handler took: count it, then let Starlette answer 500
            requests_total.labels(path, "500").inc()
            raise
        took = time.perf_counter() - start
        latency.labels(path).observe(took)
        requests_total.labels(path, str(response.status_code)).inc()
        logger.info("request", extra={"path": path, "status": response.status_code, "ms": round(took * 1000, 2)})
        return response

    def _error(request: Request, status: int, kind: str, message: str) -> JSONResponse:
        errors_total.labels(
            request.url.path if request.url.path in _OPEN_PATHS | {"/v1/rerank"} else "other", kind
        ).inc()
        return JSONResponse({"error": {"type": kind, "message": message}}, status_code=status)

    @app.exception_handler(_AuthError)
    async def _auth(request: Request, exc: _AuthError) -> JSONResponse:
        return _error(request, 401, "Unauthorized", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
        return _error(
            request,
            400,
            "BadRequest",
            f"{where or 'body'}: {first.get('msg', 'invalid request')}; "
            "expected JSON {title, body, k, exclude_id?, index?, templates?}",
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(request, exc.status_code, "HTTPError", str(exc.detail))

    @app.exception_handler(SemdupError)
    async def _semdup(request: Request, exc: SemdupError) -> JSONResponse:
        status = error_status(exc)
        if status == 500:
            logger.error("rerank failed: %s", exc)
        return _error(request, status, type(exc).__name__, str(exc))

    @app.exception_handler(ValueError)
    async def _value(request: Request, exc: ValueError) -> JSONResponse:
        return _error(request, 400, "BadRequest", str(exc))

    @app.exception_handler(Exception)
    async def _any(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error while answering %s", request.url.path)
        return _error(request, 500, "InternalError", f"{type(exc).__name__}; see the service log")

    @app.get("/healthz", tags=["probes"])
    def healthz() -> dict[str, Any]:
        """The process is up (no OpenSearch call)."""
        return {"status": "ok", "model": reranker.version}

    @app.get("/readyz", tags=["probes"])
    def readyz() -> JSONResponse:
        """Ready when OpenSearch answers and the index holds this bundle's version (or is unclaimed)."""
        checks: dict[str, Any] = {"bundle": reranker.version}
        try:
            reranker.client.info(request_timeout=settings.reranker.search_timeout)
            checks["opensearch"] = "ok"
            from semdup.index_format.mapping import index_model

            models = index_model(reranker.client, settings.index)
            checks["index"] = models
            wrong = {k: v for k, v in models.items() if v not in (None, reranker.version)}
            if wrong:
                return JSONResponse(
                    {
                        "ready": False,
                        "checks": checks,
                        "reason": f"index holds model {sorted(set(wrong.values()))}, not {reranker.version}",
                    },
                    status_code=503,
                )
        except Exception as exc:  # any failure means "not ready"; the reason goes back to the probe
            return JSONResponse(
                {"ready": False, "checks": checks, "reason": f"{type(exc).__name__}: {exc}"[:500]}, status_code=503
            )
        return JSONResponse({"ready": True, "checks": checks})

    @app.get("/metrics", tags=["probes"])
    def metrics() -> PlainTextResponse:
        """Prometheus metrics of this process (request count, latency histogram, errors)."""
        return PlainTextResponse(generate_latest(registry).decode("utf-8"), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/rerank", response_model=RerankResponse, dependencies=[Depends(require_key)], tags=["rerank"])
    def rerank(req: RerankRequest) -> dict[str, Any]:
        """Top-k duplicate candidates for a post: fused score, components, probability, decision."""
        from semdup.core.posts import Post

        if req.k > settings.max_k:
            raise ValueError(f"k = {req.k} is over this server's max_k = {settings.max_k}; ask for fewer candidates")
        if len(req.title) + len(req.body) > settings.max_text_chars:
            raise PostError(
                f"title + body hold {len(req.title) + len(req.body)} characters, over the limit of "
                f"{settings.max_text_chars}; send the first part of the post"
            )
        rr = reranker
        if req.templates:
            from dataclasses import replace

            new = replace(rr.settings, templates=tuple(req.templates))  # validates the names (ConfigError → 400)
            rr = rr.with_settings(templates=new.templates)
        post = Post(id=req.exclude_id or "_query", title=req.title, body=req.body)
        cands = rr.rank(post, k=req.k, exclude_id=req.exclude_id, index=req.index)
        return {
            "model": rr.version,
            "index": req.index or settings.index,
            "threshold": rr.threshold,
            "candidates": [c.to_json() for c in cands],
        }

    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)  # outermost: before any parsing
    return app


def configure_service_logging(fmt: str | None = None) -> str:
    """Logging of a service process, through :func:`semdup.core.logs.configure_logging` like every semdup process.

    The format is ``fmt``, else the one this process already uses (``semdup serve``), else
    ``$SEMDUP_LOG_FORMAT`` (a uvicorn worker process, or ``uvicorn ... --factory``). JSON mode logs at INFO
    or finer, so the collector gets one record per request; text mode keeps the level the process has.

    Returns:
        The format used, ``"text"`` or ``"json"``.
    """
    chosen = fmt or active_format() or log_format_from_env()
    level = logging.getLogger().level
    if chosen == "json":
        level = min(level, logging.INFO)
    return configure_logging(level, chosen)


def app_from_env() -> Any:
    """uvicorn factory (``--factory``): settings from the environment / ``$SEMDUP_CONFIG``, one app per worker.

    In JSON mode a failure to start is logged as one record (with its traceback) and the worker exits with
    :data:`STARTUP_FAILURE`, instead of a traceback printed beside the JSON lines.
    """
    fmt = configure_service_logging()
    try:
        settings = ServiceSettings.from_env()
        app = create_app(settings)
    except Exception as exc:
        if fmt != "json":
            raise
        logger.critical("the reranking service could not start: %s", exc, exc_info=True)
        raise SystemExit(STARTUP_FAILURE) from exc
    logger.info(
        "reranking service: bundle %s (model %s), index %s, OpenSearch %s, auth %s",
        settings.bundle,
        app.state.reranker.version,
        settings.index,
        settings.opensearch.safe_url,
        "on" if settings.auth else "OFF",
    )
    return app
