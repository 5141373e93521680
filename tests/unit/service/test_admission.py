"""Admission control and the probes under load, through the real app with a reranker that blocks until released:
past ``max_in_flight`` a request is refused at once with 503 + Retry-After and counted; the probes are never
counted, and answer while every request thread is taken."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.core.settings import OpenSearchSettings
from semdup.service.admission import RETRY_AFTER_S, Gate
from semdup.service.routers.probes import READY_TIMEOUT_S
from semdup.service.settings import ServiceSettings

KEY = "key-5b1e90ad-7d2f0c9e4b1a"
OPS = {"X-API-Key": "ops-key-2b9d41c07e5f8a36"}  # /metrics needs the ops scope
GUARD_S = 60  # a call that has not answered by then is stuck (a deadlock guard, not a latency bound)


class DownClient:
    def info(self, **kw: Any) -> Any:
        raise OpenSearchUnavailable("OpenSearch did not answer at http://127.0.0.1:9")


class BlockingReranker:
    """Holds every rank call until ``release`` is set; ``entered`` counts the calls inside."""

    version = "hybrid-minilm-0123abcd"
    threshold = None
    client = DownClient()

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()

    def rank(self, post: Any, **kw: Any) -> list[Any]:
        self.entered.release()
        self.release.wait(GUARD_S)
        return []

    def empty_reason(self, index: str | None = None) -> str:
        return "no post matched"

    def with_settings(self, **kw: Any) -> BlockingReranker:
        return self


def settings(**values: Any) -> ServiceSettings:
    return service_settings(
        {"bundle": "b", "index": "travel", "api_key": KEY, "api_keys": f"{OPS['X-API-Key']}:*:ops", **values},
        OpenSearchSettings(url="http://127.0.0.1:9"),
    )


def rerank(c: TestClient) -> Any:
    return c.post("/v1/rerank", json={"title": "Visa for Qatar?"}, headers={"X-API-Key": KEY})


def answered(pool: ThreadPoolExecutor, call: Callable[[], Any]) -> Any:
    """``call()``'s answer, made on another thread so that a call stuck behind the blocked ones fails the test."""
    future: Future[Any] = pool.submit(call)
    return future.result(timeout=GUARD_S)


def test_past_max_in_flight_a_request_is_refused_with_503_and_retry_after_and_counted() -> None:
    rr = BlockingReranker()
    with TestClient(create_app(settings(max_in_flight=2), reranker=rr)) as c, ThreadPoolExecutor(4) as pool:  # type: ignore[arg-type]
        held = [pool.submit(rerank, c) for _ in range(2)]
        for _ in held:
            assert rr.entered.acquire(timeout=GUARD_S)
        r = answered(pool, lambda: rerank(c))
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == str(RETRY_AFTER_S)
        assert r.json()["error"]["type"] == "Overloaded" and "SEMDUP_MAX_IN_FLIGHT" in r.json()["error"]["message"]
        assert answered(pool, lambda: c.get("/healthz")).status_code == 200  # probes are never counted
        text = answered(pool, lambda: c.get("/metrics", headers=OPS)).text
        assert 'semdup_rerank_shed_total{path="/v1/rerank"} 1.0' in text
        assert 'semdup_rerank_requests_total{path="/v1/rerank",status="503"} 1.0' in text
        assert "semdup_rerank_in_flight 2.0" in text
        ready = answered(pool, lambda: c.get("/readyz")).json()
        assert ready["checks"]["in_flight"] == 2 and ready["checks"]["max_in_flight"] == 2
        rr.release.set()
        assert [f.result(timeout=GUARD_S).status_code for f in held] == [200, 200]
        assert rerank(c).status_code == 200  # admitted again once the others are done
        assert "semdup_rerank_in_flight 0.0" in c.get("/metrics", headers=OPS).text


def test_the_probes_answer_while_every_request_thread_is_taken() -> None:
    """No bound (max_in_flight 0), 2 request threads, both held by reranks and a third rerank waiting for one:
    /healthz and /metrics need no request thread (the ops key is checked on the probes' threads), /readyz has
    threads of its own (it answers 503 here: no cluster)."""
    rr = BlockingReranker()
    with TestClient(create_app(settings(max_in_flight=0, threads=2), reranker=rr)) as c, ThreadPoolExecutor(6) as pool:  # type: ignore[arg-type]
        held = [pool.submit(rerank, c) for _ in range(3)]
        for _ in range(2):
            assert rr.entered.acquire(timeout=GUARD_S)
        assert answered(pool, lambda: c.get("/healthz")).json() == {"status": "ok", "model": rr.version}
        assert "semdup_rerank_requests_total" in answered(pool, lambda: c.get("/metrics", headers=OPS)).text
        ready = answered(pool, lambda: c.get("/readyz"))
        assert ready.status_code == 503 and "unavailable" in ready.json()["reason"]
        assert "127.0.0.1" not in ready.text  # no caller of a probe learns the cluster's address (issue #34)
        rr.release.set()
        assert [f.result(timeout=GUARD_S).status_code for f in held] == [200, 200, 200]


class HangingClient:
    """A cluster that takes the connection and never answers (until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def info(self, **kw: Any) -> Any:
        self.release.wait(GUARD_S)
        raise OpenSearchUnavailable("OpenSearch did not answer")


def test_readyz_answers_with_its_reason_within_its_deadline_when_the_cluster_hangs() -> None:
    """The readiness probe gets a 503 with the reason, not its own timeout (deploy/k8s: timeoutSeconds above
    READY_TIMEOUT_S)."""
    rr = BlockingReranker()
    rr.client = HangingClient()  # type: ignore[assignment]
    try:
        r = TestClient(create_app(settings(), reranker=rr)).get("/readyz")  # type: ignore[arg-type]
        assert r.status_code == 503 and r.json()["ready"] is False
        assert f"within {READY_TIMEOUT_S:g} s" in r.json()["reason"], r.text
    finally:
        rr.client.release.set()


def test_the_overloaded_503_and_its_retry_after_are_in_the_openapi_document() -> None:
    doc = create_app(settings(), reranker=BlockingReranker()).openapi()  # type: ignore[arg-type]
    answer = doc["paths"]["/v1/rerank"]["post"]["responses"]["503"]
    assert "Overloaded" in answer["description"] and "Retry-After" in answer["headers"]


def test_a_deeply_nested_body_is_called_too_deep_not_non_utf8() -> None:
    c = TestClient(create_app(settings(), reranker=BlockingReranker()))  # type: ignore[arg-type]
    nested = b'{"title": "Visa?", "k": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    r = c.post("/v1/rerank", content=nested, headers={"X-API-Key": KEY, "content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["type"] == "json_too_deep"
    assert "nests arrays or objects too deeply" in r.json()["error"]["message"]
    assert "UTF-8" not in r.json()["error"]["message"]
    latin1 = '{"title": "Visa für Katar?"}'.encode("latin-1")
    r = c.post("/v1/rerank", content=latin1, headers={"X-API-Key": KEY, "content-type": "application/json"})
    assert r.status_code == 422 and "not UTF-8 JSON" in r.json()["error"]["message"], r.text


def test_an_integer_of_5000_digits_is_called_too_long_not_non_utf8() -> None:
    """Issue #45: Python refuses to convert an integer past 4,300 digits with a plain ValueError."""
    c = TestClient(create_app(settings(), reranker=BlockingReranker()))  # type: ignore[arg-type]
    body = b'{"title": "Visa?", "k": ' + b"7" * 5000 + b"}"
    r = c.post("/v1/rerank", content=body, headers={"X-API-Key": KEY, "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["type"] == "json_number_too_long", r.text
    assert "integer too long" in r.json()["error"]["message"] and "UTF-8" not in r.json()["error"]["message"]


def test_gate_counts_refusals_and_zero_means_no_bound() -> None:
    refused: list[str] = []
    gate = Gate(1, on_shed=refused.append)
    assert gate.refuse("/v1/rerank") is False and gate.in_flight == 1
    assert gate.refuse("/v1/posts") is True and refused == ["/v1/posts"] and gate.shed == 1
    gate.leave()
    assert gate.refuse("/v1/rerank") is False
    off = Gate(0)
    assert not any(off.refuse("/v1/rerank") for _ in range(1000))
    with pytest.raises(ValueError, match=">= 0"):
        Gate(-1)


def test_a_bulkhead_path_holds_at_most_half_the_slots_and_leaves_the_rest_to_rerank() -> None:
    """Issue #45 finding 7: four callers flooding /v1/rerank/documents (1 MiB bodies; texts mode refused only once
    the body is read) took every slot of SEMDUP_MAX_IN_FLIGHT 4, and /v1/rerank answered 503."""
    docs = "/v1/rerank/documents"
    gate = Gate(4, bulkhead={docs})
    assert [gate.refuse(docs) for _ in range(4)] == [False, False, True, True]  # two of four slots at most
    assert [gate.refuse("/v1/rerank") for _ in range(3)] == [False, False, True]  # the other two are rerank's
    gate.leave(docs)
    assert gate.refuse(docs) is False and gate.in_bulkhead == 2
    assert Gate(1, bulkhead={docs}).refuse(docs) is False  # at least one slot


def test_max_in_flight_setting() -> None:
    os_settings = OpenSearchSettings(url="http://127.0.0.1:9")
    env = {
        "SEMDUP_BUNDLE": "b",
        "SEMDUP_INDEX": "travel",
        "SEMDUP_API_KEY": KEY,
        "SEMDUP_OPENSEARCH_URL": os_settings.url,
    }
    default = ServiceSettings.model_fields["max_in_flight"].default
    assert load_settings(env=env).service_settings().max_in_flight == default > 0
    assert load_settings(env={**env, "SEMDUP_MAX_IN_FLIGHT": "0"}).service_settings().max_in_flight == 0
    with pytest.raises(ConfigError, match="SEMDUP_MAX_IN_FLIGHT"):
        service_settings({"bundle": "b", "index": "t", "api_key": KEY, "max_in_flight": -1}, os_settings)


class DownReranker(BlockingReranker):
    """Every rank finds the cluster gone (a node lost before its replicas took over, the client's one node down)."""

    def rank(self, post: Any, **kw: Any) -> list[Any]:
        raise OpenSearchUnavailable("OpenSearch did not answer at http://127.0.0.1:9")


def test_the_opensearch_down_503_says_when_to_retry_and_not_where_the_cluster_is() -> None:
    from semdup.service.errors import UNAVAILABLE_RETRY_AFTER_S

    client = TestClient(create_app(settings(), reranker=DownReranker()))  # type: ignore[arg-type]
    r = client.post("/v1/rerank", headers={"X-API-Key": KEY}, json={"title": "a visa for Chile", "k": 5})
    assert r.status_code == 503 and r.headers["Retry-After"] == str(UNAVAILABLE_RETRY_AFTER_S), r.text
    assert r.json()["error"]["type"] == "OpenSearchUnavailable" and "127.0.0.1" not in r.text
