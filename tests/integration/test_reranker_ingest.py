"""HTTP ingest end to end: posts sent to ``POST /v1/posts`` of the service go through the real Redis broker to a
real ``semdup worker``, which writes them into the index; a wrong key (401) and a key of another index (404)
enqueue nothing. The endpoints' validation and scoping in detail: tests/unit/service/test_ingest_endpoints.py."""

# ruff: noqa: F811  (the module-scoped fixtures are imported from conftest)
from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from indexer_stack import all_docs, configure_celery, count, create, wait_until, worker_env
from settings_tree import service_settings

from benchmarks.local_worker import LocalWorker
from semdup.apps.http import create_app
from semdup.bundle.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from semdup.core.task_names import INDEXER_QUEUE
from semdup.reranker import Reranker

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

KEY, OTHER_KEY = "ingest-key-41c7-7d2f0c9e4b1a", "other-key-9e02-7d2f0c9e4b1a"  # the ingest scope
READ_KEY = "read-key-5e18-2c0a9f7d3b6e"  # the search scope only
WAIT_S = 300.0


@pytest.fixture
def worker(tmp_path: Path, opensearch_url: str, redis_url: str, tiny_bundle: Path) -> Iterator[LocalWorker]:
    configure_celery(redis_url)  # the queue emptied of what an interrupted run left
    w = LocalWorker(worker_env(opensearch_url, redis_url, tiny_bundle), tmp_path / "worker.log")
    yield w
    w.stop()


@pytest.fixture
def fresh_index(opensearch_client: Any, served: tuple[Bundle, str]) -> Iterator[str]:
    """An empty index semdup created (``semdup index-posts``'s mapping), for the posts sent over HTTP."""
    bundle, _ = served
    name = f"semdup-test-ingest-{uuid.uuid4().hex[:8]}"
    create(opensearch_client, name, bundle)
    yield name
    opensearch_client.indices.delete(index=name, ignore_unavailable=True)


def test_posts_sent_over_http_are_written_by_a_real_worker(
    served: tuple[Bundle, str],
    fresh_index: str,
    real_posts: list[Post],
    opensearch_client: Any,
    opensearch_url: str,
    redis_url: str,
    tiny_bundle: Path,
    worker: LocalWorker,
) -> None:
    bundle, other = served
    settings = service_settings(
        {
            "bundle": str(tiny_bundle),
            "index": fresh_index,
            "indices": f"{fresh_index},{other}",
            "api_keys": f"{KEY}:{fresh_index}:search|ingest,{OTHER_KEY}:{other}:ingest,{READ_KEY}:{fresh_index}",
        },
        OpenSearchSettings(url=opensearch_url),
        broker=BrokerSettings(url=redis_url),
    )
    app = TestClient(create_app(settings, reranker=Reranker(bundle, opensearch_client, fresh_index)))
    queue = redis.Redis.from_url(redis_url)
    posts = [p for p in real_posts if re.search(r"\w", p.title + p.body)][:70]
    body = {"posts": [p.to_json() for p in posts]}

    assert app.post("/v1/posts", json=body, headers={"X-API-Key": "wrong"}).status_code == 401
    read_only = app.post("/v1/posts", json=body, headers={"X-API-Key": READ_KEY})  # a browser's key never writes
    assert read_only.status_code == 403 and read_only.json()["error"]["type"] == "Forbidden", read_only.text
    refused = app.post("/v1/posts", json={**body, "index": fresh_index}, headers={"X-API-Key": OTHER_KEY})
    assert refused.status_code == 404 and refused.json()["error"]["type"] == "SearchIndexError", refused.text
    assert queue.llen(INDEXER_QUEUE) == 0  # neither reached the broker

    r = app.post("/v1/posts", json=body, headers={"X-API-Key": KEY})
    assert r.status_code == 202, r.text
    assert r.json() == {
        "index": fresh_index,
        "task": "index_posts",
        "model": bundle.version,
        "enqueued": len(posts),
        "tasks": 2,
        "job": r.json()["job"],
    }
    assert queue.llen(INDEXER_QUEUE) == 2  # queued, not yet written: no worker runs
    assert count(opensearch_client, fresh_index, bundle.version) == 0

    worker.start()
    wait_until(lambda: count(opensearch_client, fresh_index, bundle.version) == len(posts), "70 posts", WAIT_S)
    docs = all_docs(opensearch_client, fresh_index)
    assert set(docs) == {p.id for p in posts}
    sample = posts[0]
    assert docs[sample.id]["semdup"]["model"] == bundle.version and docs[sample.id]["post_id"] == sample.id

    gone = [p.id for p in posts[:5]]
    r = app.post("/v1/posts/delete", json={"ids": gone}, headers={"X-API-Key": KEY})
    assert r.status_code == 202 and r.json()["enqueued"] == 5, r.text
    wait_until(lambda: count(opensearch_client, fresh_index, bundle.version) == len(posts) - 5, "5 deletes", WAIT_S)
    assert not set(gone) & set(all_docs(opensearch_client, fresh_index))
    # the service searches what the worker wrote: a post finds itself
    query = {"title": posts[10].title, "body": posts[10].body, "k": 3}
    found = app.post("/v1/rerank", json=query, headers={"X-API-Key": KEY})
    assert found.status_code == 200 and posts[10].id in [c["id"] for c in found.json()["candidates"]], found.text


def test_an_id_the_new_rules_refuse_is_refused_on_write_and_an_old_one_still_deleted(
    served: tuple[Bundle, str],
    fresh_index: str,
    real_posts: list[Post],
    opensearch_client: Any,
    opensearch_url: str,
    redis_url: str,
    tiny_bundle: Path,
    worker: LocalWorker,
) -> None:
    """Issue #34: an id of only zero-width characters was written (202); and ids written before the stricter rules
    (a bidi control, say) got 422 from /v1/posts/delete, so they could not be deleted over HTTP."""
    bundle, _ = served
    settings = service_settings(
        {"bundle": str(tiny_bundle), "index": fresh_index, "api_keys": f"{KEY}:{fresh_index}:ingest"},
        OpenSearchSettings(url=opensearch_url),
        broker=BrokerSettings(url=redis_url),
    )
    app = TestClient(create_app(settings, reranker=Reranker(bundle, opensearch_client, fresh_index)))
    key = {"X-API-Key": KEY}
    invisible = "\u200b\u200c\u200d"
    refused = app.post("/v1/posts", json={"posts": [{"id": invisible, "title": "Visa for Qatar?"}]}, headers=key)
    assert refused.status_code == 422 and "only invisible characters" in refused.json()["error"]["message"]
    post = next(p for p in real_posts if re.search(r"\w", p.title + p.body))
    assert app.post("/v1/posts", json={"posts": [post.to_json()]}, headers=key).status_code == 202
    worker.start()
    wait_until(lambda: count(opensearch_client, fresh_index, bundle.version) == 1, "the post", WAIT_S)
    written = all_docs(opensearch_client, fresh_index)[post.id]
    old = ["p4-\u202e", invisible]  # as a version before the stricter id rules wrote them
    for old_id in old:
        opensearch_client.index(index=fresh_index, id=old_id, body={**written, "post_id": old_id}, refresh=True)
    assert count(opensearch_client, fresh_index, bundle.version) == 3
    r = app.post("/v1/posts/delete", json={"ids": old}, headers=key)
    assert r.status_code == 202 and r.json()["enqueued"] == 2, r.text
    wait_until(lambda: count(opensearch_client, fresh_index, bundle.version) == 1, "the old ids deleted", WAIT_S)
    assert set(all_docs(opensearch_client, fresh_index)) == {post.id}


def test_without_a_broker_ingest_answers_503_and_the_service_stays_ready(
    served: tuple[Bundle, str], opensearch_client: Any, opensearch_url: str, tiny_bundle: Path
) -> None:
    bundle, index = served
    settings = service_settings(
        {"bundle": str(tiny_bundle), "index": index, "api_keys": f"{KEY}:*:ingest"},
        OpenSearchSettings(url=opensearch_url),
    )
    assert settings.ingest is False
    app = TestClient(create_app(settings, reranker=Reranker(bundle, opensearch_client, index)))
    r = app.post("/v1/posts/sync", json={"ids": ["1"]}, headers={"X-API-Key": KEY})
    assert r.status_code == 503 and "SEMDUP_BROKER_URL" in r.json()["error"]["message"], r.text
    ready = app.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True, ready.text


def test_sync_over_http_makes_the_companion_follow_the_site_index(
    served: tuple[Bundle, str],
    real_posts: list[Post],
    opensearch_client: Any,
    opensearch_url: str,
    redis_url: str,
    tiny_bundle: Path,
    worker: LocalWorker,
) -> None:
    """A site's own index (``semdup enable``): the site says which posts changed, the worker re-reads them."""
    from opensearchpy.helpers import bulk

    from semdup.index_format.companion import companion_alias, companion_index_name
    from semdup.site_index.enable import enable_index

    bundle, _ = served
    site = f"semdup-test-site-{uuid.uuid4().hex[:8]}"
    companion = companion_alias(site)
    posts = [p for p in real_posts if re.search(r"\w", p.title + p.body)][:12]
    mapping = {"properties": {"subject": {"type": "text"}, "content": {"type": "text"}}}
    opensearch_client.indices.create(index=site, body={"mappings": mapping})
    try:
        docs = ({"_index": site, "_id": p.id, "_source": {"subject": p.title, "content": p.body}} for p in posts)
        bulk(opensearch_client, docs, refresh=True)
        enable_index(
            opensearch_client,
            site,
            version=bundle.version,
            dimension=bundle.dimension,
            title_field="subject",
            body_field="content",
        )
        settings = service_settings(
            {"bundle": str(tiny_bundle), "index": site, "api_keys": f"{KEY}:*:search|ingest"},
            OpenSearchSettings(url=opensearch_url),
            broker=BrokerSettings(url=redis_url),
        )
        app = TestClient(create_app(settings, reranker=Reranker(bundle, opensearch_client, site)))
        worker.start()
        r = app.post("/v1/posts/sync", json={"ids": [p.id for p in posts]}, headers={"X-API-Key": KEY})
        assert r.status_code == 202 and r.json()["task"] == "sync_posts" and r.json()["enqueued"] == 12, r.text
        wait_until(lambda: count(opensearch_client, companion, bundle.version) == 12, "12 synced posts", WAIT_S)

        edited, deleted = posts[0], posts[1]
        opensearch_client.index(index=site, id=edited.id, body={"subject": "Edited title", "content": "new body"})
        opensearch_client.delete(index=site, id=deleted.id, refresh=True)
        r = app.post("/v1/posts/sync", json={"ids": [edited.id, deleted.id]}, headers={"X-API-Key": KEY})
        assert r.status_code == 202, r.text
        wait_until(lambda: count(opensearch_client, companion, bundle.version) == 11, "the deletion", WAIT_S)
        wait_until(
            lambda: all_docs(opensearch_client, companion).get(edited.id, {}).get("title") == "Edited title",
            "the edit",
            WAIT_S,
        )
    finally:
        opensearch_client.indices.delete(index=site, ignore_unavailable=True)
        opensearch_client.indices.delete(index=companion_index_name(site, bundle.version), ignore_unavailable=True)
