"""An empty rerank answer is never silent: a reason in the 200, or a 409 when the site's posts are not encoded yet."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.core.settings import OpenSearchSettings
from semdup.reranker.reranker import NothingIndexed
from semdup.service.errors import error_status

KEY = "key-5b1e90ad-7d2f0c9e4b1a"


class EmptyReranker:
    """Finds nothing; says why (or raises, as the real one does for a site index nothing was encoded from)."""

    version = "hybrid-minilm-0123abcd"
    threshold = None

    def __init__(self, why: str | Exception) -> None:
        self.why = why

    def rank(self, post: Any, **kw: Any) -> list[Any]:
        return []

    def empty_reason(self, index: str | None = None) -> str:
        if isinstance(self.why, Exception):
            raise self.why
        return self.why

    def with_settings(self, **kw: Any) -> EmptyReranker:
        return self


def _client(why: str | Exception) -> TestClient:
    settings = service_settings(
        {"bundle": "b", "index": "site-posts", "api_key": KEY}, OpenSearchSettings(url="http://127.0.0.1:9")
    )
    return TestClient(create_app(settings, reranker=EmptyReranker(why)))  # type: ignore[arg-type]


def test_an_empty_answer_carries_its_reason() -> None:
    r = _client("none of the 1000 indexed posts matched the query's words").post(
        "/v1/rerank", json={"title": "Visa for Qatar?", "body": ""}, headers={"X-API-Key": KEY}
    )
    assert r.status_code == 200, r.text
    assert r.json()["candidates"] == [] and "none of the 1000 indexed posts" in r.json()["reason"]


def test_a_site_index_with_nothing_encoded_is_a_409_that_says_to_backfill() -> None:
    why = NothingIndexed("index 'site-posts' holds 1000 posts but semdup has encoded none of them yet; run backfill")
    assert error_status(why) == 409
    r = _client(why).post("/v1/rerank", json={"title": "Visa for Qatar?", "body": ""}, headers={"X-API-Key": KEY})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["type"] == "NothingIndexed" and "encoded none" in r.json()["error"]["message"]
