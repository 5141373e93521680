"""The review figures in /metrics: read from the cluster at most once per TTL, the last ones kept when it is down."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from semdup.review.metrics import ReviewCollector, ReviewStats


class CountingCluster:
    """Two flags, one judged pair with two verdicts; counts every request, fails on demand."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False
        self.indices = SimpleNamespace(exists=self._exists)

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("cluster down")

    def _exists(self, **_: Any) -> bool:
        self._call()
        return True

    def count(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, int]:
        self._call()
        return {"count": 1 if "ids" in body["query"] else 2}

    def search(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._call()
        if "v" in body["aggs"]:
            return {
                "aggregations": {
                    "v": {"buckets": [{"key": "duplicate", "doc_count": 1}, {"key": "not_duplicate", "doc_count": 1}]}
                }
            }
        return {"aggregations": {"pairs": {"buckets": [{"key": {"pair": "travel/3/1"}}]}}}


def test_a_scrape_within_the_ttl_reads_nothing_and_a_failed_read_keeps_the_last_figures() -> None:
    cluster = CountingCluster()
    stats = ReviewStats(cluster, ("travel",), ttl=3600)
    registry = CollectorRegistry()
    registry.register(ReviewCollector(stats))
    assert cluster.calls == 0  # registering asks nothing of the cluster
    text = generate_latest(registry).decode()
    assert 'semdup_review_flags{index="travel"} 2.0' in text
    assert 'semdup_review_verdicts{index="travel",verdict="duplicate"} 1.0' in text
    assert 'semdup_review_precision{index="travel"} 0.5' in text
    assert 'semdup_review_backlog{index="travel"} 1.0' in text
    reads = cluster.calls
    for _ in range(5):
        generate_latest(registry)
    assert cluster.calls == reads  # cached for the TTL
    stats.ttl = 0
    cluster.down = True
    assert 'semdup_review_flags{index="travel"} 2.0' in generate_latest(registry).decode()  # the last figures
    figures, _ = stats.figures()
    assert figures["travel"].flags == 2 and not math.isnan(figures["travel"].backlog)
