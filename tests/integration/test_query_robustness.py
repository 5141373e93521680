"""Ordinary posts with thousands of analysed terms (CJK, lists, emoji) are answered, not a 500 (issue: a 1,300-
character Japanese post made more than 1,024 clauses). Real OpenSearch, the real bundle path."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.reranker import Reranker, RerankerSettings

KEY = "k-1-robustness-0c9e4b1a7d2f"
LONG_POSTS = {
    "japanese": "日本語の長い質問です。東京から京都までの新幹線の切符はどこで買えますか。" * 40,  # ~1,400 chars
    "comma-list": ",".join(f"ubuntu{i}" for i in range(1800)),
    "emoji": "😀🙂🎉👍" * 400,
}


@pytest.mark.parametrize("name", sorted(LONG_POSTS))
def test_rerank_answers_posts_with_thousands_of_terms(served: tuple[Bundle, str], opensearch_client, name: str):
    bundle, index = served
    rr = Reranker(bundle, opensearch_client, index, RerankerSettings(templates=("bm25", "lmj")))
    got = rr.rank(Post("q", "a question", LONG_POSTS[name]), k=10)
    assert isinstance(got, list) and len(got) <= 10


def test_the_service_answers_them_with_200(served: tuple[Bundle, str], tiny_bundle: Path, opensearch_url: str) -> None:
    _, index = served
    settings = service_settings(
        {"bundle": str(tiny_bundle), "index": index, "api_key": KEY, "max_text_chars": 20_000},
        OpenSearchSettings(url=opensearch_url),
    )
    client = TestClient(create_app(settings))
    for name, body in LONG_POSTS.items():
        r = client.post("/v1/rerank", json={"title": "help", "body": body, "k": 5}, headers={"X-API-Key": KEY})
        assert r.status_code == 200, (name, r.text[:300])
        assert "candidates" in r.json()


def test_a_markup_only_post_is_reported_for_parking_not_indexed_as_a_zero_vector(
    served: tuple[Bundle, str], opensearch_client
) -> None:
    from semdup.indexer.batch_writer import index_batch

    bundle, index = served
    result = index_batch(opensearch_client, index, [{"id": "blank-1", "title": " ", "body": "<p> </p>"}], bundle)
    assert result.written == 0 and [f.id for f in result.failed] == ["blank-1"]
    assert "no visible text" in result.failed[0].reason and result.failed[0].type == "PostError"
    assert not opensearch_client.exists(index=index, id="blank-1")
