"""The service with the review page: :func:`semdup.reranker.service.create_app` plus the ``/review`` router.

    app = create_review_app(ServiceSettings.from_env())     # what `semdup serve` runs, one per uvicorn worker
    uvicorn semdup.review.app:app_from_env --factory

The reranker's layer cannot import the flag store (``semdup.alerts`` sits above it), so the review page is
composed here, one layer up: the app factory includes the router it is given, and this module gives it the review
router, the review context in ``app.state.review`` and the review figures in the app's Prometheus registry.
"""

from __future__ import annotations

from typing import Any

from semdup.reranker.ingest import TaskSender
from semdup.reranker.reranker import Reranker
from semdup.reranker.service import app_from_env as _service_app_from_env
from semdup.reranker.service import create_app
from semdup.reranker.settings import ServiceSettings
from semdup.review.context import review_context
from semdup.review.metrics import ReviewCollector
from semdup.review.router import router

__all__ = ["create_review_app", "app_from_env"]


def create_review_app(
    settings: ServiceSettings, reranker: Reranker | None = None, sender: TaskSender | None = None
) -> Any:
    """The reranking service with the review page (off, answering 404, until some key has the review scope)."""
    app = create_app(settings, reranker=reranker, sender=sender, routers=[router])
    rr = app.state.reranker
    ctx = review_context(settings, rr.client, rr.version)
    app.state.review = ctx
    if settings.review_enabled:
        app.state.registry.register(ReviewCollector(ctx.stats))
    return app


def app_from_env() -> Any:
    """uvicorn factory (``--factory``): :func:`semdup.reranker.service.app_from_env` building this app."""
    return _service_app_from_env(build=create_review_app)
