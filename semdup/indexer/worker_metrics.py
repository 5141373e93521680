"""Prometheus metrics of the indexing workers: posts indexed, posts parked, task failures, batch latency.

Off unless a port is set (``SEMDUP_METRICS_PORT``, the ``metrics`` section of the settings tree, which the worker
app of :mod:`semdup.apps.worker` hands to :func:`configure`). Then the worker's main process serves ``/metrics``
on that port (``prometheus_client.start_http_server``) and every pool process writes its counts to memory-mapped
files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess mode), so the numbers of all Celery prefork
children add up in one scrape, and a child that is replaced keeps its counts. Without that folder a private
one is made. The folder's old ``*.db`` files are removed when the worker starts: they belong to an earlier run.

Nothing here touches the task code: the numbers come from Celery's task signals, connected by
:func:`connect_signals` (``semdup.indexer.tasks`` calls it at import)::

    SEMDUP_METRICS_PORT=9108 semdup worker --bundle /bundles/current -c 4
    curl -s localhost:9108/metrics | grep semdup_worker_posts_indexed_total

Metrics (label ``task`` is the short task name, ``index_posts``, ``backfill_batch`` or ``delete_posts``):

    semdup_worker_posts_indexed_total{task}      posts written (or deleted) by finished batches
    semdup_worker_posts_parked_total{task}       posts parked in semdup-parked instead of written
    semdup_worker_task_failures_total{task,error}  batches Celery saw fail (a lost worker process; the work's errors
                                                   are retried or parked, see tasks.py)
    semdup_worker_task_retries_total{task}       retries scheduled on transient errors (cluster down, timeouts)
    semdup_worker_batch_seconds{task}            histogram of one batch's run time, successful or not

``prometheus_client`` is imported only when metrics are on (it ships with ``semdup[serve]``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError

__all__ = [
    "WorkerMetricsSettings",
    "WorkerMetrics",
    "configure",
    "metrics",
    "enable_multiprocess",
    "start_metrics_server",
    "connect_signals",
    "METRICS_PORT_ENV",
    "METRICS_ADDR_ENV",
    "MULTIPROC_DIR_ENV",
    "BATCH_SECONDS_BUCKETS",
]

logger = logging.getLogger(__name__)

METRICS_PORT_ENV = "SEMDUP_METRICS_PORT"
METRICS_ADDR_ENV = "SEMDUP_METRICS_ADDR"
MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"  # prometheus_client's own name
BATCH_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_TASK_PREFIX = "semdup.indexer."
_PIP_HINT = 'worker metrics need prometheus_client: pip install "semdup[serve]" (or pip install prometheus-client)'


@dataclass(frozen=True)
class WorkerMetricsSettings:
    """Where the worker serves ``/metrics``; ``port=None`` means metrics are off."""

    port: int | None = None
    addr: str = "0.0.0.0"
    multiproc_dir: str | None = None

    def __post_init__(self) -> None:
        if self.port is not None and not 1 <= self.port <= 65535:
            raise ConfigError(f"{METRICS_PORT_ENV} must be a TCP port 1-65535, got {self.port}")


class WorkerMetrics:
    """The worker's metric objects, registered in ``registry`` (default: prometheus_client's global one)."""

    def __init__(self, registry: Any = None) -> None:
        try:
            from prometheus_client import REGISTRY, Counter, Histogram
        except ImportError as exc:
            raise ImportError(_PIP_HINT) from exc
        registry = REGISTRY if registry is None else registry
        self.posts_indexed = Counter(
            "semdup_worker_posts_indexed",
            "Posts written (or deleted) by finished batches.",
            ["task"],
            registry=registry,
        )
        self.posts_parked = Counter(
            "semdup_worker_posts_parked",
            "Posts parked in semdup-parked instead of written.",
            ["task"],
            registry=registry,
        )
        self.task_failures = Counter(
            "semdup_worker_task_failures",
            "Batches that raised for good (retries used up or not transient).",
            ["task", "error"],
            registry=registry,
        )
        self.task_retries = Counter(
            "semdup_worker_task_retries", "Retries scheduled on transient errors.", ["task"], registry=registry
        )
        self.batch_seconds = Histogram(
            "semdup_worker_batch_seconds",
            "Run time of one batch task, successful or not.",
            ["task"],
            buckets=BATCH_SECONDS_BUCKETS,
            registry=registry,
        )

    def record_batch(self, task: str, result: Mapping[str, Any] | None, seconds: float | None) -> None:
        """Count one finished batch from its result dict (``written``/``deleted``, ``parked``)."""
        if seconds is not None:
            self.batch_seconds.labels(task=task).observe(max(0.0, seconds))
        if not isinstance(result, Mapping):
            return
        written = int(result.get("written", result.get("deleted", 0)) or 0)
        parked = int(result.get("parked", 0) or 0)
        if written > 0:
            self.posts_indexed.labels(task=task).inc(written)
        if parked > 0:
            self.posts_parked.labels(task=task).inc(parked)

    def record_failure(self, task: str, exc: BaseException | None, seconds: float | None = None) -> None:
        """Count one batch that raised for good; ``error`` is the exception class name (bounded label set)."""
        if seconds is not None:
            self.batch_seconds.labels(task=task).observe(max(0.0, seconds))
        self.task_failures.labels(task=task, error=type(exc).__name__ if exc is not None else "unknown").inc()

    def record_retry(self, task: str) -> None:
        self.task_retries.labels(task=task).inc()


_metrics: WorkerMetrics | None = None
_metrics_lock = threading.Lock()
_started: dict[str, Any] = {}


def metrics() -> WorkerMetrics:
    """This process's metrics, made on first use (so after fork, and after multiprocess mode is chosen)."""
    global _metrics
    with _metrics_lock:
        if _metrics is None:
            _metrics = WorkerMetrics()
        return _metrics


def enable_multiprocess(directory: str | None = None) -> Path:
    """Switch prometheus_client to multiprocess mode in ``directory`` (made if missing), emptied of old data.

    Must run in the worker's main process before the pool forks and before any metric exists.
    """
    path = Path(directory or tempfile.mkdtemp(prefix="semdup-metrics-"))
    try:
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*.db"):
            if old.name.split("_", 1)[0] in ("counter", "gauge", "histogram", "summary"):
                old.unlink()
    except OSError as exc:
        raise ConfigError(
            f"cannot use {path} for worker metrics ({exc}); point {MULTIPROC_DIR_ENV} at a writable folder"
        ) from exc
    os.environ[MULTIPROC_DIR_ENV] = str(path)  # inherited by the pool processes
    try:
        from prometheus_client import values
    except ImportError as exc:
        raise ImportError(_PIP_HINT) from exc
    values.ValueClass = values.get_value_class()  # in case prometheus_client was imported before the variable
    return path


def start_metrics_server(settings: WorkerMetricsSettings) -> Any:
    """Serve the sum over all worker processes on ``settings.port``; returns the HTTP server (None when off).

    Raises:
        ConfigError: the port is taken or cannot be bound.
    """
    if settings.port is None:
        return None
    if "server" in _started:
        return _started["server"]
    path = enable_multiprocess(settings.multiproc_dir)
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(path))
    try:
        server = start_http_server(settings.port, addr=settings.addr, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve worker metrics on {settings.addr}:{settings.port} ({exc}); "
            f"choose a free port with {METRICS_PORT_ENV}"
        ) from exc
    _started["server"], _started["dir"] = server, str(path)
    logger.info("worker metrics on http://%s:%d/metrics (multiprocess dir %s)", settings.addr, settings.port, path)
    return server


# ---- Celery signal handlers: they never raise, a metrics problem must not fail a batch ----

_starts: dict[str, float] = {}


def _short(task: Any) -> str | None:
    name = str(getattr(task, "name", None) or task or "")
    return name[len(_TASK_PREFIX) :] if name.startswith(_TASK_PREFIX) else None


def _elapsed(task_id: str | None) -> float | None:
    start = _starts.pop(str(task_id), None)
    return None if start is None else time.monotonic() - start


_settings: dict[str, WorkerMetricsSettings] = {}


def configure(settings: WorkerMetricsSettings) -> None:
    """Where this worker serves ``/metrics`` (the composition root calls it before the worker starts)."""
    _settings["current"] = settings


def _on_worker_init(**_: Any) -> None:
    try:
        start_metrics_server(_settings.get("current") or WorkerMetricsSettings())
    except ConfigError as exc:
        logger.error("worker metrics are off: %s", exc)


def _on_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if _enabled() and _short(task):
        _starts[str(task_id)] = time.monotonic()


def _on_postrun(
    task_id: str | None = None, task: Any = None, retval: Any = None, state: str | None = None, **_: Any
) -> None:
    name = _short(task)
    seconds = _elapsed(task_id)
    if not (_enabled() and name) or state != "SUCCESS":
        return  # failures are counted by task_failure, retries by task_retry
    try:
        metrics().record_batch(name, retval, seconds)
    except Exception:  # noqa: BLE001
        logger.exception("could not record metrics of task %s; the batch itself is unaffected", task_id)


def _on_failure(
    sender: Any = None, task_id: str | None = None, exception: BaseException | None = None, **_: Any
) -> None:
    name = _short(sender)
    if _enabled() and name:
        try:
            metrics().record_failure(name, exception, _elapsed(task_id))
        except Exception:  # noqa: BLE001
            logger.exception("could not record the failure of task %s in metrics", task_id)


def _on_retry(sender: Any = None, **_: Any) -> None:
    name = _short(sender)
    if _enabled() and name:
        try:
            metrics().record_retry(name)
        except Exception:  # noqa: BLE001
            logger.exception("could not record a retry in metrics")


def _on_process_shutdown(**_: Any) -> None:
    if not _enabled():
        return
    try:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())
    except Exception:  # noqa: BLE001 - the process is going away anyway
        pass


def _enabled() -> bool:
    """Metrics are on in this process: the main process serves them (a pool child inherits that at fork)."""
    return "dir" in _started


def connect_signals(settings: WorkerMetricsSettings | None = None) -> None:
    """Connect the handlers to Celery's signals (idempotent), and :func:`configure` ``settings`` when given. Cheap
    when metrics are off: handlers return at once."""
    from celery import signals

    if settings is not None:
        configure(settings)
    if _started.get("signals"):
        return
    signals.worker_init.connect(_on_worker_init, weak=False)
    signals.task_prerun.connect(_on_prerun, weak=False)
    signals.task_postrun.connect(_on_postrun, weak=False)
    signals.task_failure.connect(_on_failure, weak=False)
    signals.task_retry.connect(_on_retry, weak=False)
    signals.worker_process_shutdown.connect(_on_process_shutdown, weak=False)
    _started["signals"] = True
