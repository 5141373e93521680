"""Producers: processes that submit index jobs (``semdup index-posts``, ``backfill``, ``watch``, ``upgrade``,
``enable --backfill``) and wait for them. (The HTTP service is one too; its factory, :func:`semdup.apps.http.
create_app`, builds its own publishing app and sweeping thread.)

They send through the indexer queue's Celery app (:data:`semdup.ingest.celery_app.app`) pointed at the settings
tree's broker here, by task name (:mod:`semdup.core.task_names`; a producer never imports the workers' task modules
to send); the library functions they call (:mod:`semdup.ingest.jobs`, ``backfill``, ``reconcile``) take the
tree's sweep settings as plain arguments::

    settings = load_settings()
    connect_producers(settings)                                   # checks the broker answers
    job = enqueue_posts(client, "travel", posts, bundle.version)
    result = follow(client, job, timeout=3600, sweep=settings.sweep_settings())
"""

from __future__ import annotations

from typing import Any

from semdup.apps.settings import Settings

__all__ = ["connect_producers"]


def connect_producers(settings: Settings) -> Any:
    """Point the indexer queue's app at ``settings``' broker and check that it answers.

    Raises:
        BrokerUnavailable: no broker configured, or it did not answer.
    """
    from semdup.ingest.celery_app import connect_broker

    return connect_broker(settings.broker_settings().url, visibility_timeout=settings.worker.visibility_timeout)
