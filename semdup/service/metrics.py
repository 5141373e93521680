"""The service's Prometheus figures (:class:`ServiceMetrics`, what ``/metrics`` serves) and their path labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from semdup.service.admission import OVERLOADED
from semdup.service.routers import ingest, pipeline, rerank, similar

__all__ = ["ServiceMetrics", "path_label", "OPEN_PATHS", "KEYED_PATHS"]

# never refused by admission control (a busy worker still answers its probes and scrapes)
OPEN_PATHS = {"/healthz", "/readyz", "/metrics", "/openapi.json"}
KEYED_PATHS = {rerank.PATH, similar.PATH, *ingest.INGEST_PATHS, pipeline.REWRITE_PATH, pipeline.DOCUMENTS_PATH}
# (metrics' path label: a pipeline's stale key shows as semdup_auth_throttled_total{path="/v1/search/rewrite"})


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
                "Wrong API keys and review logins (counted against the key, once a window against the address)",
                ["path"],
                registry=registry,
            ),
            auth_throttled_total=Counter(
                "semdup_auth_throttled",
                "Requests refused with 429 TooManyFailures: their address, or their wrong key, failed too often",
                ["path"],
                registry=registry,
            ),
        )

    def auth_event(self, path: str, what: str) -> None:
        """Count a wrong key or login (``failed``) or a 429 refusal (``throttled``) on ``path``."""
        label = path_label(path)
        (self.auth_throttled_total if what == "throttled" else self.auth_failed_total).labels(label).inc()

    def shed(self, path: str) -> None:
        label = path_label(path)
        self.shed_total.labels(label).inc()
        self.requests_total.labels(label, "503").inc()
        self.errors_total.labels(label, OVERLOADED).inc()


def path_label(path: str) -> str:
    """The path label of the metrics: the known paths, ``/review`` and its login, else ``other``."""
    if path.startswith("/review"):
        return "/review/login" if path == "/review/login" else "/review"
    return path if path in OPEN_PATHS | KEYED_PATHS else "other"
