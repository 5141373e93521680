"""What is still queued on the broker: the indexing tasks waiting in the queue or held unacknowledged by a worker.

A post is *queued* while a task message holding it is on the broker, and only then: in the queue, or delivered
to a worker that has not acknowledged it yet (running, waiting out a retry countdown, or orphaned by a worker
killed whole, until the visibility timeout hands it out again). Redis keeps both where they can be read
(the queue's lists and the ``unacked`` hash), so :func:`queued_tasks` reads them without consuming anything.
RabbitMQ cannot be read this way: it returns None there ("unknown").

Example::

    queued = queued_post_ids(app, index="travel", job=job.id)   # None: the broker cannot tell
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from celery import Celery

from semdup.core.errors import BrokerUnavailable
from semdup.indexer.celery_app import QUEUE

__all__ = ["QueuedTask", "queued_tasks", "queued_post_ids", "decode_message"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueuedTask:
    """One task message on the broker: its task name and id, arguments, and whether a worker holds it."""

    task: str
    task_id: str
    args: list[Any]
    kwargs: dict[str, Any]
    unacked: bool

    @property
    def index(self) -> str:
        return str(self.args[0] if self.args else self.kwargs.get("index", ""))

    @property
    def job(self) -> str | None:
        return self.kwargs.get("job")

    def post_ids(self) -> list[str]:
        """The ids of the posts the task carries (posts for ``index_posts``, ids for the others)."""
        items = self.args[1] if len(self.args) > 1 else self.kwargs.get("posts", self.kwargs.get("ids", []))
        return [str(i["id"]) if isinstance(i, dict) and "id" in i else str(i) for i in items or []]


def decode_message(raw: str | bytes, unacked: bool = False) -> QueuedTask | None:
    """A kombu Redis message (JSON envelope, base64 body of Celery's protocol 2) as a :class:`QueuedTask`;
    None for what is not a semdup task."""
    envelope = json.loads(raw)
    if unacked:  # the unacked hash keeps [message, exchange, routing key]
        envelope = envelope[0]
    headers = envelope.get("headers") or {}
    name = str(headers.get("task", ""))
    if not name.startswith("semdup.indexer."):
        return None
    body: Any = envelope.get("body", "")
    if (envelope.get("properties") or {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, *_ = json.loads(body)
    return QueuedTask(name, str(headers.get("id", "")), list(args), dict(kwargs), unacked)


def _raw_messages(channel: Any) -> Iterator[tuple[str | bytes, bool]]:
    client = channel.client
    for pri in channel.priority_steps:
        for raw in client.lrange(channel._q_for_pri(QUEUE, pri), 0, -1):
            yield raw, False
    for raw in client.hvals(channel.unacked_key):
        yield raw, True


def queued_tasks(app: Celery) -> list[QueuedTask] | None:
    """Every semdup task message in the queue or held unacknowledged, read without consuming; None when the
    broker is not Redis (it cannot be read without taking the messages).

    Raises:
        BrokerUnavailable: Redis did not answer.
    """
    try:
        with app.connection_for_read() as conn:
            if getattr(conn.transport, "driver_type", "") != "redis":
                return None
            out = []
            for raw, unacked in _raw_messages(conn.default_channel):
                try:
                    task = decode_message(raw, unacked)
                except (ValueError, TypeError, KeyError, IndexError) as exc:
                    logger.warning("a message on the broker could not be read (%s); it is left as it is", exc)
                    continue
                if task is not None:
                    out.append(task)
            return out
    except OSError as exc:
        raise BrokerUnavailable(f"the broker did not answer while listing queued tasks: {exc}") from exc
    except Exception as exc:  # redis-py and kombu raise their own connection errors
        if type(exc).__module__.split(".")[0] in ("redis", "kombu"):
            raise BrokerUnavailable(f"the broker did not answer while listing queued tasks: {exc}") from exc
        raise


def queued_post_ids(app: Celery, *, index: str | None = None, job: str | None = None) -> set[str] | None:
    """Ids of the posts held by queued tasks (of ``index`` and ``job`` when given); None when unknown."""
    tasks = queued_tasks(app)
    if tasks is None:
        return None
    return {
        pid
        for t in tasks
        if (index is None or t.index == index) and (job is None or t.job == job)
        for pid in t.post_ids()
    }
