"""Bulk writes that report every document's fate: written, retried, or failed with its
:class:`~semdup.opensearch_io.boundary.ItemFailure` (id, status, type, reason).

Built on opensearch-py's ``streaming_bulk`` (through :mod:`semdup.opensearch_io.boundary`) with
``raise_on_error=False`` and ``max_retries`` set, because with the default ``raise_on_error=True`` an item rejected
with 429 raises instead of being retried (opensearch-py#964). Chunks close by count or by bytes, whichever comes
first. A request that fails as a whole raises the boundary's error (a 429 for the whole request:
``OpenSearchUnavailable``, retried by the caller's task rather than here).

Bulk lines are serialised with orjson instead of the client's stdlib ``json`` (it was the largest Python cost
of semantic indexing: 400 floats per post). numpy arrays are written natively: a float32 vector (what
``index_format.mapping.semdup_source`` puts under ``semdup.vector``) as each value's shortest float32 round-trip
decimal, so OpenSearch parses back exactly the same float32 values from about half the bytes. A body orjson cannot
write (say a non-string dict key) is left to the client's serializer, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from semdup.core.errors import OpenSearchUnavailable
from semdup.core.progress import progress as progress_bar
from semdup.opensearch_io.boundary import ItemFailure, OpenSearch, expand_action, streaming_bulk

__all__ = ["BulkReport", "bulk_write", "chunked", "bulk_lines"]

logger = logging.getLogger(__name__)

_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


@dataclass
class BulkReport:
    """What happened to each document of a bulk write; each failure keeps its id, status, type and reason."""

    written: int = 0
    failed: list[ItemFailure] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed

    def merge(self, other: BulkReport) -> BulkReport:
        return BulkReport(self.written + other.written, self.failed + other.failed)


def bulk_write(
    client: OpenSearch,
    actions: Iterable[dict[str, Any]],
    *,
    total: int | None = None,
    chunk_size: int = 500,
    max_chunk_bytes: int = 10 * 1024 * 1024,
    max_retries: int = 5,
    initial_backoff: float = 1.0,
    max_backoff: float = 30.0,
    progress: bool = False,
    description: str = "indexing",
    request_timeout: float = 60.0,
) -> BulkReport:
    """Send ``actions`` and return a report; never drops a failed document silently.

    Args:
        actions: bulk actions with ``_index``, ``_id`` and ``_source`` (or ``doc`` for updates).
        total: number of actions, for the progress bar.
        max_retries: retries of items rejected with 429, with back-off doubling from ``initial_backoff`` seconds.

    Raises:
        OpenSearchUnavailable: the cluster stopped answering or refused the whole request as overloaded (nothing of
            the failed chunk is marked written). OpenSearchRefused: a request refused whole (400, 413).
    """
    report = BulkReport()
    bar = progress_bar(total=total, desc=description, unit="doc", enabled=progress)
    try:
        for ok, item in streaming_bulk(
            client,
            actions,
            chunk_size=chunk_size,
            max_chunk_bytes=max_chunk_bytes,
            max_retries=max_retries,
            initial_backoff=initial_backoff,
            max_backoff=max_backoff,
            raise_on_error=False,
            raise_on_exception=True,
            expand_action_callback=bulk_lines,
            yield_ok=True,
            request_timeout=request_timeout,
        ):
            bar.update(1)
            op, result = next(iter(item.items()))
            if ok:
                report.written += 1
            else:
                failure = ItemFailure.of_item(result)
                report.failed.append(failure)
                logger.warning("bulk %s of %s failed: %s", op, failure.id, str(failure)[:200])
    except OpenSearchUnavailable as exc:
        raise exc.advising(
            f"stopped after {report.written} documents of a bulk write, nothing unconfirmed is counted as written - "
            "run the same job again (writes are idempotent)"
        ) from exc
    finally:
        bar.close()
    if report.failed:
        logger.warning("bulk write: %d written, %d failed", report.written, len(report.failed))
    return report


def _dumps(obj: Any) -> Any:
    """orjson text of ``obj``, or ``obj`` unchanged for the client's serializer if orjson cannot write it."""
    try:
        return orjson.dumps(obj, option=_ORJSON_OPTIONS).decode("utf-8")
    except orjson.JSONEncodeError:
        return obj


def bulk_lines(action: dict[str, Any]) -> tuple[Any, Any]:
    """The (action line, source line) of one bulk action, as JSON text (``expand_action``'s split, then orjson).

    The client's serializer passes text through unchanged, and so do its 429 retries.
    """
    head, body = expand_action(action)
    return _dumps(head), (None if body is None else _dumps(body))


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Fixed-size batches of an iterable (the last one shorter)."""
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
