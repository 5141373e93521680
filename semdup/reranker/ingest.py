"""HTTP ingest's transport: the service sends the indexer's tasks by name, for sites that cannot talk to Celery.

``semdup.reranker`` never imports ``semdup.indexer`` (sibling layers), so a Celery client of its own sends the
tasks named in :mod:`semdup.core.task_names` to the indexer's queue, as JSON (the only content the workers
accept). Nothing connects at start-up: the first request opens the broker connection, so the service starts
(and ``/readyz`` answers) while the broker is down. A request's posts or ids go out in batches of
:data:`BATCH`, one task each, in order; when the broker fails part-way, :class:`EnqueueFailed` says how many
were queued before it, and sending the whole request again is harmless (every indexer write is idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from semdup.core.errors import BrokerUnavailable, SearchIndexError
from semdup.core.settings import redact_url
from semdup.core.task_names import INDEXER_QUEUE

__all__ = ["BATCH", "TaskSender", "CelerySender", "Enqueued", "EnqueueFailed", "NotASiteIndex", "enqueue_batches"]

logger = logging.getLogger(__name__)

BATCH = 64  # posts or ids per task: the batch `semdup index-posts` sends, small enough to retry whole
_BROKER_TIMEOUT = 5.0  # seconds to connect to / write to the broker before a request gets its 503
# A publish that fails is tried again twice within about a second (a broker restarting), then given up: the
# caller is waiting on an HTTP request and gets a 503 it can retry, rather than a hung thread.
_RETRY_POLICY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.4, "interval_max": 0.6}


class TaskSender(Protocol):
    """What the endpoints need from a broker client: send one task by name, or raise."""

    def send(self, name: str, args: list[Any]) -> None: ...


class CelerySender:
    """A producer-only Celery app on ``broker_url``: JSON messages to the indexer's queue, no result backend.

    Thread-safe (kombu's producer pool), so the service's request threads share one.
    """

    def __init__(self, broker_url: str, *, queue: str = INDEXER_QUEUE, timeout: float = _BROKER_TIMEOUT) -> None:
        from celery import Celery

        self.queue = queue
        self.safe_url = redact_url(broker_url)
        self.app = Celery("semdup.ingest", broker=broker_url, set_as_current=False)
        self.app.conf.update(
            task_serializer="json",
            accept_content=["json"],
            result_backend=None,
            task_ignore_result=True,
            broker_connection_timeout=timeout,
            broker_transport_options={"socket_timeout": timeout, "socket_connect_timeout": timeout},
        )

    def send(self, name: str, args: list[Any]) -> None:
        self.app.send_task(name, args=args, queue=self.queue, retry=True, retry_policy=_RETRY_POLICY)


class NotASiteIndex(SearchIndexError):
    """``/v1/posts/sync`` named an index semdup created: the workers would find no site's index to re-read the posts
    from and park every id, so the request is refused before anything is enqueued (the service answers 409)."""


@dataclass(frozen=True)
class Enqueued:
    """What one request put on the broker: ``items`` posts or ids in ``tasks`` tasks."""

    items: int
    tasks: int


class EnqueueFailed(BrokerUnavailable):
    """The broker failed part-way; ``details`` (enqueued, tasks) go back to the client beside the error."""

    def __init__(self, message: str, enqueued: int, tasks: int) -> None:
        super().__init__(message)
        self.details = {"enqueued": enqueued, "tasks": tasks}


def enqueue_batches(
    sender: TaskSender,
    name: str,
    index: str,
    items: Sequence[Any],
    extra: Sequence[Any] = (),
    *,
    batch: int = BATCH,
) -> Enqueued:
    """Send ``name(index, items[i:i+batch], *extra)`` for each batch, in order.

    Raises:
        EnqueueFailed: a batch could not be sent; the message and ``details`` count those sent before it.
    """
    sent = tasks = 0
    what = name.rsplit(".", 1)[-1]
    for start in range(0, len(items), batch):
        chunk = list(items[start : start + batch])
        try:
            sender.send(name, [index, chunk, *extra])
        except Exception as exc:  # kombu and redis raise transport-specific errors
            logger.warning("%s for %s: broker failed after %d of %d items: %s", what, index, sent, len(items), exc)
            raise EnqueueFailed(
                f"the broker did not take the tasks ({type(exc).__name__}: {exc}); {sent} of {len(items)} were "
                f"enqueued in {tasks} task(s) before it failed. Send the request again once the broker is back "
                f"(sending posts twice is harmless)",
                enqueued=sent,
                tasks=tasks,
            ) from exc
        sent += len(chunk)
        tasks += 1
    logger.info("%s for %s: %d items enqueued in %d task(s)", what, index, sent, tasks)
    return Enqueued(items=sent, tasks=tasks)
