"""Review figures for ``/metrics``: flags, verdicts by verdict, precision so far and the review backlog, per index.

    semdup_review_flags{index}              flags in semdup-duplicates
    semdup_review_verdicts{index,verdict}   verdict documents (one per pair and reviewer)
    semdup_review_precision{index}          duplicate verdicts / all verdicts (NaN before the first)
    semdup_review_backlog{index}            flags that no reviewer has judged yet
    semdup_review_stats_age_seconds         how old these figures are (they are read at most once per TTL)

The counts come from the cluster, so every service process reports the same figures. A scrape never waits on more
than one refresh: the figures are kept for ``SEMDUP_REVIEW_STATS_TTL`` seconds (60), one thread refreshes them
while the others report the last ones, and a cluster that does not answer leaves the last figures in place (and a
warning in the log). A refresh costs two counts and an aggregation per index, plus, for the backlog, one count of
flags per 1,000 judged pairs (composite aggregation pages, at most :data:`MAX_JUDGED_PAIRS` pairs: past that the
backlog is reported as NaN rather than guessed).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from semdup.alerts.store import FLAGS_INDEX
from semdup.review.verdicts import VERDICTS, VERDICTS_INDEX

__all__ = ["ReviewStats", "IndexStats", "ReviewCollector", "MAX_JUDGED_PAIRS"]

logger = logging.getLogger(__name__)

MAX_JUDGED_PAIRS = 50_000
_PAGE = 1000
_TIMEOUT = 10.0


@dataclass(frozen=True)
class IndexStats:
    """One index's review figures."""

    flags: int
    verdicts: dict[str, int] = field(default_factory=dict)
    backlog: float = math.nan

    @property
    def precision(self) -> float:
        judged = sum(self.verdicts.values())
        return self.verdicts.get(VERDICTS[0], 0) / judged if judged else math.nan


class ReviewStats:
    """The figures of ``indices``, read from the cluster at most once per ``ttl`` seconds (see the module doc)."""

    def __init__(
        self,
        client: Any,
        indices: tuple[str, ...],
        ttl: float = 60.0,
        flags_store: str = FLAGS_INDEX,
        verdicts_store: str = VERDICTS_INDEX,
    ) -> None:
        self.client = client
        self.indices = indices
        self.ttl = ttl
        self.flags_store = flags_store
        self.verdicts_store = verdicts_store
        self._lock = threading.Lock()
        self._figures: dict[str, IndexStats] = {}
        self._read_at: float | None = None

    def figures(self) -> tuple[dict[str, IndexStats], float | None]:
        """``(index -> figures, age in seconds)``; refreshed first when older than the TTL and no other thread is
        refreshing them (that thread's caller waits, the others get the last figures at once)."""
        stale = self._read_at is None or time.monotonic() - self._read_at >= self.ttl
        if stale and self._lock.acquire(blocking=self._read_at is None):
            try:
                if self._read_at is None or time.monotonic() - self._read_at >= self.ttl:
                    self._refresh()
            finally:
                self._lock.release()
        age = None if self._read_at is None else time.monotonic() - self._read_at
        return dict(self._figures), age

    def _refresh(self) -> None:
        try:
            figures = {name: self._read(name) for name in self.indices}
        except Exception as exc:  # a scrape must answer: keep the last figures
            logger.warning(
                "could not read the review figures (%s: %s); /metrics shows the last ones; check the cluster",
                type(exc).__name__,
                str(exc)[:200],
            )
            if self._read_at is None:
                self._read_at = time.monotonic()  # retried after the TTL, not on every scrape
            return
        self._figures = figures
        self._read_at = time.monotonic()

    def _exists(self, store: str) -> bool:
        return bool(self.client.indices.exists(index=store, request_timeout=_TIMEOUT))

    def _read(self, index: str) -> IndexStats:
        of_index = {"term": {"index": index}}
        flags = 0
        if self._exists(self.flags_store):
            flags = int(
                self.client.count(index=self.flags_store, body={"query": of_index}, request_timeout=_TIMEOUT)["count"]
            )
        if not self._exists(self.verdicts_store):
            return IndexStats(flags, dict.fromkeys(VERDICTS, 0), float(flags))
        body = {"size": 0, "query": of_index, "aggs": {"v": {"terms": {"field": "verdict", "size": len(VERDICTS)}}}}
        resp = self.client.search(index=self.verdicts_store, body=body, request_timeout=_TIMEOUT)
        verdicts = dict.fromkeys(VERDICTS, 0)
        verdicts.update({b["key"]: int(b["doc_count"]) for b in resp["aggregations"]["v"]["buckets"]})
        return IndexStats(flags, verdicts, self._backlog(index, flags))

    def _judged_pages(self, index: str) -> Iterator[list[str]]:
        """The distinct judged pairs (flag ids) of ``index``, 1,000 at a time."""
        after: dict[str, Any] | None = None
        while True:
            comp: dict[str, Any] = {"size": _PAGE, "sources": [{"pair": {"terms": {"field": "pair"}}}]}
            if after is not None:
                comp["after"] = after
            body = {"size": 0, "query": {"term": {"index": index}}, "aggs": {"pairs": {"composite": comp}}}
            agg = self.client.search(index=self.verdicts_store, body=body, request_timeout=_TIMEOUT)["aggregations"]
            buckets = agg["pairs"]["buckets"]
            if buckets:
                yield [b["key"]["pair"] for b in buckets]
            after = agg["pairs"].get("after_key")
            if len(buckets) < _PAGE or after is None:
                return

    def _backlog(self, index: str, flags: int) -> float:
        """Flags of ``index`` without any verdict: flags minus the judged pairs that are still flagged."""
        judged = seen = 0
        for pairs in self._judged_pages(index):
            seen += len(pairs)
            if seen > MAX_JUDGED_PAIRS:
                logger.warning(
                    "%s has more than %d judged pairs; semdup_review_backlog is not counted (NaN)",
                    index,
                    MAX_JUDGED_PAIRS,
                )
                return math.nan
            body = {"query": {"ids": {"values": pairs}}}
            judged += int(self.client.count(index=self.flags_store, body=body, request_timeout=_TIMEOUT)["count"])
        return float(flags - judged)


class ReviewCollector(Collector):
    """The Prometheus collector over a :class:`ReviewStats` (registered in the service's registry)."""

    def __init__(self, stats: ReviewStats) -> None:
        self.stats = stats

    def _families(self) -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily("semdup_review_flags", "Flagged pairs in the flag store", labels=["index"]),
            GaugeMetricFamily("semdup_review_verdicts", "Verdicts given, by verdict", labels=["index", "verdict"]),
            GaugeMetricFamily("semdup_review_precision", "Duplicate verdicts / all verdicts", labels=["index"]),
            GaugeMetricFamily("semdup_review_backlog", "Flags without any verdict", labels=["index"]),
            GaugeMetricFamily("semdup_review_stats_age_seconds", "Age of the review figures"),
        )

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families()  # no samples: registering must not call the cluster

    def collect(self) -> Iterator[GaugeMetricFamily]:
        flags, verdicts, precision, backlog, age = self._families()
        figures, seconds = self.stats.figures()
        for name, f in sorted(figures.items()):
            flags.add_metric([name], f.flags)
            for verdict, n in sorted(f.verdicts.items()):
                verdicts.add_metric([name, verdict], n)
            precision.add_metric([name], f.precision)
            backlog.add_metric([name], f.backlog)
        if seconds is not None:
            age.add_metric([], seconds)
        yield from (flags, verdicts, precision, backlog, age)
