"""Pointing the indexer's Celery app at another broker and back (the test suite and the reliability benchmark switch
between Redis and RabbitMQ) must never hand out the closed pool of the first: the full suite once failed with kombu's
"Acquire on closed pool" after a RabbitMQ test ran between two Redis ones."""

from __future__ import annotations

from semdup.ingest.celery_app import app, configure_app


def test_switching_back_to_a_broker_gives_an_open_pool_for_it() -> None:
    first, second = "redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"  # nothing listens: no connection is made
    configure_app(first)
    old = app.producer_pool  # builds kombu's process-wide connection and producer pools for `first`
    configure_app(second)
    assert old.connections._closed  # the pool of the broker left behind is closed ...
    configure_app(first)
    again = app.producer_pool
    assert again is not old and not again.connections._closed  # ... and a fresh one serves it when it comes back
    assert app.pool is again.connections
