"""The service's ASGI middleware: the body limit (413 before any parsing) and the metrics of every request
(the admission gate is :mod:`semdup.service.admission`)."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from fastapi import Request

from semdup.service.metrics import ServiceMetrics, path_label

__all__ = ["BodyLimit", "observe"]

logger = logging.getLogger("semdup.apps.http")  # the request records keep the logger name operators filter on


class BodyLimit:
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


async def observe(request: Request, call_next: Any) -> Any:
    """Count and time every request (middleware)."""
    metrics: ServiceMetrics = request.app.state.metrics
    start = time.perf_counter()
    path = path_label(request.url.path)
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
