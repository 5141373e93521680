"""The HTTP app: the service's routers (rerank, similar, ingest, probes, review) composed into one FastAPI app.

    app = create_app(load_settings().service_settings())    # semdup serve builds one per uvicorn worker
    uvicorn semdup.apps.http:app_from_env --factory --workers 2

Each feature is an ``APIRouter`` of its own, importable and testable alone: ``/v1/rerank``
(:mod:`semdup.service.routers.rerank`), the ingest endpoints ``/v1/posts``, ``/sync``, ``/delete``
(:mod:`semdup.service.routers.ingest`), the probes ``/healthz``, ``/readyz``, ``/metrics``
(:mod:`semdup.service.routers.probes`), and the review page ``/review`` (:mod:`semdup.review.router`); their
bodies come from one schema module (:mod:`semdup.service.routers.schemas`). ``/v1/similar`` (posts like a title
being typed, :mod:`semdup.service.routers.similar`) is one of :data:`FEATURES` the same way. This factory only
builds what the routers share and puts it in ``app.state`` (the settings, the reranker, the Celery app ingest
publishes through, the admission gate, the metrics, the probes' threads, the review context), includes the
routers, and adds the middleware and error handlers; no endpoint is defined here. With ingest on, the app's
lifespan also runs a sweeping thread (:class:`semdup.ingest.sweeper.SweepLoop`) over the unfinished jobs of the
served indices: a batch of an HTTP request that a worker lost is sent again, as ``semdup index-posts`` does for
its own jobs while it waits.

Nothing is created at import time: the factory loads the bundle (one onnxruntime session per process, so one per
uvicorn worker; :func:`load_reranker`, which ``semdup serve`` also runs once before any worker starts) and a
client whose every call carries the reranker's timeout. Endpoints that call OpenSearch are plain ``def``
functions, so FastAPI runs them in its thread pool and the event loop never blocks; the pool holds ``threads``
workers. At most ``max_in_flight`` requests are in flight per process; past that a request gets 503 with
``Retry-After`` at once (:mod:`semdup.service.admission`).

Every error is JSON ``{"error": {"type", "message"}}``: 401 missing or wrong ``X-API-Key`` (an OpenAPI
``APIKeyHeader`` scheme), 403 a key without the endpoint's scope (``search``, ``ingest``, ``ops``), 429
``TooManyFailures`` with ``Retry-After`` (too many wrong keys from the address,
:mod:`semdup.service.auth_throttle`), 404 an index this key may not search or that does not exist (one answer
for both, so it tells nothing about other indices), 405 another method (with ``Allow``), 409 index of another
model version, 413 body over ``max_body_bytes`` (declared or counted, chunked too), 422 bad input (FastAPI's ``detail`` list
beside ``error``: schema violations, malformed JSON, a post with no usable text), 503 OpenSearch down (or, for
ingest, no broker, ingest off, or the broker down, with how many were enqueued before it failed; or
``Overloaded``: this worker has ``max_in_flight`` requests in flight, with ``Retry-After``), 504 OpenSearch too
slow, 500 anything else (logged, not leaked). Messages are scrubbed of credentials
(:func:`semdup.core.logs.scrub`).

Operators' endpoints: ``/metrics`` and ``/openapi.json`` need a key with the ``ops`` scope while
``SEMDUP_OPS_AUTH`` is on (the default; ``/metrics`` names every served index). There is no ``/docs`` or
``/redoc``: FastAPI's pages load Swagger UI and ReDoc from a third-party CDN; any OpenAPI viewer reads
``/openapi.json``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
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
from semdup.core.json_input import TOO_DEEP, TOO_DEEP_TYPE, is_too_deep
from semdup.core.logs import active_format, configure_logging, scrub
from semdup.reranker.reranker import ModelMismatch, NothingIndexed, Reranker
from semdup.service.admission import OVERLOADED, Admission, Gate
from semdup.service.auth_throttle import THROTTLE_FILE, FailureThrottle, Throttled, retry_after
from semdup.service.routers import ingest, pipeline, probes, rerank, similar
from semdup.service.routers.access import AuthError, ScopeError, ops_access
from semdup.service.routers.ingest import NotASiteIndex
from semdup.service.routers.schemas import cluster_message
from semdup.service.settings import ServiceSettings
from semdup.service.workers import STARTUP_FAILURE, load_reranker  # STARTUP_FAILURE: uvicorn's "do not restart"

__all__ = [
    "create_app",
    "load_reranker",
    "app_from_env",
    "configure_service_logging",
    "error_status",
    "ServiceMetrics",
    "FEATURES",
    "STARTUP_FAILURE",
]

logger = logging.getLogger(__name__)

# never refused by admission control (a busy worker still answers its probes and scrapes)
_OPEN_PATHS = {"/healthz", "/readyz", "/metrics", "/openapi.json"}
_KEYED_PATHS = {rerank.PATH, similar.PATH, *ingest.INGEST_PATHS}  # metrics' path label
# The feature routers every app includes, in order; each takes the app's ServiceSettings. The review page's router
# is included beside them (create_app).
FEATURES = (rerank.router, similar.router, pipeline.router, ingest.router)


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


@dataclass
class ServiceMetrics:
    """The Prometheus registry ``/metrics`` serves, and the service's request figures in it."""

    registry: Any
    requests_total: Any
    latency: Any
    errors_total: Any
    shed_total: Any
    auth_failed_total: Any
    auth_throttled_total: Any

    @classmethod
    def create(cls) -> ServiceMetrics:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        registry = CollectorRegistry()
        return cls(
            registry=registry,
            requests_total=Counter("semdup_rerank_requests", "HTTP requests", ["path", "status"], registry=registry),
            latency=Histogram(
                "semdup_rerank_request_seconds",
                "HTTP request latency",
                ["path"],
                registry=registry,
                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            ),
            errors_total=Counter(
                "semdup_rerank_errors", "HTTP error answers by type", ["path", "type"], registry=registry
            ),
            shed_total=Counter(
                "semdup_rerank_shed",
                "Requests refused with 503 Overloaded: the worker had SEMDUP_MAX_IN_FLIGHT requests in flight",
                ["path"],
                registry=registry,
            ),
            auth_failed_total=Counter(
                "semdup_auth_failures",
                "Wrong API keys and review logins (each counts against its client's address)",
                ["path"],
                registry=registry,
            ),
            auth_throttled_total=Counter(
                "semdup_auth_throttled",
                "Requests refused with 429 TooManyFailures: their address failed too often",
                ["path"],
                registry=registry,
            ),
        )

    def auth_event(self, path: str, what: str) -> None:
        """Count a wrong key or login (``failed``) or a 429 refusal (``throttled``) on ``path``."""
        label = _label(path)
        (self.auth_throttled_total if what == "throttled" else self.auth_failed_total).labels(label).inc()

    def shed(self, path: str) -> None:
        label = _label(path)
        self.shed_total.labels(label).inc()
        self.requests_total.labels(label, "503").inc()
        self.errors_total.labels(label, OVERLOADED).inc()


def _label(path: str) -> str:
    if path.startswith("/review"):
        return "/review/login" if path == "/review/login" else "/review"
    return path if path in _OPEN_PATHS | _KEYED_PATHS else "other"


async def _observe(request: Request, call_next: Any) -> Any:
    """Count and time every request (middleware)."""
    metrics: ServiceMetrics = request.app.state.metrics
    start = time.perf_counter()
    path = _label(request.url.path)
    try:
        response = await call_next(request)
    except Exception:  # an error no handler took: count it, then let Starlette answer 500
        metrics.requests_total.labels(path, "500").inc()
        raise
    took = time.perf_counter() - start
    metrics.latency.labels(path).observe(took)
    metrics.requests_total.labels(path, str(response.status_code)).inc()
    logger.info("request", extra={"path": path, "status": response.status_code, "ms": round(took * 1000, 2)})
    return response


def _error(
    request: Request, status: int, kind: str, message: str, headers: dict[str, str] | None = None, **more: Any
) -> JSONResponse:
    request.app.state.metrics.errors_total.labels(_label(request.url.path), kind).inc()
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


async def _openapi(request: Request) -> JSONResponse:
    """``/openapi.json``, behind the ops scope (:func:`ops_access`)."""
    return JSONResponse(request.app.openapi())


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
        logger.log(level, "%s answered %d: %s", _label(request.url.path), status, exc)
    if public is not None:
        return _error(request, status, type(exc).__name__, public)
    if status == 422:
        detail = [{"loc": ["body"], "msg": scrub(str(exc)), "type": "value_error"}]
        return _error(request, 422, type(exc).__name__, str(exc), detail=detail)
    # e.g. an ingest request's broker failure: how many were enqueued before it
    return _error(request, status, type(exc).__name__, str(exc), **getattr(exc, "details", {}))


async def _any(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unexpected error while answering %s", request.url.path)
    return _error(request, 500, "InternalError", f"{type(exc).__name__}; see the service log")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    # the pool that runs the blocking endpoints (and so the OpenSearch calls)
    anyio.to_thread.current_default_thread_limiter().total_tokens = app.state.settings.threads
    sweeps = app.state.sweeps
    if sweeps is not None:
        sweeps.start()
    try:
        yield
    finally:
        if sweeps is not None:
            sweeps.stop()


def _ingest(settings: ServiceSettings, reranker: Reranker, broker: Any) -> tuple[Any, Any]:
    """The Celery app the ingest endpoints publish through (``broker``, else one of their own on the settings'
    broker, connecting on the first request) and the thread that sweeps the served indices' unfinished jobs;
    (None, None) with ingest off."""
    if not settings.ingest:
        return None, None
    from semdup.ingest.celery_app import producer_app
    from semdup.ingest.sweeper import Sweeper, SweepLoop, SweepSettings

    if broker is None:
        broker = producer_app(settings.broker.url)  # type: ignore[union-attr]  # ingest on: a broker is set
    sweeper = Sweeper(reranker.client, broker, SweepSettings(settings.sweep_after), indices=settings.indices)
    return broker, SweepLoop(sweeper)


def create_app(
    settings: ServiceSettings,
    reranker: Reranker | None = None,
    broker: Any = None,
    routers: Sequence[APIRouter] = (),
) -> Any:
    """The ASGI app. ``reranker`` may be given (tests, embedding); else it is built from ``settings``
    (:func:`load_reranker`). ``broker`` is the Celery app the ingest endpoints publish through (tests); else an app
    of their own on ``settings.broker`` when ingest is on. The feature routers (:data:`FEATURES`, the review page)
    are included; ``routers`` adds more.

    Raises:
        ConfigError: a bad setting. BundleError: a bad bundle.
    """
    from prometheus_client import Gauge

    from semdup.review.context import review_context
    from semdup.review.metrics import ReviewCollector
    from semdup.review.router import router as review_router

    if reranker is None:
        reranker = load_reranker(settings)
    metrics = ServiceMetrics.create()
    gate = Gate(settings.max_in_flight, on_shed=metrics.shed)
    Gauge(
        "semdup_rerank_in_flight",
        "Requests in flight in this worker process (probes not counted)",
        registry=metrics.registry,
    ).set_function(lambda: gate.in_flight)
    app = FastAPI(
        title="semdup reranker",
        version=reranker.version,
        lifespan=_lifespan,
        description="Ranked duplicate candidates for a new post, with fused scores and decisions.",
        docs_url=None,  # FastAPI's pages load their scripts from a third-party CDN
        redoc_url=None,
        openapi_url=None,  # served below, behind the ops scope
    )
    app.state.settings = settings
    app.state.reranker = reranker
    app.state.broker, app.state.sweeps = _ingest(settings, reranker, broker)
    app.state.gate = gate
    app.state.metrics = metrics
    app.state.registry = metrics.registry  # what /metrics serves; routers from above add their collectors to it
    app.state.probes = ThreadPoolExecutor(max_workers=probes.PROBE_THREADS, thread_name_prefix="semdup-probe")
    app.state.throttle = FailureThrottle(
        None if settings.runtime_dir is None else Path(settings.runtime_dir) / THROTTLE_FILE,
        limit=settings.auth_failures,
        window=settings.auth_window,
        block=settings.auth_block,
    )
    app.state.review = review_context(
        settings, getattr(reranker, "client", None), reranker.version, throttle=app.state.throttle
    )
    if settings.review_enabled:
        metrics.registry.register(ReviewCollector(app.state.review.stats))

    app.middleware("http")(_observe)
    app.add_exception_handler(AuthError, _auth)
    app.add_exception_handler(ScopeError, _scope)
    app.add_exception_handler(Throttled, _throttled)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(SemdupError, _semdup)
    app.add_exception_handler(Exception, _any)
    app.include_router(probes.router)
    app.add_api_route("/openapi.json", _openapi, dependencies=[Depends(ops_access)], include_in_schema=False)
    for feature in FEATURES:
        app.include_router(feature(settings))
    app.include_router(review_router)
    for router in routers:
        app.include_router(router)
    app.add_middleware(_BodyLimit, limit=settings.max_body_bytes)  # before any parsing
    app.add_middleware(Admission, gate=gate, exempt=_OPEN_PATHS)  # outermost: a refusal costs nothing else
    return app


def configure_service_logging(fmt: str | None = None) -> str:
    """Logging of a service process, through :func:`semdup.core.logs.configure_logging` like every semdup process.

    The format is ``fmt``, else the one this process already uses (``semdup serve``), else the settings tree's
    (``SEMDUP_LOG_FORMAT``; a uvicorn worker process gets its parent's). JSON mode logs at INFO or finer, so the
    collector gets one record per request; text mode keeps the level the process has.

    Returns:
        The format used, ``"text"`` or ``"json"``.
    """
    from semdup.apps.settings import log_format_setting

    chosen = fmt or active_format() or log_format_setting()
    level = logging.getLogger().level
    if chosen == "json":
        level = min(level, logging.INFO)
    return configure_logging(level, chosen)


def app_from_env() -> Any:
    """uvicorn factory (``--factory``): the settings tree (from ``semdup serve``'s hand-off, else the environment and
    ``$SEMDUP_CONFIG``), one app per worker.

    A failure to start is logged as one line (in JSON mode one record, with the traceback inside it; in text mode
    the traceback only at DEBUG) and the worker exits with :data:`STARTUP_FAILURE`, in every log mode: uvicorn's
    supervisor then stops instead of starting another worker that would fail the same way, and ``semdup serve``
    exits 1 (:func:`semdup.service.workers.run_workers`).
    """
    from semdup.apps.settings import load_settings

    fmt = "text"
    try:
        fmt = configure_service_logging()
        settings = load_settings().service_settings()
        app = create_app(settings)
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
