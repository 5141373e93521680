"""Celery tasks of the indexer: thin wrappers over ``semdup.indexer.semantic`` with the retry and parking rules.

Arguments are JSON-native (index name, small batches of posts or ids, the bundle version id). Every write
has a deterministic ``_id`` and content, so a task delivered twice writes the same thing (``acks_late`` is
safe, see ``celery_app``). Only transient errors are retried (cluster down or overloaded, connection
errors), with exponential backoff, jitter and ``max_retries``; posts that cannot be written for good
(no text, binary, refused by the mapping, wrong model) are parked in ``semdup-parked``. A batch whose
retries run out is parked whole when the cluster answers again; if it still does not, the failure is
logged with every post id (the worker log keeps the task arguments) — never dropped silently.

Example (the CLI does this for you)::

    from semdup.indexer.tasks import index_posts
    index_posts.delay("travel", [{"id": "1", "title": "Visa?", "body": "..."}], bundle.version)
"""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.utils.log import get_task_logger
from opensearchpy import exceptions as os_exc

from semdup.core.errors import IndexError_, OpenSearchUnavailable
from semdup.indexer import parking, semantic, worker_metrics
from semdup.indexer.celery_app import app, runtime

__all__ = ["index_posts", "backfill_batch", "delete_posts", "TRANSIENT_ERRORS", "MAX_RETRIES"]

logger = get_task_logger(__name__)
worker_metrics.connect_signals()  # Prometheus counts from Celery task signals; off unless SEMDUP_METRICS_PORT is set

TRANSIENT_ERRORS = (OpenSearchUnavailable, os_exc.ConnectionError, os_exc.ConnectionTimeout)
MAX_RETRIES = 8  # with backoff doubling to 600 s: about 25 minutes of retrying before a batch is parked

_RETRY_OPTIONS: dict[str, Any] = {
    "autoretry_for": TRANSIENT_ERRORS,
    "retry_backoff": 2,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "max_retries": MAX_RETRIES,
    "ignore_result": True,
    "acks_late": True,
    "reject_on_worker_lost": True,
}


class IndexerTask(Task):
    """Parks a batch whose retries ran out, so its posts stay visible and replayable."""

    def on_failure(self, exc: BaseException, task_id: str, args: tuple, kwargs: dict, einfo: Any) -> None:
        index, items, version = _task_args(self.name, args, kwargs)
        ids = [str(i["id"]) if isinstance(i, dict) and "id" in i else str(i) for i in items]
        payloads = {str(i["id"]): i for i in items if isinstance(i, dict) and "id" in i}
        try:
            parking.park(
                runtime().client,
                index,
                [(i, f"{type(exc).__name__}: {exc}") for i in ids],
                task=self.name.rsplit(".", 1)[-1],
                model_version=version,
                payloads=payloads,
            )
        except Exception as park_exc:  # noqa: BLE001 - last resort: log every id so nothing vanishes unseen
            logger.error(
                "task %s failed (%s) and its %d posts could not be parked (%s); replay these ids of index %s: %s",
                task_id,
                exc,
                len(ids),
                park_exc,
                index,
                ",".join(ids),
            )


def _task_args(name: str, args: tuple, kwargs: dict) -> tuple[str, list[Any], str]:
    keys = ("index", "posts" if name.endswith("index_posts") else "ids", "model_version")
    values = dict(zip(keys, args, strict=False)) | kwargs
    return str(values.get("index", "")), list(values.get(keys[1]) or []), str(values.get("model_version", ""))


def _check_version(model_version: str) -> None:
    loaded = runtime().bundle.version
    if model_version != loaded:
        raise IndexError_(
            f"this batch was enqueued for model {model_version} but the worker runs bundle {loaded}; "
            "start workers with the same bundle as `semdup index-posts --bundle`, then replay the parked posts"
        )


def _refuse(index: str, items: list[Any], version: str, task: str, exc: IndexError_) -> dict[str, int]:
    """A batch refused before any write (wrong model): park it whole, with the reason."""
    ids = [str(i["id"]) if isinstance(i, dict) and "id" in i else str(i) for i in items]
    payloads = {str(i["id"]): i for i in items if isinstance(i, dict) and "id" in i}
    logger.error("refused %d posts of %s: %s", len(ids), index, exc)
    parking.park(
        runtime().client,
        index,
        [(i, f"IndexError_: {exc}") for i in ids],
        task=task,
        model_version=version,
        payloads=payloads,
    )
    return {"written": 0, "parked": len(ids)}


@app.task(name="semdup.indexer.index_posts", base=IndexerTask, **_RETRY_OPTIONS)
def index_posts(index: str, posts: list[dict[str, Any]], model_version: str) -> dict[str, int]:
    """Encode and write a batch of posts (``{"id", "title", "body"}``) with lexical and semdup fields."""
    rt = runtime()
    try:
        _check_version(model_version)
        search = semantic.ensure_index_model(rt.client, index, model_version)
    except IndexError_ as exc:
        return _refuse(index, posts, model_version, "index_posts", exc)
    result = semantic.index_batch(rt.client, index, posts, rt.bundle, search=search)
    parking.park(
        rt.client, index, result.failed, task="index_posts", model_version=model_version, payloads=result.payloads
    )
    logger.info("index_posts %s: %d written, %d parked", index, result.written, len(result.failed))
    return {"written": result.written, "parked": len(result.failed)}


@app.task(name="semdup.indexer.backfill_batch", base=IndexerTask, **_RETRY_OPTIONS)
def backfill_batch(index: str, ids: list[str], model_version: str) -> dict[str, int]:
    """Fill only the semdup fields of posts already in ``index``, reading their text from it."""
    rt = runtime()
    try:
        _check_version(model_version)
        search = semantic.ensure_index_model(rt.client, index, model_version)
    except IndexError_ as exc:
        return _refuse(index, ids, model_version, "backfill_batch", exc)
    result = semantic.backfill_batch(rt.client, index, ids, rt.bundle, search)
    parking.park(rt.client, index, result.failed, task="backfill_batch", model_version=model_version)
    logger.info(
        "backfill %s: %d written, %d parked, %d gone", index, result.written, len(result.failed), len(result.missing)
    )
    return {"written": result.written, "parked": len(result.failed), "missing": len(result.missing)}


@app.task(name="semdup.indexer.delete_posts", base=IndexerTask, **_RETRY_OPTIONS)
def delete_posts(index: str, ids: list[str]) -> dict[str, int]:
    """Delete posts by id (deleting an id twice is harmless)."""
    rt = runtime()
    result = semantic.delete_batch(rt.client, index, ids)
    parking.park(rt.client, index, result.failed, task="delete_posts", model_version="")
    return {"deleted": result.written, "parked": len(result.failed)}
