"""The review queue: flagged pairs, newest first, filtered by index and minimum probability, one page at a time.

    page = flag_page(client, ("travel",), min_probability=0.5, page=1, size=20)
    page.flags[0]    # the newest flag: Flag(index, post_id, candidate_id, probability, score, model, flagged_at)

Newest first means by ``flagged_at`` (the second the worker wrote the flag), then post id and score, so a page
holds the same flags however often it is asked for. Pages go as deep as OpenSearch's result window (10,000 flags
from the newest); the filters narrow a larger backlog.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from semdup.alerts.store import FLAGS_INDEX, Flag
from semdup.core.errors import ConfigError

__all__ = ["FlagPage", "flag_page", "MAX_PAGE_SIZE", "MAX_DEPTH"]

MAX_PAGE_SIZE = 100
MAX_DEPTH = 10_000  # index.max_result_window


@dataclass(frozen=True)
class FlagPage:
    """One page of flags and where it sits: ``total`` flags match the filters."""

    flags: list[Flag]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(min(self.total, MAX_DEPTH) / self.size))


def flag_page(
    client: Any,
    indices: tuple[str, ...],
    *,
    min_probability: float | None = None,
    page: int = 1,
    size: int = 20,
    store: str = FLAGS_INDEX,
) -> FlagPage:
    """Page ``page`` (from 1) of the flags of ``indices``, newest first.

    Raises:
        ConfigError: no index, a page size outside 1..100, a page past the 10,000th flag, a probability outside
            [0, 1].
        OpenSearchUnavailable: the cluster did not answer.
    """
    if not indices:
        raise ConfigError("name at least one index whose flags to show")
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ConfigError(f"page size must be within 1..{MAX_PAGE_SIZE}, got {size}")
    if page < 1 or (page - 1) * size >= MAX_DEPTH:
        raise ConfigError(f"page must be within 1..{MAX_DEPTH // size} at {size} flags a page; narrow the filters")
    if min_probability is not None and not 0.0 <= min_probability <= 1.0:
        raise ConfigError(f"min_probability must be within [0, 1], got {min_probability}")
    filters: list[dict[str, Any]] = [{"terms": {"index": list(indices)}}]
    if min_probability is not None:
        filters.append({"range": {"probability": {"gte": min_probability}}})
    body = {
        "query": {"bool": {"filter": filters}},
        "sort": [{"flagged_at": "desc"}, {"post_id": "desc"}, {"score": "desc"}, {"candidate_id": "asc"}],
        "from": (page - 1) * size,
        "size": size,
        "track_total_hits": True,
    }
    if not client.indices.exists(index=store):
        return FlagPage([], 0, page, size)
    hits = client.search(index=store, body=body)["hits"]
    return FlagPage([Flag.from_json(h["_source"]) for h in hits["hits"]], int(hits["total"]["value"]), page, size)
