"""The index job's library API without a broker or a cluster: which task messages it sends (through the one way in,
``submit``), how it waits."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from jobs_store import JobsStore, RecordingBroker
from opensearchpy import exceptions as os_exc

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.task_names import BACKFILL_BATCH, DELETE_POSTS, INDEX_POSTS
from semdup.index_format.schema import CandidateFields
from semdup.ingest import jobs, ledger
from semdup.ingest.outcomes import JOBS_INDEX, Job
from semdup.ingest.parking import ParkedPost
from semdup.opensearch_io.boundary import client_error

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
    with caplog.at_level(logging.WARNING, logger="semdup.ingest.jobs"):
        calls, covered = jobs.replay_batches(records, "travel", V, batch_size=1)
    got = [(c.task, c.args) for c in calls]
    assert got == [
        (INDEX_POSTS, ["travel", [{"id": "1", "title": "Visa?", "body": ""}], V]),
        (INDEX_POSTS, ["travel", [{"id": "2"}], V]),
        (BACKFILL_BATCH, ["travel", ["3"], V]),
        (BACKFILL_BATCH, ["travel", ["6"], V]),
        (DELETE_POSTS, ["travel", ["4"]]),
    ]
    assert sorted(r.post_id for r in covered) == ["1", "2", "3", "4", "6"]
    assert "name task 'reindex_everything'" in caplog.text and "stay parked" in caplog.text
    calls, _ = jobs.replay_batches(records, "travel", V, batch_size=64)
    assert [len(c.args[1]) for c in calls] == [2, 2, 1]


class FakeIndices:
    def __init__(self, exists: bool = True) -> None:
        self.present = exists

    def refresh(self, **_: Any) -> None:
        pass

    def exists(self, index: str, **_: Any) -> bool:
        return self.present

    def create(self, **_: Any) -> None:
        self.present = True

    def get_mapping(self, index: str, **_: Any) -> dict[str, Any]:
        from semdup.index_format.system_indices import JOBS

        return {index: {"mappings": JOBS.body["mappings"]}}


class FakeCluster:
    """Records job records; answers the job's outcome sums in turn (an exception in the list is raised)."""

    def __init__(self, sums: list[Any] | None = None) -> None:
        self.sums = list(sums or [(0, 0)])
        self.indices = FakeIndices()
        self.records: dict[str, dict[str, Any]] = {}

    def index(self, index: str, id: str, body: dict[str, Any], **_: Any) -> None:
        assert index == JOBS_INDEX
        self.records[id] = body

    def update(self, index: str, id: str, body: dict[str, Any], **_: Any) -> None:
        assert index == JOBS_INDEX
        self.records[id] = {**self.records.get(id, {}), **body["doc"]}

    def search(self, index: str, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        assert index == JOBS_INDEX and body["size"] == 0
        answer = self.sums.pop(0) if len(self.sums) > 1 else self.sums[0]
        if isinstance(answer, Exception):  # as the client raises it (its transport maps opensearch-py's errors)
            raise client_error(answer, "POST", f"/{JOBS_INDEX}/_search") from answer
        written, parked = answer
        return {"aggregations": {"written": {"value": written}, "parked": {"value": parked}, "skipped": {"value": 0}}}


def test_enqueue_posts_records_each_batch_in_the_ledger_before_sending_it_with_its_last_content(monkeypatch) -> None:
    events: list[tuple[str, Any]] = []
    monkeypatch.setattr(ledger, "ensure_jobs_index", lambda client: None)
    monkeypatch.setattr(
        ledger, "_record", lambda client, job, calls, seq: events.append(("ledger", [c.batch for c in calls]))
    )
    monkeypatch.setattr(ledger, "_mark_sent", lambda client, job, n: events.append(("sent", n)))
    monkeypatch.setattr(jobs.TaskCall, "send", lambda self, app: events.append(("publish", self)))
    monkeypatch.setattr(ledger, "CHUNK", 2)  # two batches per ledger chunk
    posts = [Post(str(i % 7), f"title {i}", "") for i in range(9)]  # ids 0..6, then 0 and 1 again
    cluster = FakeCluster()
    job = jobs.enqueue_posts(cluster, "travel", posts, V, batch_size=3, progress=False)
    assert (job.index, job.model_version, job.total, job.batches) == ("travel", V, 7, 3)
    assert cluster.records[f"job/{job.id}"]["total"] == 7
    # each chunk: its ledger records, then its messages, then the job's count of published batches
    kinds = [(k, v if k != "publish" else v.batch) for k, v in events]
    assert kinds == [("ledger", ["0", "1"]), ("publish", "0"), ("publish", "1"), ("sent", 2),
                     ("ledger", ["2"]), ("publish", "2"), ("sent", 3)]  # fmt: skip
    sent = [v for k, v in events if k == "publish"]
    assert [c.task for c in sent] == [INDEX_POSTS] * 3
    titles = [[p["title"] for p in c.args[1]] for c in sent]
    assert titles == [["title 7", "title 8", "title 2"], ["title 3", "title 4", "title 5"], ["title 6"]]
    assert all(c.args[0] == "travel" and c.args[2] == V and c.job == job.id for c in sent)


def test_a_task_call_sends_its_job_and_batch_with_the_message_under_the_batch_s_own_task_id() -> None:
    broker = RecordingBroker()  # by name: no task module
    jobs.TaskCall(INDEX_POSTS, ["travel", [{"id": "1"}], V], "j1").send(broker)
    jobs.TaskCall(INDEX_POSTS, ["travel", [{"id": "1"}], V], "j1", "7").send(broker)
    assert broker.messages == [
        {"name": INDEX_POSTS, "args": ["travel", [{"id": "1"}], V], "kwargs": {"job": "j1"}, "task_id": None},
        {
            "name": INDEX_POSTS,
            "args": ["travel", [{"id": "1"}], V],
            "kwargs": {"job": "j1", "batch": "7"},
            "task_id": "j1-7",
        },
    ]


def test_submit_counts_an_iterator_of_calls_as_it_sends_them_and_says_how_far_a_failing_broker_got() -> None:
    """A backfill lists its posts while it sends them: the job first holds the count listed, then what was sent. A
    broker that stops part-way leaves the unsent batches in the ledger and says how far it got."""
    store, broker = JobsStore(), RecordingBroker()
    ids = iter(str(i) for i in range(10))
    job = jobs.submit(store, "travel", V, jobs.batches(BACKFILL_BATCH, "travel", ids, [V], 4), total=12, app=broker)
    assert (job.total, job.batches) == (10, 3) and store.docs[f"job/{job.id}"]["total"] == 10
    assert broker.sent == [
        (BACKFILL_BATCH, ["travel", b, V]) for b in (["0", "1", "2", "3"], ["4", "5", "6", "7"], ["8", "9"])
    ]
    failing = RecordingBroker(fail_at=2)
    with pytest.raises(jobs.EnqueueFailed, match=r"4 of 10 were enqueued in 1 task\(s\) before it failed") as caught:
        jobs.submit(
            store,
            "travel",
            V,
            list(jobs.batches(BACKFILL_BATCH, "travel", [str(i) for i in range(10)], [V], 4)),
            app=failing,
        )
    assert caught.value.details == {"enqueued": 4, "tasks": 1} and "ConnectionRefusedError" in str(caught.value)
    failed = [d for d in store.docs.values() if d.get("kind") == "job" and d["job"] != job.id][0]["job"]
    assert [b["batch"] for b in store.batches(failed)] == ["0", "1", "2"]  # all recorded: a sweeper sends the rest


JOB = Job("j1", "travel", V, total=5)


def test_wait_for_folds_the_polls_into_the_final_progress() -> None:
    down = os_exc.ConnectionError("N/A", "connection refused", None)
    cluster = FakeCluster([(0, 2), down, (2, 2), (3, 2)])
    seen = list(jobs.poll(cluster, JOB, timeout=60, interval=0))
    assert [(p.written, p.parked) for p in seen] == [(0, 2), (0, 2), (2, 2), (3, 2)]  # the last counts while down
    assert [p.waiting.opensearch_down_s is not None for p in seen] == [False, True, False, False]
    assert "connection refused" in seen[1].waiting.opensearch_error
    assert seen[-1].finished and not seen[0].finished and seen[0].pending == 3
    done = jobs.wait_for(FakeCluster([(1, 2), (3, 2)]), JOB, timeout=60, interval=0, progress=False)
    assert done == jobs.JobProgress(JOB, written=3, parked=2) and done.pending == 0


def test_wait_for_returns_what_is_done_when_the_time_is_up() -> None:
    done = jobs.wait_for(FakeCluster([(1, 1)]), JOB, timeout=0, interval=0, progress=False)
    assert not done.finished and (done.written, done.parked, done.pending) == (1, 1, 3)


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


@pytest.mark.parametrize("name", ["a*", "_all", "a,b", ".kibana", "../x", "_search"])
def test_a_job_is_never_sent_to_a_pattern_list_or_system_name(name: str) -> None:
    from semdup.core.errors import ConfigError
    from semdup.ingest.jobs import enqueue_posts, ensure_index

    with pytest.raises(ConfigError):
        ensure_index(None, name, dimension=None)  # type: ignore[arg-type]  # refused before any call
    with pytest.raises(ConfigError):
        enqueue_posts(None, name, [], "v")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        jobs.submit(None, name, "v", [])  # type: ignore[arg-type]  # the HTTP endpoints' way in too
