"""Fast, hermetic tests of the indexer's pieces (no broker, no cluster): fakes stand in for the bundle."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from semdup.core.errors import OpenSearchUnavailable, PostError
from semdup.core.posts import Post
from semdup.index_format.mapping import semdup_source
from semdup.index_format.schema import CandidateFields, missing_semdup_fields, semdup_fields_mapping
from semdup.indexer import batch_writer
from semdup.ingest.celery_app import celery_config
from semdup.opensearch_io.boundary import ItemFailure
from semdup.opensearch_io.bulk import BulkReport


class FakeBundle:
    """Same method as ``Bundle.document_fields``; refuses a post whose title is 'BOOM' like a bad post."""

    version = "fake-000000000000"

    def document_fields(self, posts: list[Post]) -> list[dict[str, Any]]:
        for p in posts:
            if p.title == "BOOM":
                raise PostError(f"post {p.id!r} cannot be encoded")
        return [{"vector": [1.0, 0.0], "terms": {"a": 1.0}, "model": self.version} for _ in posts]


def test_celery_config_is_safe_for_redelivery() -> None:
    conf = celery_config("redis://127.0.0.1:6379/0", visibility_timeout=3600)
    assert conf["accept_content"] == ["json"] and conf["task_serializer"] == "json"
    assert conf["task_acks_late"] is True and conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["task_ignore_result"] is True
    assert conf["broker_transport_options"]["visibility_timeout"] == 3600


def test_celery_config_refuses_a_visibility_timeout_shorter_than_a_batch() -> None:
    with pytest.raises(ValueError, match="at least 10"):
        celery_config("redis://x", visibility_timeout=1)


def test_amqp_urls_are_accepted_unchanged() -> None:
    assert celery_config("amqp://guest@rabbit:5672//")["broker_url"] == "amqp://guest@rabbit:5672//"


def test_each_broker_gets_its_own_transport_options_and_rabbitmq_what_redelivery_needs() -> None:
    amqp = celery_config("amqp://guest@rabbit:5672//")
    assert amqp["broker_transport_options"] == {"confirm_publish": True}  # a publish returns once the broker has it
    assert amqp["task_default_queue_type"] == "classic" and amqp["task_default_delivery_mode"] == "persistent"
    assert amqp["task_acks_late"] and amqp["task_reject_on_worker_lost"] and amqp["worker_prefetch_multiplier"] == 1
    assert amqp["broker_heartbeat"] == 60
    redis = celery_config("redis://127.0.0.1:6379/0")["broker_transport_options"]
    assert "confirm_publish" not in redis and redis["visibility_timeout"] == 300


def test_tasks_are_namespaced_and_keep_their_message_until_written_or_parked() -> None:
    from opensearchpy import exceptions as os_exc

    from semdup.indexer import retry, tasks
    from semdup.opensearch_io.boundary import client_error

    for task in (tasks.index_posts, tasks.backfill_batch, tasks.sync_posts, tasks.delete_posts):
        assert task.name.startswith("semdup.indexer.")
        assert task.ignore_result is True and task.acks_late is True and task.reject_on_worker_lost is True
        assert task.max_retries is None  # the retry budget is RetryPolicy's; a batch that cannot park never runs out
        assert task.autoretry_for == retry.TRANSIENT_ERRORS  # Celery retries them, with retry_backoff
        assert task.retry_backoff and task.retry_jitter is False
    assert PostError not in retry.TRANSIENT_ERRORS

    def transient(exc: Exception) -> bool:  # as the client raises it (its transport maps it)
        return isinstance(client_error(exc, "POST", "/_bulk"), retry.TRANSIENT_ERRORS)

    assert transient(os_exc.TransportError(503, "unavailable", {}))
    assert transient(os_exc.TransportError(429, "too_many_requests", {}))
    assert transient(os_exc.ConnectionTimeout("TIMEOUT", "read timed out", None))
    assert transient(os_exc.ConnectionError("N/A", "connection refused", None))
    assert not transient(os_exc.RequestError(400, "mapper_parsing_exception", {}))
    assert not transient(os_exc.NotFoundError(404, "index_not_found_exception", {}))
    assert not isinstance(PostError("no text"), retry.TRANSIENT_ERRORS)


def test_bad_posts_are_returned_for_parking_with_their_payload() -> None:
    result = batch_writer.BatchResult()
    batch = [
        {"id": "1", "title": "ok", "body": ""},
        {"id": "2", "title": "", "body": " "},
        "not an object",
        {"title": "no id"},
    ]
    posts = batch_writer._parse_posts(batch, result)
    assert [p.id for p in posts] == ["1"]
    ids = [f.id for f in result.failed]
    assert result.failed[0].type == "PostError" and result.failed[0].status is None  # refused before any request
    assert ids[0] == "2" and all(i.startswith("malformed-") for i in ids[1:])
    assert result.payloads["2"] == {"id": "2", "title": "", "body": " "}


def test_a_post_the_encoder_refuses_fails_alone() -> None:
    result = batch_writer.BatchResult()
    posts = [Post("1", "fine"), Post("2", "BOOM"), Post("3", "also fine")]
    encoded = batch_writer._encode(FakeBundle(), posts, result)
    assert [p.id for p, _ in encoded] == ["1", "3"]
    assert [f.id for f in result.failed] == ["2"] and result.failed[0].type == "PostError"


def test_rejections_left_after_bulk_retries_are_transient() -> None:
    rejected = {
        "_id": "9",
        "status": 429,
        "error": {"type": "es_rejected_execution_exception", "reason": "queue full"},
    }
    report = BulkReport(written=3, failed=[ItemFailure.of_item(rejected)])
    with pytest.raises(OpenSearchUnavailable, match="429") as caught:
        batch_writer._split_failures(report, batch_writer.BatchResult(), "index_posts")
    assert caught.value.status == 429 and caught.value.type == "es_rejected_execution_exception"
    # an overload known by its error type alone is transient too
    tripped = ItemFailure("9", None, "circuit_breaking_exception", "[parent] Data too large")
    with pytest.raises(OpenSearchUnavailable):
        batch_writer._split_failures(BulkReport(failed=[tripped]), batch_writer.BatchResult(), "index_posts")


def test_mapping_failures_are_kept_for_parking() -> None:
    result = batch_writer.BatchResult()
    refused = ItemFailure.of_item(
        {"_id": "7", "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "failed to parse"}}
    )
    assert refused == ItemFailure("7", 400, "mapper_parsing_exception", "failed to parse") and not refused.transient
    batch_writer._split_failures(BulkReport(written=2, failed=[refused]), result, "x")
    assert result.written == 2 and result.failed == [refused]


def test_semdup_source_omits_a_missing_vector() -> None:
    from semdup.index_format.packed_fields import unpack_semdup_fields

    every = CandidateFields(sparse=True, knn=True)
    out = semdup_source({"vector": None, "terms": {"a": 0.5}, "model": "m"}, every)
    assert set(out) == {"model", "terms", "packed"} and out["model"] == "m" and out["terms"] == {"a": 0.5}
    assert unpack_semdup_fields(out["packed"]) == (None, {"a": 0.5})


def test_semdup_source_writes_only_the_search_structures_the_index_holds() -> None:
    from semdup.index_format.packed_fields import unpack_semdup_fields

    fields = {"vector": [0.6, 0.8], "terms": {"a": 0.5}, "model": "m"}
    lean = semdup_source(fields)
    assert set(lean) == {"model", "packed"}
    vector, terms = unpack_semdup_fields(lean["packed"])  # the packed copy still holds both
    assert vector.tolist() == [np.float32(0.6), np.float32(0.8)] and terms == {"a": 0.5}
    assert set(semdup_source(fields, CandidateFields(sparse=True))) == {"model", "packed", "terms"}
    assert set(semdup_source(fields, CandidateFields(knn=True))) == {"model", "packed", "vector"}


def test_candidate_fields_of_a_mapping_and_the_mapping_of_candidate_fields() -> None:
    props = semdup_fields_mapping(4, CandidateFields(sparse=True, knn=True))["properties"]
    assert props["terms"] == {"type": "rank_features"} and props["vector"]["type"] == "knn_vector"
    assert CandidateFields.of_mapping(props) == CandidateFields(sparse=True, knn=True)
    lean = semdup_fields_mapping(4)["properties"]
    always = {"model", "indexed_at", "packed", "content_hash", "structures"}
    assert set(lean) == always and CandidateFields.of_mapping(lean) == CandidateFields()
    older = {"terms": {"type": "rank_features"}, "vector": {"type": "float", "index": False}}  # no k-NN plugin
    assert CandidateFields.of_mapping(older) == CandidateFields(sparse=True, knn=False)
    # an older index gains only the always-there fields, never a search structure it did not have
    assert set(missing_semdup_fields({"model": {"type": "keyword"}}, 4)) == always - {"model"}
    assert CandidateFields(True, False) & CandidateFields(True, True) == CandidateFields(True, False)
    assert CandidateFields(True, False) | CandidateFields(False, True) == CandidateFields(True, True)
    assert CandidateFields.common([CandidateFields(True, True), CandidateFields(False, True)]) == CandidateFields(
        False, True
    )
    assert CandidateFields.common([]) == CandidateFields()
    assert CandidateFields().describe() == "packed fields only"
    assert CandidateFields(True, True).describe() == "sparse+knn"


def test_task_args_are_read_from_positional_and_keyword_forms() -> None:
    from semdup.indexer.tasks import Batch

    got = Batch.of("semdup.indexer.index_posts", ("i", [{"id": "1"}], "v"), {"job": "j"})
    assert got == Batch("index_posts", "i", [{"id": "1"}], "v", "j") and got.ids == ["1"]
    assert got.payloads == {"1": {"id": "1"}}
    got = Batch.of("semdup.indexer.backfill_batch", (), {"index": "i", "ids": ["1"], "model_version": "v"})
    assert got == Batch("backfill_batch", "i", ["1"], "v", None)
    assert Batch.of("semdup.indexer.delete_posts", ("i", ["1", "2"], "j"), {}) == Batch(
        "delete_posts", "i", ["1", "2"], "", "j"
    )


def test_a_refusal_that_only_mentions_429_in_a_name_is_parked_not_retried() -> None:
    """A write-blocked index whose name holds "429" (a test's random suffix did): its refusals are not overload."""
    reason = "index [t-429549b3] blocked by: [FORBIDDEN/8/index write (api)]; 429 in the text"
    blocked = ItemFailure.of_item(
        {"_id": "429", "status": 403, "error": {"type": "cluster_block_exception", "reason": reason}}
    )
    result = batch_writer.BatchResult()
    batch_writer._split_failures(BulkReport(written=0, failed=[blocked]), result, "index_posts")
    assert result.failed == [blocked] and not blocked.transient
    overloaded = ItemFailure.of_item({"_id": "1", "status": 429, "error": {"type": "rejected_execution_exception"}})
    with pytest.raises(OpenSearchUnavailable, match="429"):
        batch_writer._split_failures(BulkReport(written=0, failed=[overloaded]), batch_writer.BatchResult(), "x")
