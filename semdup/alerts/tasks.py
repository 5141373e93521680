"""The Celery task ``FLAG_DUPLICATES`` (index, ids, model_version): flag the likely duplicates of posts just written.

Registered on the indexer queue's app; the worker app of the composition root (:mod:`semdup.apps.worker`) loads
this module beside the indexer's tasks, so the same ``semdup worker`` runs it with the bundle it already loaded;
each worker process builds one :class:`~semdup.reranker.Reranker` on that bundle and client, with the flagging
settings the root put in the runtime (the calibration ``SEMDUP_CALIBRATION`` or beside the bundle), the first time
a flagging task arrives.

The calibration (threshold, Platt) is read again whenever its file changes (``semdup calibrate`` rewrites it from
moderators' verdicts): the next task flags with the new threshold, no restart needed.

Delivery: ``acks_late`` like the indexing tasks, and safe to run twice: the posts' text is read again from the index
and every flag has a deterministic ``_id`` (:mod:`semdup.alerts.store`), so a redelivered task writes the same
flags. Transient errors (cluster down, 429/502/503/504, past the soft time limit) are retried by Celery as the
indexer's tasks are (:class:`~semdup.indexer.retry.RetryingTask`, within the worker's retry budget). Flags are
derived data: the posts themselves are already written, so a batch that still fails after the retry budget, or
cannot be flagged at all (no threshold, another model's index), is logged with its ids and acknowledged rather
than parked.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from celery import Task
from celery.utils.log import get_task_logger

from semdup.alerts.flag import flag_duplicates, read_posts
from semdup.alerts.settings import AlertSettings, resolve_k
from semdup.alerts.store import delete_flags
from semdup.core.errors import SemdupError
from semdup.core.task_names import FLAG_DUPLICATES
from semdup.indexer.retry import TRANSIENT_ERRORS, RetryingTask, StillQueued
from semdup.indexer.runtime import WorkerRuntime, runtime
from semdup.ingest.celery_app import TASK_SOFT_TIME_LIMIT, app
from semdup.reranker.calibration import calibration_path, load_calibration
from semdup.reranker.reranker import Reranker

__all__ = ["flag_duplicates_task", "process_reranker"]

logger = get_task_logger(__name__)

_lock = threading.Lock()
# (the bundle it was built on, the calibration file's stamp, reranker, the runtime's settings, the settings used:
# k resolved against the calibration)
_cached: tuple[Any, tuple[int, int, int] | None, Reranker, AlertSettings, AlertSettings] | None = None


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the calibration file is rewritten (``save_calibration`` replaces it atomically: a new
    inode), None while there is none."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def process_reranker(rt: WorkerRuntime, index: str) -> tuple[Reranker, AlertSettings]:
    """This process's reranker over the runtime's bundle, and the settings it flags with (``k`` resolved:
    ``SEMDUP_FLAG_K``, else the calibration's, else 10): rebuilt when the runtime loaded another bundle, or when
    the calibration file changed since (``semdup calibrate`` rewrote it, or it appeared or went): each task
    checks the file's stamp, one ``stat``, so a new threshold applies from the next task on, without a restart.

    Raises:
        ConfigError / BundleError: bad flagging settings or calibration file; ValueError: candidate paths the
            bundle cannot serve (learned-sparse without term weights).
    """
    global _cached
    with _lock:
        same_bundle = _cached is not None and _cached[0] is rt.bundle
        settings = _cached[3] if _cached is not None and same_bundle else (rt.alerts or AlertSettings())
        cal_file = Path(settings.calibration or calibration_path(rt.bundle.path))
        stamp = _stamp(cal_file)
        if _cached is None or not same_bundle or _cached[1] != stamp:
            bundle = rt.bundle
            calibration = load_calibration(cal_file, bundle.version)
            rr = Reranker(bundle, rt.client, index, settings.reranker, calibration)
            used = settings.model_copy(update={"flag_k": resolve_k(settings, calibration)})
            logger.info(
                "flagging with bundle %s, threshold %s (%s), k %d (%s)",
                bundle.version,
                rr.threshold,
                "calibration " + str(cal_file) if calibration is not None else "the bundle's",
                used.flag_k,
                "SEMDUP_FLAG_K"
                if settings.flag_k is not None
                else "the calibration's"
                if calibration is not None and calibration.k is not None
                else "default",
            )
            _cached = (bundle, stamp, rr, settings, used)
        return _cached[2], _cached[4]


@app.task(
    name=FLAG_DUPLICATES,
    base=RetryingTask,
    bind=True,
    ignore_result=True,
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=TASK_SOFT_TIME_LIMIT,
)
def flag_duplicates_task(self: Task, index: str, ids: list[str], model_version: str) -> dict[str, int]:
    """Flag the likely duplicates of posts ``ids`` of ``index`` (written by ``model_version``'s workers)."""
    ids = [str(i) for i in dict.fromkeys(ids or [])]
    try:
        rt = runtime()
    except Exception as exc:  # no bundle or client in this process: nothing can be flagged here
        raise StillQueued(f"this worker cannot load its bundle or client ({exc}); the flagging stays queued") from exc
    if model_version != rt.bundle.version:
        logger.error(
            "flagging of %d posts of %s was sent for model %s but this worker runs bundle %s; not flagged: %s",
            len(ids),
            index,
            model_version,
            rt.bundle.version,
            ",".join(ids)[:5000],
        )
        return {"posts": 0, "flagged": 0, "missing": 0, "failed": len(ids)}
    retries = int(self.request.retries or 0)
    try:
        reranker, settings = process_reranker(rt, index)
        posts, missing = read_posts(rt.client, index, ids, to_encode=True)
        if missing:  # deleted since they were written: no flags, and none kept from before
            delete_flags(rt.client, index, missing)
        flags = flag_duplicates(reranker, rt.client, index, posts, k=settings.flag_k)
        return {"posts": len(posts), "flagged": len(flags), "missing": len(missing), "failed": 0}
    except Exception as exc:
        transient = isinstance(exc, TRANSIENT_ERRORS)
        if transient and retries < rt.retry.max_retries:
            raise  # Celery's autoretry sends it again after its backoff
        how = "after the retry budget" if transient else "for good"
        log = logger.error if isinstance(exc, (SemdupError, ValueError)) else logger.exception
        log(
            "flagging %d posts of %s failed %s (%s: %s); ids: %s",
            len(ids),
            index,
            how,
            type(exc).__name__,
            exc,
            ",".join(ids)[:5000],
        )
        return {"posts": 0, "flagged": 0, "missing": 0, "failed": len(ids)}
