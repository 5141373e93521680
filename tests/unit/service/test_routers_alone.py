"""Each feature router of the HTTP service works on its own: a bare FastAPI app that includes one router and sets
the ``app.state`` it reads (no app factory, no other router, no middleware), as the composition root wires them."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from jobs_store import JobsStore, RecordingBroker
from settings_tree import service_settings

from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.core.task_names import INDEX_POSTS
from semdup.service.auth_throttle import FailureThrottle
from semdup.service.routers import ingest, probes, rerank
from semdup.service.routers.access import AuthError

KEY = "key-router-7c1d-7d2f0c9e4b1a"
OS = OpenSearchSettings(url="http://127.0.0.1:9")
THROTTLE = FailureThrottle(None)  # what a router alone needs in app.state besides the settings


class FakeReranker:
    version = "bow-cnn-0123abcd"
    threshold = 0.5
    client = JobsStore()  # the ingest router records its jobs through the reranker's client

    def rank(self, post: Any, k: int, exclude_id: Any, index: str) -> list[Any]:
        found = {"id": "87", "score": 0.9, "components": {}, "probability": None, "is_duplicate": True}
        return [SimpleNamespace(to_json=lambda: {**found, "complete": True, "sources": ["bm25"]})]

    def target(self, index: str) -> str:
        return index + ".semdup-companion"


def _app(router: Any, **state: Any) -> FastAPI:
    app = FastAPI()
    for name, value in state.items():
        setattr(app.state, name, value)
    app.include_router(router)
    return app


def test_the_rerank_router_alone() -> None:
    settings = service_settings({"bundle": "b", "index": "travel", "api_key": KEY}, OS)
    client = TestClient(_app(rerank.router(settings), settings=settings, reranker=FakeReranker(), throttle=THROTTLE))
    r = client.post("/v1/rerank", json={"title": "Visa on arrival?", "k": 1}, headers={"X-API-Key": KEY})
    assert r.status_code == 200, r.text
    assert r.json()["index"] == "travel" and r.json()["candidates"][0]["id"] == "87"
    with pytest.raises(AuthError):  # the app factory turns it into a 401; alone, the router raises it
        client.post("/v1/rerank", json={"title": "Visa?"}, headers={"X-API-Key": "wrong"})


def test_the_ingest_router_alone() -> None:
    broker = RecordingBroker()
    settings = service_settings(
        {"bundle": "b", "index": "travel", "api_keys": f"{KEY}:*:ingest"},
        OS,
        broker=BrokerSettings("redis://127.0.0.1:9/0"),
    )
    app = _app(ingest.router(settings), settings=settings, reranker=FakeReranker(), broker=broker, throttle=THROTTLE)
    r = TestClient(app).post("/v1/posts", json={"posts": [{"id": "1", "title": "Visa?"}]}, headers={"X-API-Key": KEY})
    assert r.status_code == 202 and r.json()["enqueued"] == 1, r.text
    post = {"id": "1", "title": "Visa?", "body": ""}
    assert broker.sent == [(INDEX_POSTS, ["travel", [post], FakeReranker.version])]


def test_the_probes_router_alone() -> None:
    from prometheus_client import CollectorRegistry

    settings = service_settings({"bundle": "b", "index": "travel", "api_keys": f"{KEY}:*:ops"}, OS)
    state = {"reranker": FakeReranker(), "metrics": SimpleNamespace(registry=CollectorRegistry())}
    app = _app(probes.router, probes=ThreadPoolExecutor(1), settings=settings, throttle=THROTTLE, **state)
    client = TestClient(app)
    assert client.get("/healthz").json() == {"status": "ok", "model": FakeReranker.version}
    assert client.get("/metrics", headers={"X-API-Key": KEY}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200  # Prometheus's way
    with pytest.raises(AuthError):  # the app factory turns it into a 401
        client.get("/metrics")


def test_texts_mode_of_the_documents_endpoint_needs_the_ingest_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue #45: texts mode encodes every document (100 texts of 9 kB: 3.9 s of CPU), so a ``search`` key, the one
    that may sit in a browser, may not ask for it; with a key that also holds ``ingest`` it is scored."""
    from semdup.service.routers import pipeline
    from semdup.service.routers.access import ScopeError

    back_end = "key-backend-3f9a-41d2-8c7e-5b0a"
    keys = f"{KEY}:travel,{back_end}:travel:search|ingest"
    settings = service_settings({"bundle": "b", "index": "travel", "api_keys": keys}, OS)
    scored: list[int] = []

    class Scorer:
        def __init__(self, bundle: Any) -> None: ...

        def score(self, query: Any, posts: list[Any]) -> Any:
            scored.append(len(posts))
            return SimpleNamespace(tolist=lambda: [0.5] * len(posts))

    indices = SimpleNamespace(resolve=lambda name, _settings: SimpleNamespace(name=name))  # the index is served
    rr = SimpleNamespace(bundle=None, fusion={"alpha": 0.5, "beta_title": 0.1}, version="bow-cnn-0123abcd",
                         indices=indices, settings=None)  # fmt: skip
    client = TestClient(_app(pipeline.router(settings), settings=settings, reranker=rr, throttle=THROTTLE))
    texts = {"query": "Visa on arrival?", "documents": ["a" * 9000] * 3}
    monkeypatch.setattr("semdup.bundle.scorer.BundleScorer", Scorer)
    with pytest.raises(ScopeError, match="ingest scope"):  # the app factory answers it 403
        client.post("/v1/rerank/documents", json=texts, headers={"X-API-Key": KEY})
    with pytest.raises(ScopeError):  # as a bearer token (what a connector sends) too
        client.post("/v1/rerank/documents", json=texts, headers={"Authorization": f"Bearer {KEY}"})
    assert scored == []  # refused before anything was encoded
    r = client.post("/v1/rerank/documents", json=texts, headers={"Authorization": f"Bearer {back_end}"})
    assert r.status_code == 200 and scored == [3], r.text
