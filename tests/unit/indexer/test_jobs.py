"""The index job's library API without a broker or a cluster: which task messages it sends, how it waits."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opensearchpy import exceptions as os_exc

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.core.posts import Post
from semdup.index_format.schema import CandidateFields
from semdup.indexer import jobs, tasks
from semdup.indexer.parking import PARKED_INDEX, ParkedPost

V = "bow-cnn-0123456789ab"


def _parked(post_id: str, task: str, payload: dict[str, Any] | None = None) -> ParkedPost:
    return ParkedPost("travel", post_id, task, "PostError: no text", V, payload, parked_at=1)


def test_replay_sends_each_record_to_its_task_and_leaves_unknown_tasks_parked(caplog) -> None:
    records = [
        _parked("1", "index_posts", {"id": "1", "title": "Visa?", "body": ""}),
        _parked("2", "index_posts"),  # parked before payloads were kept: replayed by id
        _parked("3", "backfill_batch"),
        _parked("4", "delete_posts"),
        _parked("5", "reindex_everything"),
        _parked("6", "backfill_batch"),
    ]
    with caplog.at_level(logging.WARNING, logger="semdup.indexer.jobs"):
        calls, covered = jobs.replay_batches(records, "travel", V, batch_size=1)
    got = [(c.task, c.args) for c in calls]
    assert got == [
        (tasks.index_posts, ["travel", [{"id": "1", "title": "Visa?", "body": ""}], V]),
        (tasks.index_posts, ["travel", [{"id": "2"}], V]),
        (tasks.backfill_batch, ["travel", ["3"], V]),
        (tasks.backfill_batch, ["travel", ["6"], V]),
        (tasks.delete_posts, ["travel", ["4"]]),
    ]
    assert sorted(r.post_id for r in covered) == ["1", "2", "3", "4", "6"]
    assert "name task 'reindex_everything'" in caplog.text and "stay parked" in caplog.text
    calls, _ = jobs.replay_batches(records, "travel", V, batch_size=64)
    assert [len(c.args[1]) for c in calls] == [2, 2, 1]


def test_enqueue_posts_sends_batches_and_returns_each_id_once(monkeypatch) -> None:
    sent: list[jobs.TaskCall] = []
    monkeypatch.setattr(jobs.TaskCall, "send", lambda self: sent.append(self))
    posts = [Post(str(i % 5), f"title {i}", "") for i in range(7)]  # ids 0..4, then 0 and 1 again
    ids = jobs.enqueue_posts("travel", posts, V, batch_size=3, progress=False)
    assert ids == ["0", "1", "2", "3", "4"]
    assert [c.task for c in sent] == [tasks.index_posts] * 3
    assert [[p["title"] for p in c.args[1]] for c in sent] == [
        ["title 0", "title 1", "title 2"],
        ["title 3", "title 4", "title 5"],
        ["title 6"],
    ]
    assert all(c.args[0] == "travel" and c.args[2] == V for c in sent)


class FakeIndices:
    def __init__(self, exists: bool = True) -> None:
        self.present = exists

    def refresh(self, **_: Any) -> None:
        pass

    def exists(self, index: str, **_: Any) -> bool:
        return self.present


class FakeCluster:
    """Answers the job's count queries: the written counts in turn (an exception is raised), parked fixed."""

    def __init__(self, written: list[Any], parked: int = 0) -> None:
        self.written, self.parked = list(written), parked
        self.indices = FakeIndices()

    def count(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, int]:
        if index == PARKED_INDEX:
            return {"count": self.parked}
        answer = self.written.pop(0) if len(self.written) > 1 else self.written[0]
        if isinstance(answer, Exception):
            raise answer
        return {"count": answer}


def test_wait_for_folds_the_polls_into_the_final_progress() -> None:
    down = os_exc.ConnectionError("N/A", "connection refused", None)
    cluster = FakeCluster([0, down, 2, 3], parked=2)
    seen = list(jobs.poll(cluster, "travel", ["a", "b", "c", "d", "e"], V, timeout=60, interval=0))
    assert [(p.written, p.parked) for p in seen] == [(0, 2), (2, 2), (3, 2)]  # none while the cluster was down
    assert seen[-1].finished and not seen[0].finished
    cluster = FakeCluster([1, 3], parked=2)
    done = jobs.wait_for(cluster, "travel", ["a", "b", "c", "d", "e"], V, timeout=60, interval=0, progress=False)
    assert done == jobs.JobProgress("travel", V, total=5, written=3, parked=2)


def test_wait_for_gives_up_after_the_timeout_saying_what_is_left() -> None:
    cluster = FakeCluster([1], parked=1)
    with pytest.raises(OpenSearchUnavailable, match=r"gave up waiting after 0 s: 1 of 4 posts written, 1 parked"):
        jobs.wait_for(cluster, "travel", ["a", "b", "c", "d"], V, timeout=0, interval=0, progress=False)


class FakeMappingClient:
    def __init__(self, exists: bool, mapping: dict[str, Any] | None = None) -> None:
        self.indices = FakeIndices(exists)
        self.indices.get_mapping = lambda index, **_: {index: {"mappings": mapping or {}}}  # type: ignore[attr-defined]
        self.cat = type("Cat", (), {"plugins": staticmethod(lambda **_: [])})()


def test_ensure_index_reports_an_existing_index_and_refuses_knn_it_cannot_serve() -> None:
    sparse_only = {"properties": {"semdup": {"properties": {"terms": {"type": "rank_features"}}}}}
    state = jobs.ensure_index(
        FakeMappingClient(True, sparse_only), "travel", dimension=16, fields=CandidateFields(knn=True)
    )
    assert state == jobs.IndexState(created=False, fields=CandidateFields(sparse=True))
    with pytest.raises(ConfigError, match=r"--knn needs .* \(bundle dimension 16, plugin missing\)"):
        jobs.ensure_index(FakeMappingClient(False), "travel", dimension=16, fields=CandidateFields(knn=True))
