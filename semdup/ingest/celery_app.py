"""The Celery app of the indexer's queue and its delivery settings: what producers publish through and workers
consume from.

This module reads no settings and names no task module: the composition root points the app at the broker of the
settings tree (:func:`configure_app`: :mod:`semdup.apps.worker` for workers, which also tells it which task modules
a worker loads; :func:`connect_broker` for the CLI's producers). The HTTP service publishes through an app of its
own with the same settings and shorter timeouts (:func:`producer_app`), so a request thread never waits on the
broker for long. Nothing connects at import time: the app object is lazy. Producers send tasks by name
(:mod:`semdup.core.task_names`) and never import the workers' task modules; the workers' per-process state (bundle,
client) is :mod:`semdup.indexer.runtime`.

Delivery guarantees, and why they are safe here (the three states a post ends in: written, parked, or still
queued on the broker; README.md in this folder):

* ``task_acks_late`` + ``task_reject_on_worker_lost``: a worker process killed mid-batch (SIGKILL, OOM) gets its
  message redelivered instead of losing the batch. This would be dangerous for a task with side effects
  that add up, but every indexer write is idempotent: documents use ``_id = post id`` and their content
  is a pure function of (post, bundle version), so running a batch twice writes the same documents.
  A batch that kills its worker every time cannot loop for ever on Redis either: its payload is small
  (64 posts) and text is cut to a bounded length by the text pipeline before encoding.
* Redis ``visibility_timeout``: a message not acknowledged within it (its worker died with the whole
  process group) is handed to another worker; so a whole-worker SIGKILL delays its batches by up to this
  long. It must exceed what a message can spend unacknowledged in a live worker: the task's run time (bounded
  by :data:`TASK_SOFT_TIME_LIMIT`, 120 s) plus the longest retry countdown it holds before running
  (:class:`~semdup.indexer.retry.RetryPolicy` caps it at a fifth of the visibility timeout, 60 s at most),
  else a held message is handed out twice. Hence :data:`DEFAULT_VISIBILITY_TIMEOUT` = 300 s (120 + 60 with
  room to spare), not an hour; tests lower it with ``SEMDUP_VISIBILITY_TIMEOUT`` (the settings tree). RabbitMQ
  ignores it (it redelivers on a closed channel).
* RabbitMQ (``amqp://``): the broker itself tracks what it delivered, so a consumer whose connection closes
  (a whole worker SIGKILLed: the kernel closes its sockets) has every unacknowledged message put back at once,
  and a message is never in neither place. Set here: publisher confirms (``confirm_publish``: ``apply_async``
  returns once the broker has the message, so a producer never counts a batch the broker dropped), a classic
  durable queue with persistent messages (Celery's defaults, named explicitly: a quorum queue would disable
  global QoS, so a retried task's countdown could no longer raise the prefetch and would need RabbitMQ's delayed
  delivery over a topic exchange; and RabbitMQ 4's quorum queues drop or dead-letter a message after 20
  redeliveries, a batch that keeps killing its worker included), ``worker_prefetch_multiplier=1`` and heartbeats
  (``broker_heartbeat``, 60 s: a worker cut off without its socket closing is noticed within two of them). The
  broker's ``consumer_timeout`` (30 minutes by default) must exceed what a message can spend unacknowledged in a
  live worker: a task (:data:`TASK_SOFT_TIME_LIMIT`) plus its longest retry countdown, 180 s here.
* JSON only (``accept_content=["json"]``): a broker message can never run code (pickle could).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery

from semdup.core.errors import BrokerUnavailable
from semdup.core.logs import scrub
from semdup.core.settings import redact_url
from semdup.core.task_names import INDEXER_QUEUE

__all__ = [
    "app",
    "celery_config",
    "configure_app",
    "connect_broker",
    "producer_app",
    "is_amqp",
    "explicitly_configured",
    "QUEUE",
    "DEFAULT_VISIBILITY_TIMEOUT",
    "TASK_SOFT_TIME_LIMIT",
]

logger = logging.getLogger(__name__)

QUEUE = INDEXER_QUEUE  # semdup.indexer: the workers' queue
DEFAULT_VISIBILITY_TIMEOUT = 300  # seconds; see the module doc for why it must exceed a task plus a retry wait
TASK_SOFT_TIME_LIMIT = 120  # seconds a batch may run; past it the task is retried (a hung request, not a bad post)
_BROKER_SOCKET_TIMEOUT = 30.0
_BROKER_CONNECT_TIMEOUT = 10.0
_BROKER_HEARTBEAT = 60  # seconds; RabbitMQ closes a connection that misses two, and requeues what it held
_AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")
_REQUEST_TIMEOUT = 5.0  # seconds an HTTP request's publish may wait to connect to / write to the broker
# A request's publish that fails is tried again twice within about a second (a broker restarting), then given up:
# the caller is waiting on an HTTP request and gets a 503 it can retry, rather than a hung thread.
_REQUEST_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.4, "interval_max": 0.6}


def is_amqp(broker_url: str) -> bool:
    """Whether ``broker_url`` names an AMQP broker (RabbitMQ) rather than Redis."""
    return broker_url.split("://", 1)[0].lower() in _AMQP_SCHEMES


def _transport_options(broker_url: str, visibility_timeout: int, timeout: float | None) -> dict[str, Any]:
    """The transport options of ``broker_url``'s kind (each transport gets only its own keys)."""
    if is_amqp(broker_url):
        return {"confirm_publish": True}
    restore_every = max(1, min(10, visibility_timeout // 4))
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": restore_every,
        "unacked_restore_throttle": 1,
        "socket_timeout": timeout or _BROKER_SOCKET_TIMEOUT,
        "socket_connect_timeout": timeout or _BROKER_CONNECT_TIMEOUT,
    }


def celery_config(
    broker_url: str, *, visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT, timeout: float | None = None
) -> dict[str, Any]:
    """Celery settings for the indexer; the broker URL may be ``redis://`` or ``amqp://`` (module doc). ``timeout``:
    seconds to connect to and write to the broker (default 10 and 30)."""
    if visibility_timeout < 10:
        raise ValueError(f"visibility_timeout must be at least 10 seconds, got {visibility_timeout}")
    return {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_connection_timeout": timeout or _BROKER_CONNECT_TIMEOUT,
        "broker_transport_options": _transport_options(broker_url, visibility_timeout, timeout),
        "broker_heartbeat": _BROKER_HEARTBEAT,  # AMQP only
        "task_default_queue_type": "classic",  # AMQP only; see the module doc for why not quorum
        "task_default_delivery_mode": "persistent",
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "result_backend": None,
        "task_default_queue": QUEUE,
        "task_routes": {"semdup.indexer.*": {"queue": QUEUE}},
        "worker_hijack_root_logger": False,
        "worker_send_task_events": False,
    }


app = Celery("semdup.indexer", set_as_current=False)  # the task modules: semdup.apps.worker says which
_configured = threading.Lock()
_explicit = False


def configure_app(broker_url: str, *, visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT) -> Celery:
    """Point the app at a broker (the composition root, the CLI's producers and tests call this)."""
    global _explicit
    with _configured:
        _explicit = True
        if app.conf.get("broker_url") not in (None, broker_url):
            _drop_connections()
        app.conf.update(celery_config(broker_url, visibility_timeout=visibility_timeout))
    return app


def connect_broker(url: str, *, visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT) -> Celery:
    """Point the app at the broker ``url`` and check that it answers (the CLI's producers).

    Raises:
        BrokerUnavailable: the broker did not answer (the message says how to start the local one).
    """
    configure_app(url, visibility_timeout=visibility_timeout)
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=2, interval_start=0.5, interval_step=0.5, timeout=10)
    except Exception as exc:  # kombu raises transport-specific errors
        raise BrokerUnavailable(
            f"the Celery broker at {redact_url(url)} did not answer ({scrub(str(exc))}); start the local one with "
            "`semdup broker start` or set SEMDUP_BROKER_URL"
        ) from exc
    return app


def producer_app(broker_url: str, *, timeout: float = _REQUEST_TIMEOUT) -> Celery:
    """An app of its own for a service's request threads: this queue's settings, ``timeout`` seconds to reach the
    broker. Thread-safe (kombu's producer pool); nothing connects until the first publish, so the service starts
    (and ``/readyz`` answers) while the broker is down."""
    own = Celery("semdup.ingest", set_as_current=False)
    own.conf.update(celery_config(broker_url, timeout=timeout), task_publish_retry_policy=_REQUEST_RETRY)
    return own


def explicitly_configured() -> bool:
    """Whether :func:`configure_app` pointed the app at a broker (else the root configures it on first use)."""
    return _explicit


def _drop_connections() -> None:
    """Forget the connection and producer pools of the previous broker (a test or benchmark switching brokers);
    what Celery itself does after a fork."""
    from kombu import pools

    pool, app._pool = app._pool, None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None
    if pool is None:
        return
    pool.force_close_all()
    # The closed pool is still kombu's process-wide pool for that broker (``pools.connections``, and the producer
    # pool built on it): forget both, or pointing the app back at that broker would hand out the closed pool
    # ("Acquire on closed pool").
    for group in (pools.connections, pools.producers):
        for key, value in list(group.items()):  # keys as stored: kombu's EqualityDict keeps hashes
            if value is pool or getattr(value, "connections", None) is pool:
                dict.__delitem__(group, key)


