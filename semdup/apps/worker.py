"""The worker app: the Celery app that runs the indexer's and the alerts' tasks, with the worker metrics.

    celery -A semdup.apps.worker worker --pool prefork -c 2     # settings from the environment / $SEMDUP_CONFIG
    semdup worker --bundle /bundles/current -c 2                # the same, through run_worker

The app object is the indexer queue's (:data:`semdup.ingest.celery_app.app`; producers send through it too).
This module is where it is wired: it lists the task modules a worker loads (the indexer's, and the alerts' from a
layer above the indexer, which therefore never names them), points the app at the settings tree's broker when it
is first configured, hands the worker metrics their settings, and gives the app the loader of a worker process's
runtime (bundle, client, retry policy, flagging settings). Each pool process builds its runtime once, after fork
(``worker_process_init`` in :mod:`semdup.ingest.celery_app`): an onnxruntime session never crosses a fork.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from celery import Celery, signals

from semdup.apps.settings import Settings, load_settings
from semdup.core.errors import ConfigError
from semdup.indexer import worker_metrics
from semdup.indexer.retry import annotations
from semdup.indexer.runtime import WorkerRuntime, set_runtime_loader
from semdup.ingest.celery_app import app, celery_config, explicitly_configured

__all__ = ["app", "TASK_MODULES", "configure_worker", "load_worker_bundle", "build_runtime", "run_worker"]

logger = logging.getLogger(__name__)

TASK_MODULES = ("semdup.indexer.tasks", "semdup.alerts.tasks")

app.conf.include = list(TASK_MODULES)
_settings: dict[str, Settings] = {}
_lock = threading.Lock()


def _tree() -> Settings:
    """The tree this worker runs with: given to :func:`configure_worker`, else read once here."""
    with _lock:
        if "current" not in _settings:
            _settings["current"] = load_settings()
        return _settings["current"]


def load_worker_bundle(settings: Settings, path: str, *, device: str | None = None, fp16: bool | None = None) -> Any:
    """The bundle as a worker process runs it: on the tree's device (``worker.device``; ``device`` given replaces
    it), with its fp16 setting (``fp16`` given replaces it), and on CPU with one onnxruntime thread per stream and
    ``worker.encode_threads`` streams (default: every core), which costs less CPU per post than one run of as many
    threads (:mod:`semdup.bundle.runner`); on CUDA the bundle caps its streams
    (:data:`semdup.bundle.runner.CUDA_STREAMS`).

    Raises:
        BundleError: the bundle does not load, or its fp16 variant was demanded and does not verify.
        ConfigError: device cuda where CUDA cannot be used.
    """
    from semdup.bundle.bundle import Bundle

    w = settings.worker
    return Bundle.load(
        path,
        device=device or w.device,
        fp16=w.fp16 if fp16 is None else fp16,
        intra_op_threads=1,
        streams=w.encode_threads or os.cpu_count() or 1,
    )


def build_runtime(settings: Settings) -> WorkerRuntime:
    """One worker process's runtime from the tree: the bundle loaded and verified, a checked client, the retry
    policy, whether flagging is chained, and how the flagging task flags."""
    from semdup.index_format.system_indices import use_store_shape
    from semdup.opensearch_io.clients import connect

    path = settings.bundle()
    bundle = load_worker_bundle(settings, path)
    client = connect(settings.opensearch_settings())
    use_store_shape(settings.indices.store())  # the ledger, parking and flag stores this process may create
    logger.info(
        "worker process %d loaded bundle %s (arch %s, dimension %s) from %s, encoding on %s (%s, %d streams)",
        os.getpid(),
        bundle.version,
        getattr(bundle, "arch", "?"),
        getattr(bundle, "dimension", "?"),
        path,
        getattr(bundle, "device", "?"),
        getattr(bundle, "precision", "?"),
        getattr(getattr(bundle, "runner", None), "streams", 0),
    )
    return WorkerRuntime(
        bundle=bundle,
        client=client,
        retry=settings.retry_policy(),
        flag_duplicates=settings.alerts.flag_duplicates,
        alerts=settings.alert_settings(),
    )


def configure_worker(settings: Settings | None = None) -> Celery:
    """Wire the app for a worker process: ``settings`` (default: the environment's tree) give the broker, the worker
    metrics and each pool process's runtime. Call before the pool forks."""
    with _lock:
        if settings is not None:
            _settings["current"] = settings
    worker_metrics.configure(_tree().metrics)
    app.conf.task_annotations = annotations(_tree().retry_policy())  # the tasks' backoff, before they are made
    set_runtime_loader(lambda: build_runtime(_tree()))
    return app


@app.on_configure.connect
def _configure_from_settings(sender: Celery, **_: Any) -> None:
    """The broker of the tree, when nothing pointed the app at one before it was first used (``celery -A``)."""
    if explicitly_configured():
        return
    tree = _tree()
    sender.conf.update(celery_config(tree.broker_settings().url, visibility_timeout=tree.worker.visibility_timeout))
    sender.conf.task_annotations = annotations(tree.retry_policy())


def run_worker(settings: Settings, argv: Sequence[str]) -> None:
    """Run a worker in this process with ``settings`` (``semdup worker``); ``argv``: Celery's worker options."""
    from semdup.ingest.celery_app import configure_app

    configure_app(settings.broker_settings().url, visibility_timeout=settings.worker.visibility_timeout)
    configure_worker(settings)
    app.worker_main(["worker", *argv])


def _metrics_from_settings(**_: Any) -> None:
    """Before the worker metrics start (``worker_init``, main process): their settings from the tree."""
    try:
        worker_metrics.configure(_tree().metrics)
    except ConfigError as exc:
        logger.error("worker metrics are off: %s", exc)


# Wired at import, so that `celery -A semdup.apps.worker worker` needs nothing else; nothing is read or connected
# before a worker starts (the tree is read on first use).
signals.worker_init.connect(_metrics_from_settings, weak=False)  # before worker_metrics' own handler
worker_metrics.connect_signals()
set_runtime_loader(lambda: build_runtime(_tree()))
