"""The per-process state of an indexing worker: one bundle (one onnxruntime session), one OpenSearch client, the
retry policy, loaded once per process after fork.

The composition root (:mod:`semdup.apps.worker`) gives the loader of a process's :class:`WorkerRuntime`
(:func:`set_runtime_loader`) before the pool forks; each pool process loads it in ``worker_process_init`` (an
onnxruntime session must not cross a fork), or on first use in the solo pool. The queue's app and its delivery
settings are the producers' too: :mod:`semdup.ingest.celery_app`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery.signals import worker_process_init

from semdup.core.errors import ConfigError
from semdup.indexer.retry import RetryPolicy

__all__ = ["WorkerRuntime", "runtime", "set_runtime_loader"]

logger = logging.getLogger(__name__)


@dataclass
class WorkerRuntime:
    """The per-process bundle (one onnxruntime session), OpenSearch client and retry policy, whether the indexing
    tasks chain duplicate flagging (``SEMDUP_FLAG_DUPLICATES``), and how the flagging task flags (an
    :class:`semdup.alerts.settings.AlertSettings`, given by the composition root: ``alerts`` sits above this
    package)."""

    bundle: Any
    client: Any
    retry: RetryPolicy
    flag_duplicates: bool = False
    alerts: Any = None


_runtime: WorkerRuntime | None = None
_runtime_lock = threading.Lock()


_loader: Callable[[], WorkerRuntime] | None = None


def set_runtime_loader(loader: Callable[[], WorkerRuntime] | None) -> None:
    """How a worker process builds its runtime (the composition root sets it before the pool forks; tests may
    give their own). The runtime already built in this process, if any, is dropped."""
    global _loader, _runtime
    with _runtime_lock:
        _loader, _runtime = loader, None


def _load_runtime() -> WorkerRuntime:
    if _loader is None:
        raise ConfigError(
            "this process has no worker runtime: start workers through the composition root, `semdup worker` or "
            "`celery -A semdup.apps.worker worker`"
        )
    return _loader()


def runtime() -> WorkerRuntime:
    """This process's bundle and client, loaded on first use (the solo pool sends no ``worker_process_init``)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _load_runtime()
        return _runtime


@worker_process_init.connect
def _init_worker_process(**_: Any) -> None:
    """Load the bundle in each pool process after fork, before the first task arrives."""
    global _runtime
    with _runtime_lock:
        _runtime = None  # never reuse a session inherited from the parent
    runtime()
