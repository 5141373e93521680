"""The one OpenSearch boundary (semdup.opensearch_io.boundary): what each client error becomes, bulk items as
ItemFailures, and a real client's transport raising semdup's errors. Decisions read status and type, never text."""

from __future__ import annotations

import pytest
from opensearchpy import exceptions as os_exc

from semdup.core.errors import (
    OpenSearchError,
    OpenSearchMissing,
    OpenSearchRefused,
    OpenSearchUnavailable,
    SearchIndexError,
    SearchTimeout,
)
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_process import any_free_port
from semdup.opensearch_io.boundary import (
    ItemFailure,
    MappedTransport,
    OpenSearch,
    client_error,
    error_reason,
    is_transient,
)
from semdup.opensearch_io.clients import connect


def _body(kind: str, reason: str) -> dict:
    return {"error": {"type": kind, "reason": reason, "root_cause": [{"type": kind, "reason": reason}]}, "status": 0}


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_overload_and_a_node_down_are_transient_with_their_status(status: int) -> None:
    got = client_error(os_exc.TransportError(status, "x", _body("x", "busy")), "POST", "/travel/_search")
    assert type(got) is OpenSearchUnavailable and got.status == status and got.type == "x" and got.reason == "busy"
    assert f"HTTP {status}" in str(got) and "POST /travel/_search" in str(got)


def test_no_answer_is_transient_and_a_timeout_says_which() -> None:
    refused = client_error(os_exc.ConnectionError("N/A", "refused", ConnectionRefusedError()), "GET", "/")
    assert type(refused) is OpenSearchUnavailable and refused.status is None and refused.type == "ConnectionError"
    assert "SEMDUP_OPENSEARCH_URL" in str(refused)  # how to start one
    slow = client_error(os_exc.ConnectionTimeout("TIMEOUT", "read timed out", None), "POST", "/_msearch", 2.5)
    assert isinstance(slow, SearchTimeout) and isinstance(slow, OpenSearchUnavailable) and "within 2.5 s" in str(slow)


def test_refusals_keep_status_type_and_reason_and_404_is_missing() -> None:
    blocked = client_error(
        os_exc.AuthorizationException(
            403, "cluster_block_exception", _body("cluster_block_exception", "index [t-429] blocked")
        ),
        "PUT",
        "/t-429/_doc/1",
    )
    assert type(blocked) is OpenSearchRefused and blocked.status == 403 and blocked.type == "cluster_block_exception"
    assert not isinstance(blocked, OpenSearchUnavailable)  # a "429" in the text is no overload
    gone = client_error(
        os_exc.NotFoundError(
            404, "index_not_found_exception", _body("index_not_found_exception", "no such index [x]")
        ),
        "GET",
        "/x",
    )
    assert isinstance(gone, OpenSearchMissing) and isinstance(gone, OpenSearchRefused)
    assert isinstance(gone, SearchIndexError) and gone.status == 404 and gone.reason == "no such index [x]"
    bad = client_error(os_exc.SerializationError("cannot serialize"), "POST", "/x/_doc")
    assert type(bad) is OpenSearchRefused and bad.status is None and bad.type == "SerializationError"
    assert str(bad).startswith("OpenSearch client error SerializationError: cannot serialize")  # the words of before
    long = client_error(os_exc.TransportError(400, "x", {}), "POST", "/" + "i" * 1000)
    assert len(str(long)) < 400  # a long path is cut in the message


def test_advising_keeps_the_class_and_the_fields() -> None:
    err = client_error(os_exc.TransportError(503, "x", _body("x", "busy")), "POST", "/_bulk")
    more = err.advising("run it again")
    assert type(more) is type(err) and (more.status, more.type, more.reason) == (503, "x", "busy")
    assert str(more).endswith("; run it again")


def test_bulk_items_keep_status_and_type() -> None:
    rejected = ItemFailure.of_item(
        {"_id": "1", "status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}
    )
    assert rejected == ItemFailure("1", 429, "es_rejected_execution_exception", "queue full") and rejected.transient
    assert str(rejected) == "HTTP 429 es_rejected_execution_exception: queue full"
    tripped = ItemFailure.of_item({"_id": "2", "status": 500, "error": {"type": "circuit_breaking_exception"}})
    assert tripped.transient  # overload known by its type
    name = ItemFailure.of_item(
        {"_id": "429", "status": 400, "error": {"type": "mapper_parsing_exception", "reason": "429"}}
    )
    assert not name.transient and not name.missing
    gone = ItemFailure.of_item({"_id": "3", "status": 404, "result": "not_found"})  # a delete of nothing
    assert gone.missing and gone.type == "not_found" and not gone.transient
    refused = ItemFailure.of_error("4", client_error(os_exc.RequestError(413, "x", {}), "POST", "/_bulk"))
    assert (refused.id, refused.status) == ("4", 413)
    assert is_transient(None, "too_many_requests") and not is_transient(None) and not is_transient(500, "x")


def test_a_failure_becomes_an_error_that_keeps_its_fields() -> None:
    failure = ItemFailure("7", 507, "disk_full", "no space")
    err = failure.error("could not park 1 post")
    assert type(err) is OpenSearchUnavailable and str(err) == "could not park 1 post"
    assert (err.status, err.type, err.reason) == (507, "disk_full", "no space")
    refused = failure.error("refused", OpenSearchRefused)
    assert type(refused) is OpenSearchRefused and (refused.status, refused.type) == (507, "disk_full")


def test_an_error_body_says_its_root_cause() -> None:
    body = {"type": "action_request_validation_exception", "reason": "Validation Failed", "root_cause": []}
    assert error_reason(body) == "Validation Failed"
    assert error_reason({**body, "root_cause": [{"reason": "Validation Failed: 1: no requests added;"}]}).endswith(
        "no requests added;"
    )
    assert error_reason("index_not_found_exception") == "index_not_found_exception"


def test_a_real_client_raises_semdups_errors() -> None:
    """The client ``connect`` builds, and any client built with the transport, raise semdup's errors."""
    url = f"http://127.0.0.1:{any_free_port()}"
    client = connect(OpenSearchSettings(url=url, timeout=2, max_retries=0), check=False)
    assert isinstance(client.transport, MappedTransport)
    with pytest.raises(OpenSearchUnavailable) as caught:
        client.search(index="travel", body={"query": {"match_all": {}}}, request_timeout=2)
    assert caught.value.status is None and isinstance(caught.value.__cause__, os_exc.ConnectionError)
    own = OpenSearch(hosts=[url], max_retries=0, timeout=2, transport_class=MappedTransport)
    with pytest.raises(OpenSearchError):
        own.indices.exists(index="travel")


def test_a_scroll_that_some_shards_failed_is_transient() -> None:
    from opensearchpy.helpers import ScanError

    failed = ScanError("scroll-1", "Scroll request has only succeeded on 3 (+0 skipped) shards out of 5.")
    got = client_error(failed, "GET", "/travel/_search?scroll")
    assert type(got) is OpenSearchUnavailable and got.type == "ScanError" and "3 (+0 skipped)" in got.reason


def test_an_mget_document_that_failed_raises_instead_of_reading_as_absent() -> None:
    from semdup.opensearch_io.boundary import mget_docs

    denied = {"type": "security_exception", "reason": "no permissions for [indices:data/read/mget[shard]] and User "
              "[name=semdup-worker, backend_roles=[], requestedTenant=null]"}  # fmt: skip
    ok = [{"_index": "site", "_id": "1", "found": True, "_source": {}}, {"_index": "site", "_id": "2", "found": False}]
    assert mget_docs({"docs": ok}, "GET /_mget (site)") == ok
    with pytest.raises(OpenSearchRefused, match=r"document 3 of site.*semdup-worker.*semdup roles print") as refused:
        mget_docs({"docs": [*ok, {"_index": "site", "_id": "3", "error": denied}]}, "GET /_mget (site)")
    assert (refused.value.status, refused.value.type) == (403, "security_exception")
    shard = {"type": "no_shard_available_action_exception", "reason": "No shard available"}
    with pytest.raises(OpenSearchUnavailable, match="retried later"):
        mget_docs({"docs": [{"_index": "site", "_id": "4", "error": shard}]}, "GET /_mget (site)")


def test_a_security_refusal_says_the_roles_are_why() -> None:
    body = {"error": {"type": "security_exception", "reason": "no permissions for [indices:data/read/search]"}}
    err = client_error(os_exc.AuthorizationException(403, "security_exception", body), "GET", "/other/_search")
    assert isinstance(err, OpenSearchRefused) and err.status == 403
    assert "GET /other/_search" in str(err) and "semdup roles print" in str(err)


def test_semdups_own_searches_name_no_search_pipeline() -> None:
    """Issue #45: a search of semdup's own never runs the index's default search pipeline (semdup's, maybe)."""
    import json

    from semdup.opensearch_io.boundary import own_search_params

    params, _ = own_search_params("/travel/_search", {"request_timeout": 5}, {"query": {}})
    assert params == {"request_timeout": 5, "search_pipeline": "_none"}
    body = "\n".join(json.dumps(x) for x in ({"index": "t"}, {"size": 3}, {"index": "t"}, {})) + "\n"
    _, sent = own_search_params("/_msearch", None, body)
    lines = [json.loads(x) for x in sent.splitlines() if x]
    assert lines == [{"index": "t"}, {"search_pipeline": "_none", "size": 3}, {"index": "t"},
                     {"search_pipeline": "_none"}]
    assert own_search_params("/t/_search", {"search_pipeline": "p"}, None)[0] == {"search_pipeline": "p"}  # named
    assert own_search_params("/t/_search", None, None, pipelines=True) == (None, None)  # the site's searches
    assert own_search_params("/_search/scroll", None, None) == (None, None)  # a scroll's next page takes none
    assert own_search_params("/t/_doc/1", None, None) == (None, None)
    assert own_search_params("/t/_search/template", None, {"id": "x"})[0] == {"search_pipeline": "_none"}
    assert own_search_params("/_search", None, None)[0] == {"search_pipeline": "_none"}
    assert own_search_params("/a,b/_search", None, None)[0] == {"search_pipeline": "_none"}
    # a plugin's own search API is no index search: it refuses the parameter (ml-commons' connectors)
    assert own_search_params("/_plugins/_ml/connectors/_search", None, {}) == (None, {})


def test_a_count_is_sent_as_a_search_without_pipeline() -> None:
    """_count runs the default search pipeline and refuses search_pipeline (OpenSearch 2.19.1): a size-0 _search."""
    from semdup.opensearch_io.boundary import MappedTransport

    sent: list[tuple[str, str, object, object]] = []

    class Recording(MappedTransport):
        def __init__(self) -> None:  # no connection pool: perform_request below never reaches one
            self.kwargs = {}
            self.pipelines = False

    def fake(self: object, method: str, url: str, params: object = None, body: object = None, **kw: object) -> object:
        sent.append((method, url, params, body))
        return {"hits": {"total": {"value": 7}}, "_shards": {"total": 1}}

    import opensearchpy

    original = opensearchpy.Transport.perform_request
    opensearchpy.Transport.perform_request = fake  # type: ignore[method-assign]
    try:
        got = Recording().perform_request("POST", "/travel/_count", params={"request_timeout": 3},
                                          body={"query": {"term": {"a": "b"}}})
    finally:
        opensearchpy.Transport.perform_request = original  # type: ignore[method-assign]
    assert got == {"count": 7, "_shards": {"total": 1}}
    assert sent == [("POST", "/travel/_search", {"request_timeout": 3, "search_pipeline": "_none"},
                     {"query": {"term": {"a": "b"}}, "size": 0, "track_total_hits": True})]
