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
routers, and adds the service's middleware and error handlers (:mod:`semdup.service.middleware`,
:mod:`semdup.service.errors`); no endpoint is defined here. With ingest on, the app's
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
model version, 413 body over ``max_body_bytes`` (declared or counted, chunked too), 422 bad input (FastAPI's
``detail`` list beside ``error``: schema violations, malformed JSON, a post with no usable text), 503 OpenSearch down
(or, for ingest, no broker, ingest off, or the broker down, with how many were enqueued before it failed), with
``Retry-After: 2`` (or ``Overloaded``: this worker has ``max_in_flight`` requests in flight, with its own
``Retry-After``), 504 OpenSearch too slow, 500 anything else (logged, not leaked). Messages are scrubbed of credentials
(:func:`semdup.core.logs.scrub`).

Operators' endpoints: ``/metrics`` and ``/openapi.json`` need a key with the ``ops`` scope while
``SEMDUP_OPS_AUTH`` is on (the default; ``/metrics`` names every served index). There is no ``/docs`` or
``/redoc``: FastAPI's pages load Swagger UI and ReDoc from a third-party CDN; any OpenAPI viewer reads
``/openapi.json``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from semdup.core.errors import SemdupError
from semdup.core.logs import active_format, configure_logging
from semdup.reranker.reranker import Reranker
from semdup.service.admission import Admission, Gate
from semdup.service.auth_throttle import THROTTLE_FILE, FailureThrottle
from semdup.service.errors import add_error_handlers
from semdup.service.metrics import OPEN_PATHS, ServiceMetrics
from semdup.service.middleware import BodyLimit, observe
from semdup.service.routers import ingest, pipeline, probes, rerank, similar
from semdup.service.routers.access import ops_access
from semdup.service.settings import ServiceSettings
from semdup.service.workers import STARTUP_FAILURE, load_reranker  # STARTUP_FAILURE: uvicorn's "do not restart"

__all__ = [
    "create_app",
    "load_reranker",
    "app_from_env",
    "configure_service_logging",
    "FEATURES",
    "STARTUP_FAILURE",
]

logger = logging.getLogger(__name__)

# The feature routers every app includes, in order; each takes the app's ServiceSettings. The review page's router
# is included beside them (create_app).
FEATURES = (rerank.router, similar.router, pipeline.router, ingest.router)


async def _openapi(request: Request) -> JSONResponse:
    """``/openapi.json``, behind the ops scope (:func:`ops_access`)."""
    return JSONResponse(request.app.openapi())


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
    from semdup.ingest.sweeper import Sweeper, SweepLoop

    if broker is None:
        broker = producer_app(settings.broker.url)  # type: ignore[union-attr]  # ingest on: a broker is set
    sweeper = Sweeper(reranker.client, broker, settings.sweep_after, indices=settings.indices)
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
    # /v1/rerank/documents (1 MiB bodies, any key) holds at most half the slots: a flood of it leaves /v1/rerank room
    gate = Gate(settings.max_in_flight, on_shed=metrics.shed, bulkhead={pipeline.DOCUMENTS_PATH})
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

    app.middleware("http")(observe)
    add_error_handlers(app)
    app.include_router(probes.router)
    app.add_api_route("/openapi.json", _openapi, dependencies=[Depends(ops_access)], include_in_schema=False)
    for feature in FEATURES:
        app.include_router(feature(settings))
    app.include_router(review_router)
    for router in routers:
        app.include_router(router)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)  # before any parsing
    app.add_middleware(Admission, gate=gate, exempt=OPEN_PATHS)  # outermost: a refusal costs nothing else
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
    from semdup.index_format.system_indices import use_store_shape

    fmt = "text"
    try:
        fmt = configure_service_logging()
        tree = load_settings()
        use_store_shape(tree.indices.store())  # the sessions and verdicts stores this process may create
        settings = tree.service_settings()
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
