"""Waiting for a job while OpenSearch recovers (issue #13, item 8): a 503 from counting the job's outcomes is a
reason to look again, not a traceback, and the wait says so (issue #17, item 5)."""

from __future__ import annotations

from typing import Any

import pytest
from opensearchpy import exceptions as os_exc

from semdup.core.errors import OpenSearchRefused
from semdup.ingest import jobs
from semdup.ingest.outcomes import new_job
from semdup.opensearch_io.boundary import client_error


class RecoveringCluster:
    """Answers the outcome count with the given answers in turn (an exception is raised), then the last one."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.indices = self

    def refresh(self, **_: Any) -> None:
        pass

    def search(self, **_: Any) -> dict[str, Any]:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):  # as the client raises it (its transport maps opensearch-py's errors)
            raise client_error(answer, "POST", "/semdup-jobs/_search") from answer
        return {"aggregations": {k: {"value": v} for k, v in answer.items()}}


def test_a_503_while_the_cluster_recovers_is_waited_out() -> None:
    recovering = os_exc.TransportError(503, "search_phase_execution_exception", "all shards failed")
    cluster = RecoveringCluster([recovering, {"written": 2}, {"written": 4, "parked": 1}])
    job = new_job("travel", "bow-cnn-0123456789ab", total=5)
    seen = list(jobs.poll(cluster, job, timeout=60, interval=0))
    assert [(p.written, p.parked) for p in seen] == [(0, 0), (2, 0), (4, 1)] and seen[-1].finished
    # the failed look is not silent: the progress says OpenSearch did not answer, and the next one that it does
    assert seen[0].waiting.opensearch_down_s == 0.0 and "HTTP 503" in seen[0].waiting.opensearch_error
    assert seen[0].describe_wait() == "OpenSearch unreachable for 0 s; 5 posts not done, the workers retry them"
    assert seen[1].waiting.opensearch_down_s is None and seen[1].describe_wait() is None


def test_other_refusals_still_raise() -> None:
    cluster = RecoveringCluster([os_exc.TransportError(400, "parsing_exception", "bad query")])
    with pytest.raises(OpenSearchRefused) as caught:
        list(jobs.poll(cluster, new_job("travel", "bow-cnn-0123456789ab", total=1), timeout=60, interval=0))
    assert caught.value.status == 400 and caught.value.type is None
