"""Admission control of the HTTP service: a bounded number of requests in flight per worker process, 503 past it.

Without a bound, every request a worker accepts waits its turn for the request threads and the CPU: under a burst
the queue grows, every answer gets slower (200 concurrent callers against 2 workers on 2 cores: p99 21 s), and the
callers' own timeouts turn the queue into wasted work. With one, a worker holding ``limit`` requests answers the
next one at once with 503 and ``Retry-After`` (JSON ``{"error": {"type": "Overloaded", ...}}``), so the admitted
ones keep their latency and a client, a load balancer or another replica can take the rest::

    app = Admission(app, gate)             # outermost: a refused request costs no body read, no auth, no thread

The probes and docs (``exempt``) are never counted or refused: a busy worker must still answer its liveness probe.
A ``bulkhead`` path may hold at most half the slots (at least one): ``/v1/rerank/documents`` takes bodies of up to
1 MiB from any key, so a flood of it, even one refused after its body is read (texts mode without the ingest scope),
leaves the other half to ``/v1/rerank`` and the rest.
``limit`` 0 turns the bound off. The count is per process (each uvicorn worker has its own), kept on the event
loop's thread, so it needs no lock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["Admission", "Gate", "RETRY_AFTER_S", "OVERLOADED"]

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 1  # what a refused caller is told to wait: about the time an admitted call takes under load
OVERLOADED = "Overloaded"  # the error type of the 503 body
_LOG_EVERY_S = 10.0  # at most one warning per this many seconds while shedding (not one line per request)


class Gate:
    """The in-flight count of one worker process and its bound; ``on_shed(path)`` is called for each refusal
    (the service counts it in ``/metrics``)."""

    def __init__(
        self, limit: int, on_shed: Callable[[str], None] | None = None, bulkhead: Collection[str] = ()
    ) -> None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 requests (0 = no bound), got {limit}")
        self.limit = limit
        self.in_flight = 0
        self.bulkhead = frozenset(bulkhead)
        self.bulkhead_limit = max(1, limit // 2)
        self.in_bulkhead = 0
        self.shed = 0
        self._on_shed = on_shed
        self._logged_at = 0.0
        self._shed_since_log = 0

    def refuse(self, path: str) -> bool:
        """True when a request to ``path`` must be refused now; else it is counted in until :meth:`leave`."""
        walled = path in self.bulkhead
        if self.limit and (self.in_flight >= self.limit or (walled and self.in_bulkhead >= self.bulkhead_limit)):
            self.shed += 1
            self._shed_since_log += 1
            if self._on_shed is not None:
                self._on_shed(path)
            now = time.monotonic()
            if now - self._logged_at >= _LOG_EVERY_S:
                logger.warning(
                    "shedding load: %d request(s) refused with 503 since the last warning, %d in flight "
                    "(SEMDUP_MAX_IN_FLIGHT=%d); add workers or replicas if this lasts",
                    self._shed_since_log,
                    self.in_flight,
                    self.limit,
                )
                self._logged_at, self._shed_since_log = now, 0
            return True
        self.in_flight += 1
        self.in_bulkhead += walled
        return False

    def leave(self, path: str = "") -> None:
        self.in_flight -= 1
        self.in_bulkhead -= path in self.bulkhead


class Admission:
    """ASGI middleware over :class:`Gate`: past the bound, 503 with ``Retry-After`` before anything else runs."""

    def __init__(self, app: Any, gate: Gate, exempt: Collection[str] = ()) -> None:
        self.app = app
        self.gate = gate
        self.exempt = frozenset(exempt)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.gate.limit or scope.get("path") in self.exempt:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.gate.refuse(path):
            await _overloaded(send, self.gate.limit)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.gate.leave(path)


async def _overloaded(send: Any, limit: int) -> None:
    message = (
        f"this worker is answering {limit} requests already (SEMDUP_MAX_IN_FLIGHT); "
        f"retry after {RETRY_AFTER_S} s or send the call to another replica"
    )
    body = json.dumps({"error": {"type": OVERLOADED, "message": message}}).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
