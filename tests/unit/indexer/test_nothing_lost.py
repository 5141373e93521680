"""The rules that keep every post written, parked or queued, without a broker or a cluster (issue #13, items 1-2).

Retry budget and backoff, ids OpenSearch would refuse, bulk requests refused whole, parked record ids, the task
guard's decisions (retry, park, keep on the broker), and reading queued task messages.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from celery.exceptions import Reject, Retry
from celery_retries import Sent, run_as_worker
from opensearchpy import exceptions as os_exc

from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError, OpenSearchUnavailable, PostError
from semdup.indexer import batch_writer, tasks
from semdup.indexer.retry import RetryPolicy
from semdup.indexer.runtime import WorkerRuntime
from semdup.ingest.backlog import decode_message
from semdup.ingest.parking import parked_id
from semdup.opensearch_io.boundary import ItemFailure, client_error


# --- retry budget ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [0.0, 1.0, 5.0, 62.0, 300.0, 1800.0])
def test_the_retry_budget_is_a_floor_on_the_nominal_waits(budget: float) -> None:
    policy = RetryPolicy(budget_s=budget)
    waits = [policy.delay(k) for k in range(policy.max_retries)]
    assert sum(waits) >= budget  # never gives up sooner than the budget
    assert not waits or sum(waits[:-1]) < budget  # and retries no more than it takes
    assert all(w <= policy.cap_s for w in waits)


def test_the_waits_are_celerys_retry_backoff_without_jitter() -> None:
    from celery.utils.time import get_exponential_backoff_interval

    from semdup.indexer.retry import annotations

    policy = RetryPolicy(budget_s=60, first_s=2, cap_s=60)
    assert [policy.delay(k) for k in range(7)] == [2, 4, 8, 16, 32, 60, 60]
    assert policy.delay(10**6) == 60
    for k in range(40):  # what Celery's autoretry waits, with the annotations the worker puts on its tasks
        assert get_exponential_backoff_interval(2, k, 60, full_jitter=False) == policy.delay(k)
    assert annotations(policy) == {"*": {"retry_backoff": 2, "retry_backoff_max": 60}}


def test_retry_waits_fit_the_visibility_timeout() -> None:
    short = load_settings(env={"SEMDUP_RETRY_BUDGET": "4", "SEMDUP_VISIBILITY_TIMEOUT": "10"}).retry_policy()
    assert short.budget_s == 4 and short.cap_s == 2 and short.cap_s <= 10 / 5
    default = load_settings(env={}).retry_policy()
    assert default.budget_s == 1800 and default.cap_s == 60
    with pytest.raises(ConfigError, match="SEMDUP_RETRY_BUDGET must be seconds"):
        load_settings(env={"SEMDUP_RETRY_BUDGET": "soon"})
    with pytest.raises(ConfigError, match="SEMDUP_RETRY_BUDGET must be seconds >= 0"):
        load_settings(env={"SEMDUP_RETRY_BUDGET": "-1"})
    with pytest.raises(ValueError, match="budget_s >= 0"):
        RetryPolicy.within(-1, visibility_timeout=300)
    with pytest.raises(ValueError, match="1 <= first_s <= cap_s"):
        RetryPolicy(budget_s=10, first_s=5, cap_s=1)


# --- ids OpenSearch refuses -----------------------------------------------------------------------------------
def test_ids_over_512_bytes_of_utf8_or_empty_are_refused() -> None:
    batch_writer.check_doc_id("a" * 512)
    batch_writer.check_doc_id("é" * 256)  # 512 bytes
    with pytest.raises(PostError, match="is 514 bytes of UTF-8"):
        batch_writer.check_doc_id("é" * 257)
    with pytest.raises(PostError, match="empty"):
        batch_writer.check_doc_id("")


def test_a_bad_id_is_parked_and_the_rest_of_the_batch_kept() -> None:
    result = batch_writer.BatchResult()
    long_id = "x" * 600
    batch = [{"id": "1", "title": "ok"}, {"id": long_id, "title": "fine text"}, {"id": "", "title": "t"}]
    posts = batch_writer._parse_posts(batch, result)
    assert [p.id for p in posts] == ["1"]
    assert [f.id for f in result.failed] == [long_id, ""]
    assert "600 bytes" in result.failed[0].reason and result.payloads[long_id]["title"] == "fine text"


def test_parked_record_ids_fit_opensearch_and_keep_index_and_post_apart() -> None:
    pid = parked_id("travel", "x" * 600)
    assert len(pid.encode()) <= 512 and pid == parked_id("travel", "x" * 600)
    assert parked_id("travel", "1") != parked_id("travel2", "1") != parked_id("travel", "2")
    assert parked_id("a/b", "c") != parked_id("a", "b/c")


class RefusingBulk:
    """A bulk endpoint that refuses a whole request (400) when it holds the id ``bad``, like OpenSearch does for an
    ``_id`` over 512 bytes, and accepts every other document."""

    def __init__(self) -> None:
        from opensearchpy.serializer import JSONSerializer

        self.transport = type("Transport", (), {"serializer": JSONSerializer()})()
        self.requests: list[list[str]] = []

    def bulk(self, body: Any, **_: Any) -> dict[str, Any]:
        lines = body.decode() if isinstance(body, bytes) else body
        lines = lines.splitlines() if isinstance(lines, str) else lines
        heads = [json.loads(line) for line in lines[::2]]
        ids = [next(iter(h.values()))["_id"] for h in heads]
        self.requests.append(ids)
        if "bad" in ids:
            refused = {"error": {"type": "action_request_validation_exception", "reason": "id is too long"}}
            raise client_error(
                os_exc.RequestError(400, "action_request_validation_exception", refused), "POST", "/_bulk"
            )
        return {"errors": False, "items": [{"index": {"_id": i, "status": 201}} for i in ids]}


def test_a_request_refused_whole_is_split_until_the_refused_document_stands_alone() -> None:
    client = RefusingBulk()
    actions = [{"_op_type": "index", "_index": "t", "_id": str(i), "_source": {"n": i}} for i in range(7)]
    actions.insert(5, {"_op_type": "index", "_index": "t", "_id": "bad", "_source": {}})
    report = batch_writer._bulk_or_split(client, actions)
    assert report.written == 7
    assert [f.id for f in report.failed] == ["bad"]
    assert report.failed[0].status == 400 and report.failed[0].type == "action_request_validation_exception"
    assert ["bad"] in client.requests


# --- the task guard -------------------------------------------------------------------------------------------
POLICY = RetryPolicy(budget_s=10, first_s=2, cap_s=4)


def deliver(monkeypatch, work: Any, retries: int = 0, sent: Sent | None = None) -> dict[str, int]:
    """``tasks._deliver(work)`` inside a real task of the worker's kind (:class:`tasks.IndexerTask`, with the
    policy's waits as the worker's annotations give them), run as the worker runs it (Celery's autoretry)."""
    from celery import Celery

    from semdup.indexer.retry import annotations

    app = Celery("test-guard", set_as_current=False)
    app.conf.task_annotations = annotations(POLICY)

    @app.task(name="test.deliver", base=tasks.IndexerTask, bind=True, max_retries=None, shared=False)
    def run(self: Any) -> dict[str, int]:
        return tasks._deliver(self, BATCH, work)

    return run_as_worker(monkeypatch, app.tasks["test.deliver"], retries=retries, sent=sent)


@pytest.fixture
def store(monkeypatch) -> dict[str, list[Any]]:
    """The worker's runtime with a 10 s budget, and parking / outcomes that record what they are asked."""
    seen: dict[str, list[Any]] = {"parked": [], "outcomes": [], "unparked": []}
    rt = WorkerRuntime(bundle=None, client=object(), retry=POLICY)
    monkeypatch.setattr(tasks, "runtime", lambda: rt)

    def park(client, index, failures, **kw):
        if seen.get("park_fails"):
            raise OpenSearchUnavailable("parking: connection refused")
        seen["parked"] += [f.id for f in failures]
        seen.setdefault("errors", []).extend(failures)

    monkeypatch.setattr(tasks.parking, "park", park)
    monkeypatch.setattr(tasks.parking, "unpark", lambda client, index, ids: seen["unparked"].extend(ids))
    monkeypatch.setattr(tasks.outcomes, "record_outcome", lambda *a, **kw: seen["outcomes"].append(kw))
    return seen


BATCH = tasks.Batch("index_posts", "travel", [{"id": "1", "title": "a"}, {"id": "2", "title": "b"}], "v", "job-1")


def _down(rt: Any) -> tasks.Outcome:
    raise OpenSearchUnavailable("connection refused")


def test_a_transient_error_is_retried_within_the_budget(store, monkeypatch) -> None:
    sent = Sent()
    with pytest.raises(Retry):
        deliver(monkeypatch, _down, retries=1, sent=sent)
    assert sent.countdowns == [4] and store["parked"] == [] and store["outcomes"] == []  # retry_backoff: 2 s, 4 s


def test_a_batch_whose_budget_is_spent_is_parked_and_counted(store, monkeypatch) -> None:
    sent = Sent()
    assert deliver(monkeypatch, _down, retries=POLICY.max_retries, sent=sent) == {
        "written": 0,
        "parked": 2,
        "skipped": 0,
    }
    assert store["parked"] == ["1", "2"] and store["outcomes"][0]["parked"] == 2 and sent.countdowns == []
    assert store["errors"][0].type == "OpenSearchUnavailable" and "SEMDUP_RETRY_BUDGET" in store["errors"][0].reason


def test_a_batch_that_cannot_park_stays_on_the_broker(store, monkeypatch) -> None:
    store["park_fails"] = [True]
    sent = Sent()
    with pytest.raises(Retry):
        deliver(monkeypatch, _down, retries=50, sent=sent)
    assert sent.countdowns == [4] and store["outcomes"] == []  # the longest wait, again and again
    with pytest.raises(Reject) as caught:  # and if even the retry cannot be sent, the message is handed back
        deliver(monkeypatch, _down, retries=50, sent=Sent(fails=True))
    assert caught.value.requeue is True


def test_an_unexpected_error_parks_the_batch_at_once(store, monkeypatch) -> None:
    def bug(rt: Any) -> tasks.Outcome:
        raise KeyError("semdup")

    assert deliver(monkeypatch, bug)["parked"] == 2
    assert store["parked"] == ["1", "2"] and store["errors"][0].type == "KeyError"


def test_written_posts_forget_their_parked_records_and_the_outcome_is_recorded(store, monkeypatch) -> None:
    done = deliver(monkeypatch, lambda rt: tasks.Outcome(written=2, written_ids=["1", "2"]))
    assert done == {"written": 2, "parked": 0, "skipped": 0}
    assert store["unparked"] == ["1", "2"] and store["outcomes"] == [{"written": 2, "parked": 0, "skipped": 0}]


def test_a_worker_without_its_runtime_keeps_the_batch(monkeypatch) -> None:
    def broken() -> WorkerRuntime:
        raise ConfigError("no model bundle for the worker")

    monkeypatch.setattr(tasks, "runtime", broken)
    sent = Sent()
    with pytest.raises(Retry):
        deliver(monkeypatch, _down, sent=sent)
    assert sent.countdowns == [POLICY.cap_s]  # the longest wait, from the first retry on


# --- queued messages ------------------------------------------------------------------------------------------
def _kombu_message(task: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A task message as kombu's Redis transport stores it (JSON envelope, base64 body of protocol 2)."""
    body = base64.b64encode(json.dumps([args, kwargs, {"callbacks": None}]).encode()).decode()
    return {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"lang": "py", "task": task, "id": "tid-1", "retries": 0},
        "properties": {"body_encoding": "base64", "delivery_tag": "dt-1", "delivery_mode": 2, "priority": 0},
    }


def test_queued_messages_are_read_with_their_posts_and_job() -> None:
    msg = _kombu_message("semdup.indexer.index_posts", ["travel", [{"id": "1"}, {"id": "2"}], "v"], {"job": "j"})
    queued = decode_message(json.dumps(msg))
    assert queued is not None and queued.index == "travel" and queued.job == "j" and not queued.unacked
    assert queued.post_ids() == ["1", "2"] and queued.task_id == "tid-1"
    held = decode_message(json.dumps([msg, "", "semdup.indexer"]), unacked=True)
    assert held is not None and held.unacked and held.post_ids() == ["1", "2"]
    other = _kombu_message("celery.backend_cleanup", [], {})
    assert decode_message(json.dumps(other)) is None


def test_a_parked_error_keeps_no_credential(monkeypatch) -> None:
    from semdup.ingest import parking

    written: list[dict[str, Any]] = []
    monkeypatch.setattr(parking, "ensure", lambda client, decl: None)
    monkeypatch.setattr(parking, "bulk_write", lambda client, actions: written.extend(actions) or _ok(len(actions)))
    client = type("C", (), {"indices": type("I", (), {"refresh": staticmethod(lambda **_: None)})()})()
    error = "http://admin:s3cret@db:9200/_bulk refused (api_key=abc123)"
    failure = ItemFailure("1", None, "ConnectionError", error)
    parking.park(client, "travel", [failure], task="index_posts", model_version="v")
    stored = written[0]["_source"]["error"]
    assert "s3cret" not in stored and "abc123" not in stored and "db:9200" in stored


def _ok(n: int) -> Any:
    from semdup.opensearch_io.bulk import BulkReport

    return BulkReport(written=n)
