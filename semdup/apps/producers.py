"""Producers: processes that enqueue the indexer's tasks (``semdup index-posts``, ``backfill``, ``watch``,
``upgrade``, ``enable --backfill``, and HTTP ingest) and wait for them.

They send through the indexer queue's Celery app (:data:`semdup.indexer.celery_app.app`) pointed at the settings
tree's broker here, by task name (:mod:`semdup.core.task_names`; a producer never imports the workers' task modules
to send); the library functions they call (:mod:`semdup.indexer.jobs`, ``backfill``, ``reconcile``, ``upgrade``)
take that app's connection and the tree's sweep settings as plain arguments::

    settings = load_settings()
    connect_producers(settings)                                   # checks the broker answers
    job = enqueue_posts(client, "travel", posts, bundle.version)
    done = wait_for(client, job, sweep=settings.sweep_settings())
"""

from __future__ import annotations

from typing import Any

from semdup.apps.settings import Settings

__all__ = ["connect_producers", "ingest_sender"]


def connect_producers(settings: Settings) -> Any:
    """Point the indexer queue's app at ``settings``' broker and check that it answers.

    Raises:
        BrokerUnavailable: no broker configured, or it did not answer.
    """
    from semdup.indexer.jobs import connect_broker

    return connect_broker(settings.broker_settings().url, visibility_timeout=settings.worker.visibility_timeout)


def ingest_sender(settings: Settings) -> Any:
    """The HTTP ingest endpoints' sender (:class:`semdup.reranker.ingest.CelerySender`) on ``settings``' broker, or
    None when ingest is off or no broker is set; it connects on the first request, not here."""
    from semdup.reranker.ingest import CelerySender

    service = settings.service_settings()
    if not service.ingest or service.broker is None:
        return None
    return CelerySender(service.broker.url)
