"""The query-time HTTP service (FastAPI): ``POST /v1/rerank``, ``/healthz``, ``/readyz``, ``/metrics``, and the
HTTP ingest endpoints ``POST /v1/posts``, ``/v1/posts/sync``, ``/v1/posts/delete`` (:mod:`.ingest_routes`).

    app = create_app(ServiceSettings.from_env())      # or: semdup serve --bundle B --index I
    uvicorn semdup.reranker.service:app_from_env --factory --workers 2

Nothing is created at import time: the factory loads the bundle (one onnxruntime session per process, so
one per uvicorn worker; :func:`load_reranker`, which ``semdup serve`` also runs once before any worker starts)
and a client whose every call carries the reranker's timeout. Endpoints that call OpenSearch are plain ``def``
functions, so FastAPI runs them in its thread pool and the event loop never blocks; the pool holds ``threads``
workers. At most ``max_in_flight`` requests are in flight per process; past that a request gets 503 with
``Retry-After`` at once (:mod:`.admission`). The probes never wait behind reranks: ``/healthz`` and ``/metrics``
run on the event loop (no thread), ``/readyz`` on two threads of its own.

Every error is JSON ``{"error": {"type", "message"}}``: 401 missing or wrong ``X-API-Key`` (an OpenAPI
``APIKeyHeader`` scheme), 404 an index this key may not search or that does not exist (one answer for both, so it
tells nothing about other indices), 405 another method (with ``Allow``), 409 index of another model version,
413 body over ``max_body_bytes`` (declared or counted, chunked too), 422 bad input (FastAPI's ``detail`` list
beside ``error``: schema violations, malformed JSON, a post with no usable text), 503 OpenSearch down (or, for
ingest, no broker, ingest off, or the broker down, with how many were enqueued before it failed; or
``Overloaded``: this worker has ``max_in_flight`` requests in flight, with ``Retry-After``), 504 OpenSearch too
slow, 500 anything else (logged, not leaked). Messages are scrubbed of credentials
(:func:`semdup.core.logs.scrub`). The request schema states every bound the service checks (lengths, ``k``, the
template names, no unknown fields), so a schema-driven client or fuzzer reaches the search path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import APIKeyHeader
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, BeforeValidator, Field, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from semdup.core.errors import (
    BrokerUnavailable,
    ConfigError,
    IndexError_,
    OpenSearchUnavailable,
    PostError,
    SemdupError,
)
from semdup.core.logs import active_format, configure_logging, log_format_from_env, scrub
from semdup.core.post_rules import MAX_ID_BYTES
from semdup.index_format.schema import LEXICAL_MODELS
from semdup.reranker.admission import OVERLOADED, RETRY_AFTER_S, Admission, Gate
from semdup.reranker.candidates import SearchTimeout
from semdup.reranker.ingest import NotASiteIndex, TaskSender
from semdup.reranker.post_fields import POST_TEXT_CONFIG, PostText, check_visible, text_field
from semdup.reranker.reranker import ModelMismatch, NothingIndexed, Reranker
from semdup.reranker.settings import ServiceSettings
from semdup.reranker.workers import STARTUP_FAILURE  # uvicorn's "cannot start": its supervisor stops, not restarts

__all__ = [
    "create_app",
    "load_reranker",
    "app_from_env",
    "configure_service_logging",
    "error_status",
    "request_model",
    "STARTUP_FAILURE",
    "READY_TIMEOUT_S",
]

logger = logging.getLogger(__name__)

API_KEY_HEADER = "X-API-Key"
PROBE_THREADS = 2  # /readyz's own threads: it calls OpenSearch, and must not queue behind the reranks' pool
READY_TIMEOUT_S = 3.0  # /readyz answers within this (503 with the reason past it): under a probe's timeout
_OPEN_PATHS = {"/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/redoc"}
_KEYED_PATHS = {"/v1/rerank", "/v1/posts", "/v1/posts/sync", "/v1/posts/delete"}  # metrics' path label
MAX_INDEX_CHARS = 255
_NOT_SERVED = "index {name!r} is not one this API key may search, or it does not exist; name one of your indices"


def _whole_number(value: Any) -> Any:
    """JSON Schema counts ``87.0`` as an integer; strict pydantic does not. Strings and booleans stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def error_status(exc: BaseException) -> int:
    """The HTTP status for an error raised while reranking."""
    if isinstance(exc, (PostError, ConfigError)):
        return 422
    if isinstance(exc, (ModelMismatch, NothingIndexed, NotASiteIndex)):
        return 409
    if isinstance(exc, IndexError_):
        return 404
    if isinstance(exc, SearchTimeout):
        return 504
    if isinstance(exc, (OpenSearchUnavailable, BrokerUnavailable)):
        return 503
    return 500


def request_model(settings: ServiceSettings) -> type[BaseModel]:
    """The ``/v1/rerank`` body, with this server's bounds in its schema: what the schema allows is what the
    service takes (but for markup-only text such as ``<p></p>``, which no regular expression tells apart). The
    title and body meet the rules every post meets (:mod:`semdup.reranker.post_fields`)."""
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
    type: str = Field(description="The error's kind, e.g. Unauthorized, IndexError_, SearchTimeout.")
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


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    said = {
        401: "Missing or wrong X-API-Key.",
        404: "An index this key may not search, or that does not exist (the same answer for both).",
        409: "The index holds vectors of another model version, holds no encoded post yet, or (sync) is one "
        "semdup created rather than a site's index.",
        413: "Request body over the server's max_body_bytes.",
        422: "Bad input: a schema violation, malformed JSON, or a post without usable text.",
        500: "An unexpected error (logged by the service).",
        503: "OpenSearch is down, or this worker has SEMDUP_MAX_IN_FLIGHT requests in flight (type Overloaded, "
        f"with Retry-After: {RETRY_AFTER_S}); retry later or on another replica.",
        504: "OpenSearch did not answer within the search timeout.",
    }
    out: dict[int | str, dict[str, Any]] = {
        c: {"model": ValidationErrorResponse if c == 422 else ErrorResponse, "description": said[c]} for c in codes
    }
    if 503 in out:
        out[503]["headers"] = RETRY_AFTER_HEADER
    return out


RETRY_AFTER_HEADER = {
    "Retry-After": {
        "description": f"Seconds to wait before retrying ({RETRY_AFTER_S}); sent with the Overloaded 503.",
        "schema": {"type": "integer"},
    }
}


class _BodyLimit:
    """ASGI middleware: 413 for a body over ``limit`` bytes, by Content-Length or by reading it first.

    The body is read here, before any other layer: a chunked body has no length to check up front, and an error
    raised from inside the application while it reads would reach the error handlers as a 500.
    """

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
            await self._too_large(send, f"request body of {int(length)} bytes")
            return
        messages: list[dict] = []
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away: the application sees that as it is
            seen += len(message.get("body", b""))
            if seen > self.limit:
                await self._too_large(send, f"request body of more than {seen} bytes (chunked)")
                return
            if not message.get("more_body", False):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, send: Any, what: str) -> None:
        await _send_json(
            send,
            413,
            "BodyTooLarge",
            f"{what} is over the limit of {self.limit} bytes; shorten the post or raise SEMDUP_MAX_BODY_BYTES",
        )


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


def load_reranker(settings: ServiceSettings) -> Reranker:
    """The reranker a worker process serves with: the bundle read and verified (file hashes, manifest, the
    onnxruntime session and its cross-checks), its calibration, and a client that connects on first use (the
    service starts while the cluster is down). ``semdup serve`` runs this once before starting any worker, so a
    broken bundle is one error line instead of workers that die one after the other.

    Raises:
        BundleError: a missing, changed or inconsistent bundle file. ConfigError: a setting the bundle cannot
            serve (learned-sparse candidates without term weights, k-NN without a dense encoder).
    """
    from semdup.core.clients import connect

    # one pooled connection per request thread, and the probes' own
    client = connect(settings.opensearch, check=False, pool_maxsize=settings.threads + PROBE_THREADS)
    try:
        return Reranker.from_bundle(
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
            intra_op_threads=settings.onnx_threads or None,
            field_cache=settings.reranker.field_cache,
        )
    except ValueError as exc:  # the settings ask for a candidate path this bundle has no model for
        raise ConfigError(f"bundle {settings.bundle}: {exc}") from exc


def create_app(
    settings: ServiceSettings,
    reranker: Reranker | None = None,
    sender: TaskSender | None = None,
    routers: Sequence[APIRouter] = (),
) -> Any:
    """The ASGI app. ``reranker`` may be given (tests, embedding); else it is built from ``settings``
    (:func:`load_reranker`). ``sender`` takes the ingest endpoints' tasks (tests); else a Celery client on
    ``settings.broker`` when ingest is on. ``routers`` are features from layers above this one (the review page,
    :mod:`semdup.review`), included as they are; each reads what it needs from ``app.state`` (``settings``,
    ``reranker``, ``registry``: the Prometheus registry ``/metrics`` serves).

    Raises:
        ConfigError: no API key while auth is on (raised by ``ServiceSettings``), a bad setting. BundleError: a bad
            bundle.
    """
    if reranker is None:
        reranker = load_reranker(settings)
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
    shed_total = Counter(
        "semdup_rerank_shed",
        "Requests refused with 503 Overloaded: the worker had SEMDUP_MAX_IN_FLIGHT requests in flight",
        ["path"],
        registry=registry,
    )

    def _shed(path: str) -> None:
        label = path if path in _OPEN_PATHS | _KEYED_PATHS else "other"
        shed_total.labels(label).inc()
        requests_total.labels(label, "503").inc()
        errors_total.labels(label, OVERLOADED).inc()

    gate = Gate(settings.max_in_flight, on_shed=_shed)
    Gauge(
        "semdup_rerank_in_flight", "Requests in flight in this worker process (probes not counted)", registry=registry
    ).set_function(lambda: gate.in_flight)
    probes = ThreadPoolExecutor(max_workers=PROBE_THREADS, thread_name_prefix="semdup-probe")
    key_header = APIKeyHeader(
        name=API_KEY_HEADER,
        auto_error=False,
        description="The service's API key (SEMDUP_API_KEY, or one of SEMDUP_API_KEYS).",
    )

    def key_access(given: str | None = Security(key_header)) -> tuple[str, ...]:
        allowed = settings.key_indices(given)
        if allowed is None:
            raise _AuthError("missing or wrong API key; send it in the X-API-Key header")
        return allowed

    def open_access() -> tuple[str, ...]:
        return settings.indices

    access = key_access if settings.auth else open_access

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
    app.state.gate = gate
    app.state.registry = registry

    def _path(request: Request) -> str:
        return request.url.path if request.url.path in _OPEN_PATHS | _KEYED_PATHS else "other"

    @app.middleware("http")
    async def _observe(request: Request, call_next: Any) -> Any:
        start = time.perf_counter()
        path = _path(request)
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

    def _error(
        request: Request, status: int, kind: str, message: str, headers: dict[str, str] | None = None, **more: Any
    ) -> JSONResponse:
        errors_total.labels(_path(request), kind).inc()
        return JSONResponse(
            {"error": {"type": kind, "message": scrub(message)}, **more}, status_code=status, headers=headers
        )

    @app.exception_handler(_AuthError)
    async def _auth(request: Request, exc: _AuthError) -> JSONResponse:
        return _error(request, 401, "Unauthorized", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        items = _validation_items(exc.errors())
        first = items[0] if items else {}
        if first.get("type") == "json_invalid":
            message = f"the body is not valid JSON (error at character {first['loc'][-1]}); send a JSON object"
        else:
            where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
            message = f"{where or 'body'}: {first.get('msg', 'invalid request')}; see /docs for the request schema"
        return _error(request, 422, "ValidationError", message, detail=items)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not read the body: bad input like any other, 422
            if isinstance(exc.__cause__, RecursionError):  # json.loads gives up past ~1,000 nested levels
                message = (
                    "the body nests arrays or objects too deeply to be read (json gives up at about 1,000 levels); "
                    "send the flat JSON object the schema at /docs describes"
                )
                kind = "json_too_deep"
            else:  # not UTF-8
                message = f"{exc.detail}: the body is not UTF-8 JSON; send a UTF-8 JSON object"
                kind = "body_unreadable"
            detail = [{"loc": ["body"], "msg": message, "type": kind}]
            return _error(request, 422, "ValidationError", message, detail=detail)
        return _error(request, exc.status_code, "HTTPError", str(exc.detail), headers=exc.headers)

    @app.exception_handler(SemdupError)
    async def _semdup(request: Request, exc: SemdupError) -> JSONResponse:
        status = error_status(exc)
        if status == 500:
            logger.error("%s failed: %s", request.url.path, exc)
        if status == 422:
            detail = [{"loc": ["body"], "msg": scrub(str(exc)), "type": "value_error"}]
            return _error(request, 422, type(exc).__name__, str(exc), detail=detail)
        # e.g. an ingest request's broker failure: how many were enqueued before it
        return _error(request, status, type(exc).__name__, str(exc), **getattr(exc, "details", {}))

    @app.exception_handler(Exception)
    async def _any(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error while answering %s", request.url.path)
        return _error(request, 500, "InternalError", f"{type(exc).__name__}; see the service log")

    @app.get("/healthz", tags=["probes"])
    async def healthz() -> dict[str, Any]:
        """The process is up (no OpenSearch call). Answered on the event loop: it never waits for a request thread,
        so a worker busy with reranks still answers its liveness probe."""
        return {"status": "ok", "model": reranker.version}

    @app.get(
        "/readyz",
        tags=["probes"],
        response_model=ReadyResponse,
        responses={503: {"model": ReadyResponse, "description": "Not ready; the reason says why."}},
    )
    async def readyz() -> JSONResponse:
        """Ready when OpenSearch answers and the index searched holds this bundle's version (or is unclaimed): the
        index itself when semdup created it, else the companion ``semdup enable`` made for it. A busy worker stays
        ready (overload is the reranks' 503, not a reason to leave the load balancer); ``checks`` shows its
        requests in flight. Runs on threads of its own, never queued behind the reranks, and answers within
        ``READY_TIMEOUT_S`` seconds, so the probe always gets the reason rather than its own timeout."""
        try:
            return await asyncio.wait_for(asyncio.wrap_future(probes.submit(_ready)), READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            reason = f"OpenSearch did not answer the readiness checks within {READY_TIMEOUT_S:g} s"
            return JSONResponse({"ready": False, "checks": {"bundle": reranker.version}, "reason": reason}, 503)

    def _ready() -> JSONResponse:
        checks: dict[str, Any] = {
            "bundle": reranker.version,
            "in_flight": gate.in_flight,
            "max_in_flight": settings.max_in_flight,
        }
        try:
            reranker.client.info(request_timeout=settings.reranker.search_timeout)
            checks["opensearch"] = "ok"
            from semdup.index_format.companion import search_target
            from semdup.index_format.mapping import index_model

            target = search_target(reranker.client, settings.index, reranker.version)
            if target != settings.index:  # a site's own index, served through its companion
                checks["companion"] = target
            models = index_model(reranker.client, target)
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
                {"ready": False, "checks": checks, "reason": scrub(f"{type(exc).__name__}: {exc}")[:500]},
                status_code=503,
            )
        return JSONResponse({"ready": True, "checks": checks})

    @app.get(
        "/metrics",
        tags=["probes"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus"}},
    )
    async def metrics() -> PlainTextResponse:
        """Prometheus metrics of this process (request count, latency histogram, errors, requests in flight and
        refused). On the event loop, like ``/healthz``: a scrape never waits behind the reranks."""
        return PlainTextResponse(generate_latest(registry).decode("utf-8"), media_type=CONTENT_TYPE_LATEST)

    rerank_request = request_model(settings)

    def rerank(req: Any, allowed: tuple[str, ...] = Depends(access)) -> dict[str, Any]:
        """Top-k duplicate candidates for a post: fused score, components, probability, decision."""
        from semdup.core.posts import Post

        name = req.index or settings.default_index(allowed)
        if name not in allowed:  # exact names only: no pattern, alias or other index is ever sent to OpenSearch
            raise IndexError_(_NOT_SERVED.format(name=name[:MAX_INDEX_CHARS]))
        rr = reranker
        if req.templates:
            rr = rr.with_settings(templates=tuple(dict.fromkeys(req.templates)))
        post = Post(id=req.exclude_id or "_query", title=req.title, body=req.body)
        try:
            cands = rr.rank(post, k=req.k, exclude_id=req.exclude_id, index=name)
            reason = rr.empty_reason(name) if not cands else None
        except IndexError_ as exc:
            if isinstance(exc, (ModelMismatch, NothingIndexed)):
                raise
            logger.warning("served index %s cannot be searched: %s", name, exc)
            raise IndexError_(_NOT_SERVED.format(name=name)) from exc
        return {
            "model": rr.version,
            "index": name,
            "threshold": rr.threshold,
            "candidates": [c.to_json() for c in cands],
            "reason": reason,
        }

    rerank.__annotations__["req"] = rerank_request  # a class built here: not a name FastAPI could look up
    app.post(
        "/v1/rerank",
        response_model=RerankResponse,
        tags=["rerank"],
        responses=_responses(401, 404, 409, 413, 422, 500, 503, 504),
    )(rerank)

    from semdup.reranker.ingest_routes import add_ingest_routes  # it imports this module's schema pieces

    if sender is None and settings.ingest and settings.broker is not None:
        from semdup.reranker.ingest import CelerySender

        sender = CelerySender(settings.broker.url)  # connects on the first request, not here
    add_ingest_routes(
        app,
        settings,
        access,
        reranker.version,
        sender if settings.ingest else None,
        searched=lambda name: reranker.target(name),  # looked up on the first sync request, not here
    )
    for router in routers:
        app.include_router(router)

    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)  # before any parsing
    app.add_middleware(Admission, gate=gate, exempt=_OPEN_PATHS)  # outermost: a refusal costs nothing else
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


def app_from_env(build: Callable[[ServiceSettings], Any] = create_app) -> Any:
    """uvicorn factory (``--factory``): settings from the environment / ``$SEMDUP_CONFIG``, one app per worker.

    A failure to start is logged as one line (in JSON mode one record, with the traceback inside it; in text mode
    the traceback only at DEBUG) and the worker exits with :data:`STARTUP_FAILURE`, in every log mode: uvicorn's
    supervisor then stops instead of starting another worker that would fail the same way, and ``semdup serve``
    exits 1 (:func:`semdup.reranker.workers.run_workers`).

    ``build`` makes the app from the settings (a layer above composes more features in:
    :func:`semdup.review.app.app_from_env`, what ``semdup serve`` runs).
    """
    fmt = configure_service_logging()
    try:
        settings = ServiceSettings.from_env()
        app = build(settings)
    except Exception as exc:
        what = str(exc) if isinstance(exc, SemdupError) else f"{type(exc).__name__}: {exc}"
        traceback = fmt == "json" or logger.isEnabledFor(logging.DEBUG)
        logger.critical("the reranking service could not start: %s", what, exc_info=traceback)
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
