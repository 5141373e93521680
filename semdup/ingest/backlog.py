"""What is still queued on the broker: the indexing tasks waiting in the queue or held unacknowledged by a worker.

A post is *queued* while a task message holding it is on the broker, and only then: in the queue, or delivered
to a worker that has not acknowledged it yet (running, waiting out a retry countdown, or orphaned by a worker
killed whole, until the visibility timeout hands it out again). Redis keeps both where they can be read
(the queue's lists and the ``unacked`` hash), so :func:`queued_tasks` reads them without consuming anything.
RabbitMQ cannot be read this way: it returns None there ("unknown").

One read is one Lua script over the queue's lists and ``unacked``, so it is atomic: Redis runs nothing else
meanwhile. Two separate reads (LRANGE, then HVALS) could miss a message that a worker's ack or a visibility
restore moved between them. Even an atomic read misses a message in the one place neither holds it: kombu's
Redis transport moves a delivery in two steps, BRPOP (the message leaves the list on the server) and, once the
worker has read the reply, HSET into ``unacked``; kombu 5.7 even keeps a BRPOP reply unread in the socket while
the worker has no prefetch credit. A message is in that gap for milliseconds, or for as long as the worker's
running task holds its credit; if the worker dies there the message is gone. So "neither queued nor done" is
never final after one read: the job's ledger and sweeper (:mod:`semdup.ingest.sweeper`) confirm it over time and
send such a batch again.

Example::

    queued = queued_post_ids(app, index="travel", job=job.id)   # None: the broker cannot tell
    ids = queued_task_ids(app)                                   # task ids only: cheap for a large backlog
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

from celery import Celery

from semdup.core.errors import BrokerUnavailable
from semdup.ingest.celery_app import QUEUE

__all__ = ["QueuedTask", "queued_tasks", "queued_task_ids", "queued_post_ids", "decode_message", "check_broker"]

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


# KEYS: the queue's lists (one per priority step), then the unacked hash. ARGV[1]: "raw" returns every message
# as ("q" | "u", message); "ids" returns ("q" | "u", task id) for semdup's indexer tasks only, decoded here so a
# large backlog's bodies never cross the wire. An unacked entry is [message, exchange, routing key].
_SNAPSHOT_LUA = """
local out = {}
local ids = ARGV[1] == 'ids'
local function add(where, raw, unacked)
  if not ids then
    out[#out + 1] = where
    out[#out + 1] = raw
    return
  end
  local ok, msg = pcall(cjson.decode, raw)
  if not ok or type(msg) ~= 'table' then return end
  if unacked then msg = msg[1] end
  local headers = type(msg) == 'table' and msg['headers'] or nil
  if type(headers) ~= 'table' then return end
  local task, id = headers['task'], headers['id']
  if type(task) == 'string' and type(id) == 'string' and string.sub(task, 1, 15) == 'semdup.indexer.' then
    out[#out + 1] = where
    out[#out + 1] = id
  end
end
for i = 1, #KEYS - 1 do
  for _, raw in ipairs(redis.call('LRANGE', KEYS[i], 0, -1)) do add('q', raw, false) end
end
for _, raw in ipairs(redis.call('HVALS', KEYS[#KEYS])) do add('u', raw, true) end
return out
"""


def _snapshot(app: Celery, mode: str) -> list[tuple[bool, str | bytes]] | None:
    """``(unacked, item)`` for every message in the queue and ``unacked``, read atomically (one Lua script);
    None when the broker is not Redis.

    Raises:
        BrokerUnavailable: Redis did not answer.
    """
    try:
        with app.connection_for_read() as conn:
            if getattr(conn.transport, "driver_type", "") != "redis":
                return None
            channel = conn.default_channel
            keys = [channel._q_for_pri(QUEUE, pri) for pri in channel.priority_steps] + [channel.unacked_key]
            flat = channel.client.eval(_SNAPSHOT_LUA, len(keys), *keys, mode)
    except OSError as exc:
        raise BrokerUnavailable(f"the broker did not answer while listing queued tasks: {exc}") from exc
    except Exception as exc:  # redis-py and kombu raise their own connection errors
        if type(exc).__module__.split(".")[0] in ("redis", "kombu"):
            raise BrokerUnavailable(f"the broker did not answer while listing queued tasks: {exc}") from exc
        raise
    return [(flat[i] in (b"u", "u"), flat[i + 1]) for i in range(0, len(flat), 2)]


def check_broker(app: Celery, timeout: float = 5.0) -> None:
    """Connect to the broker once (a broker whose queue cannot be read still says whether it answers).

    Raises:
        BrokerUnavailable: it did not answer within ``timeout`` seconds.
    """
    try:
        with app.connection_for_read() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
    except Exception as exc:  # kombu raises transport-specific errors
        raise BrokerUnavailable(f"the broker did not answer: {type(exc).__name__}: {exc}") from exc


def queued_tasks(app: Celery) -> list[QueuedTask] | None:
    """Every semdup task message in the queue or held unacknowledged, read atomically without consuming; None when
    the broker is not Redis (it cannot be read without taking the messages).

    Raises:
        BrokerUnavailable: Redis did not answer.
    """
    snapshot = _snapshot(app, "raw")
    if snapshot is None:
        return None
    out = []
    for unacked, raw in snapshot:
        try:
            task = decode_message(raw, unacked)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            logger.warning("a message on the broker could not be read (%s); it is left as it is", exc)
            continue
        if task is not None:
            out.append(task)
    return out


def queued_task_ids(app: Celery) -> dict[str, bool] | None:
    """``task id -> unacknowledged`` of every semdup indexer task message on the broker, read atomically and
    decoded by Redis itself (only the ids come back); None when the broker is not Redis.

    Raises:
        BrokerUnavailable: Redis did not answer.
    """
    snapshot = _snapshot(app, "ids")
    if snapshot is None:
        return None
    out: dict[str, bool] = {}
    for unacked, task_id in snapshot:
        key = task_id.decode() if isinstance(task_id, bytes) else str(task_id)
        out[key] = out.get(key, False) or unacked
    return out


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
