"""``/healthz``, ``/readyz``, ``/metrics``: the probes of one service worker process.

``/healthz`` and ``/readyz`` answer anyone (a load balancer has no key); ``/metrics`` names every served index,
so it needs a key with the ``ops`` scope while ``SEMDUP_OPS_AUTH`` is on (:func:`.access.ops_access`).

They never wait behind the reranks: ``/healthz`` and ``/metrics`` run on the event loop (no thread), ``/readyz`` on
two threads of its own (``app.state.probes``, :data:`PROBE_THREADS`) and answers within :data:`READY_TIMEOUT_S`.
Each reads what it needs from ``app.state`` (the reranker, the settings, the admission gate, the metrics registry).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from semdup.service.routers.access import ops_access, state
from semdup.service.routers.schemas import ReadyResponse, cluster_message
from semdup.service.workers import PROBE_THREADS  # /readyz's own threads: not queued behind the reranks' pool

__all__ = ["router", "PROBE_PATHS", "PROBE_THREADS", "READY_TIMEOUT_S"]

logger = logging.getLogger(__name__)

PROBE_PATHS = ("/healthz", "/readyz", "/metrics")
READY_TIMEOUT_S = 3.0  # /readyz answers within this (503 with the reason past it): under a probe's timeout

router = APIRouter(tags=["probes"])


@router.get("/healthz")
async def healthz(request: Request) -> dict[str, Any]:
    """The process is up (no OpenSearch call). Answered on the event loop: it never waits for a request thread,
    so a worker busy with reranks still answers its liveness probe."""
    return {"status": "ok", "model": state(request).reranker.version}


@router.get(
    "/readyz",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "Not ready; the reason says why."}},
)
async def readyz(request: Request) -> JSONResponse:
    """Ready when OpenSearch answers and the index searched holds this bundle's version (or is unclaimed): the
    index itself when semdup created it, else the companion ``semdup enable`` made for it. A busy worker stays
    ready (overload is the reranks' 503, not a reason to leave the load balancer); ``checks`` shows its
    requests in flight. Runs on threads of its own, never queued behind the reranks, and answers within
    ``READY_TIMEOUT_S`` seconds, so the probe always gets the reason rather than its own timeout."""
    st = state(request)
    try:
        return await asyncio.wait_for(asyncio.wrap_future(st.probes.submit(ready, st)), READY_TIMEOUT_S)
    except asyncio.TimeoutError:
        reason = f"OpenSearch did not answer the readiness checks within {READY_TIMEOUT_S:g} s"
        return JSONResponse({"ready": False, "checks": {"bundle": st.reranker.version}, "reason": reason}, 503)


def ready(st: Any) -> JSONResponse:
    """The readiness checks against the cluster (blocking; run on a probe thread)."""
    reranker, settings = st.reranker, st.settings
    checks: dict[str, Any] = {
        "bundle": reranker.version,
        "in_flight": st.gate.in_flight,
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
    except Exception as exc:  # any failure means "not ready": the probe (no key) gets no address, the log the detail
        logger.warning("not ready: %s: %s", type(exc).__name__, exc)
        reason = cluster_message(exc) or f"{type(exc).__name__}; the service's log says why"
        return JSONResponse({"ready": False, "checks": checks, "reason": reason}, status_code=503)
    return JSONResponse({"ready": True, "checks": checks})


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    dependencies=[Depends(ops_access)],
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus"},
        401: {"description": "SEMDUP_OPS_AUTH is on: send a key with the ops scope (X-API-Key or Bearer)."},
        403: {"description": "The key has no ops scope."},
        429: {"description": "Too many wrong keys from this address: wait Retry-After seconds."},
    },
)
async def metrics(request: Request) -> PlainTextResponse:
    """Prometheus metrics of this process (request count, latency histogram, errors, requests in flight and
    refused, wrong keys and throttled addresses). On the event loop, like ``/healthz``: a scrape never waits
    behind the reranks."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    registry = state(request).metrics.registry
    return PlainTextResponse(generate_latest(registry).decode("utf-8"), media_type=CONTENT_TYPE_LATEST)


__all__ += ["ready", "healthz", "readyz", "metrics"]
