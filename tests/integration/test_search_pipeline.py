"""semdup inside the site's own ``_search``, on real parts: OpenSearch 2.19.1 with k-NN, ml-commons and
neural-search (the dev stack's ``--ml`` node, from Maven Central), a real ``semdup serve``, the ``semdup pipeline``
command as an operator runs it.

* a plain ``GET <index>/_search`` through the default pipeline ranks Travel queries as semdup's one-hop answer does
  (its query run directly), sharing most of its top 10 with ``/v1/rerank``;
* ``create`` twice is the same state, ``remove`` undoes every step (cluster settings included);
* a wrong key is refused (the search runs as the site sent it, or fails with ``--on-failure error``);
* ml-commons never shows the key (``GET _plugins/_ml/connectors/<id>``);
* with the service stopped, the search still answers, in the site's own order, within 2 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from indexer_stack import travel_bundle_dir, travel_posts
from local_services import throwaway
from review_stack import semdup_serve, serve_env
from served_index import build_index

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.opensearch_io.boundary import site_searches
from semdup.opensearch_io.clients import connect
from semdup.search_pipeline.check import rewritten_ids
from semdup.search_pipeline.cluster_settings import PRIVATE_IP, TRUSTED

pytestmark = [pytest.mark.opensearch, pytest.mark.slow]

KEY = "pipeline-key-4b1d-9a7e-0c3f5e2a"
OTHER = "other-key-77a0-41c2-9d0e-2b6a81c4"
BACK_END = "backend-key-3f9a-41d2-8c7e-5b0a1c2d"  # search|ingest: texts mode of /v1/rerank/documents needs ingest


@pytest.fixture(scope="module")
def ml_client() -> Iterator[Any]:
    """A node with ml-commons: ``$SEMDUP_TEST_ML_OPENSEARCH_URL``, else the dev stack's ``--ml`` node started here."""
    url = os.environ.get("SEMDUP_TEST_ML_OPENSEARCH_URL")
    if url:
        yield connect(OpenSearchSettings(url=url, timeout=60))
        return
    from semdup.devstack.local_opensearch import LocalOpenSearch
    from semdup.devstack.ml_plugins import ensure_ml_installed, ml_cache_dir

    ensure_ml_installed()
    with throwaway(LocalOpenSearch, "semdup-test-ml-opensearch-", timeout=300, cache_dir=ml_cache_dir()) as node:
        yield connect(OpenSearchSettings(url=node.url, timeout=60))


def _ml_settings(client: Any) -> dict[str, Any]:
    """The persistent ml-commons connector settings (what create may change and remove must restore)."""
    got = client.cluster.get_settings(params={"flat_settings": "true"})["persistent"]
    return {k: v for k, v in got.items() if k.startswith(TRUSTED) or k == PRIVATE_IP}


@pytest.fixture(scope="module")
def initial(ml_client: Any) -> dict[str, Any]:
    """The cluster's connector settings before this module's first create."""
    return _ml_settings(ml_client)


@pytest.fixture(scope="module")
def travel(ml_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, list[Post]]]:
    """(bundle, index, posts): 400 Travel posts indexed by the workers' writer, with k-NN."""
    bundle_dir = travel_bundle_dir(tmp_path_factory)
    posts = travel_posts()[:400]
    index = f"semdup-test-pipeline-{uuid.uuid4().hex[:8]}"
    build_index(ml_client, index, Bundle.load(bundle_dir), posts)
    yield bundle_dir, index, posts
    ml_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def service(ml_client: Any, travel: tuple[Path, str, list[Post]], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[str]:  # fmt: skip
    bundle_dir, index, _ = travel
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    keys = f"{KEY}:{index},{BACK_END}:{index}:search|ingest"
    with semdup_serve(serve_env(_url(ml_client), bundle_dir, index, keys), log) as served:
        yield served


def _semdup(*args: str, key: str = KEY, opensearch: Any = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SEMDUP_API_KEY=key)
    if opensearch is not None:
        env["SEMDUP_OPENSEARCH_URL"] = _url(opensearch)
    return subprocess.run([sys.executable, "-m", "semdup", "pipeline", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip


def _site_search(post: Post, size: int = 10) -> dict[str, Any]:
    """What a site sends for the duplicates of one of its posts: its title and body, the post itself left out."""
    return {"size": size, "_source": False, "query": {"bool": {
        "should": [{"match": {"title": post.title}}, {"match": {"body": post.body}}],
        "must_not": [{"ids": {"values": [post.id]}}]}}}


def _rerank(service: str, index: str, post: Post, k: int = 10) -> list[str]:
    r = httpx.post(f"{service}/v1/rerank", headers={"X-API-Key": KEY}, timeout=30,
                   json={"title": post.title, "body": post.body, "k": k, "index": index, "exclude_id": post.id})
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["candidates"]]


def _ids(ml_client: Any, index: str, body: dict[str, Any], **params: str) -> list[str]:
    return [h["_id"] for h in ml_client.search(index=index, body=body, params=params)["hits"]["hits"]]


def test_the_sites_own_search_ranks_as_rerank_and_create_is_idempotent(
    ml_client: Any, initial: dict[str, Any], travel: tuple[Path, str, list[Post]], service: str
) -> None:
    _, index, posts = travel
    # a loaded CI machine can take over a second for a rerank: a generous timeout, so what is compared is the
    # ranking, not the fallback (the stopped-service test below checks the fallback and its bound)
    create = ("create", "--index", index, "--service-url", service, "--default", "--timeout", "20", "--json")
    made = _semdup(*create, opensearch=ml_client)
    assert made.returncode == 0, made.stderr
    state = json.loads(made.stdout)
    assert state["model_state"] == "DEPLOYED" and state["pipeline"] and state["default_of"] == [index]
    assert _ml_settings(ml_client).get(PRIVATE_IP) == "true"  # the service is on loopback
    again = _semdup(*create, opensearch=ml_client)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["actions"] == [] and {k: second[k] for k in ("connector_id", "model_id")} == {
        k: state[k] for k in ("connector_id", "model_id")}  # run twice: the same state, nothing done

    queries = [p for p in posts[::37] if p.title and p.body][:8]
    site = site_searches(connect(OpenSearchSettings(url=_url(ml_client), timeout=60)))  # searches as the site does
    shared = []
    for post in queries:
        plain = _ids(site, index, _site_search(post))  # the index's default pipeline: no parameter at all
        assert plain == rewritten_ids(ml_client, index, _site_search(post), service, KEY), post.id  # semdup's query
        shared.append(len(set(plain) & set(_rerank(service, index, post))))
    print(f"\none-hop top 10 shared with /v1/rerank's: {shared}")
    assert sum(shared) >= 0.8 * 10 * len(queries), shared  # the same fusion, lexnorm / the best lexical score
    hits = site.search(index=index, body=_site_search(queries[0], 3))["hits"]["hits"]
    scores = [h["_score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and all(1 <= s < 10 for s in scores)  # semdup's fused + shift

    checked = _semdup("check", "--index", index, "--title", queries[1].title, opensearch=ml_client)
    assert checked.returncode == 0 and "equal" in checked.stdout, checked.stdout + checked.stderr


def test_the_connector_never_shows_the_key(ml_client: Any, travel: tuple[Path, str, list[Post]], service: str
                                           ) -> None:  # fmt: skip
    _, index, _ = travel
    made = _semdup("create", "--index", index, "--service-url", service, "--timeout", "20", "--json",
                   opensearch=ml_client)  # fmt: skip
    assert made.returncode == 0, made.stderr
    connector_id = json.loads(made.stdout)["connector_id"]
    shown = ml_client.transport.perform_request("GET", f"/_plugins/_ml/connectors/{connector_id}")
    text = json.dumps(shown)
    assert KEY not in text and shown["actions"][0]["headers"]["Authorization"] == "Bearer ${credential.key}"
    assert KEY not in made.stdout + made.stderr


def test_a_wrong_key_is_refused(ml_client: Any, travel: tuple[Path, str, list[Post]], service: str) -> None:
    _, index, posts = travel
    post = next(p for p in posts[5:] if p.title and p.body)
    original = _ids(ml_client, index, _site_search(post), search_pipeline="_none")
    name = f"semdup-wrong-{uuid.uuid4().hex[:6]}"
    for on_failure in ("original", "error"):
        made = _semdup("create", "--index", index, "--service-url", service, "--name", name, "--on-failure",
                       on_failure, "--replace-key", "--timeout", "20", key=OTHER, opensearch=ml_client)  # fmt: skip
        assert made.returncode == 0, made.stderr
        if on_failure == "original":  # refused by the service: the search runs as the site sent it
            assert _ids(ml_client, index, _site_search(post), search_pipeline=name) == original
        else:
            from semdup.core.errors import OpenSearchRefused

            with pytest.raises(OpenSearchRefused, match="401"):
                _ids(ml_client, index, _site_search(post), search_pipeline=name)
    assert httpx.post(f"{service}/v1/search/rewrite", json={"search": _site_search(post)}).status_code == 401
    bearer = httpx.post(f"{service}/v1/search/rewrite", json={"search": _site_search(post), "index": index},
                        headers={"Authorization": f"Bearer {KEY}"})  # fmt: skip
    assert bearer.status_code == 200 and bearer.json()["ranked"] > 0
    stray = httpx.post(f"{service}/v1/search/rewrite?index=other", json={"search": _site_search(post)},
                       headers={"X-API-Key": KEY})  # fmt: skip
    assert stray.status_code == 422 and "index" in stray.text  # an unknown query parameter is refused, not ignored
    assert _semdup("remove", "--index", index, "--name", name, opensearch=ml_client).returncode == 0


def test_remove_undoes_every_step(
    ml_client: Any, initial: dict[str, Any], travel: tuple[Path, str, list[Post]], service: str
) -> None:
    _, index, _ = travel
    assert _ml_settings(ml_client) != initial  # the earlier tests' create changed them
    assert _semdup("remove", "--index", index, opensearch=ml_client).returncode == 0  # from the earlier tests
    assert _ml_settings(ml_client) == initial
    gone = _semdup("status", "--index", index, "--json", opensearch=ml_client)
    state = json.loads(gone.stdout)
    assert (state["connector_id"], state["model_id"], state["pipeline"], state["default_of"]) == (None, None, False,
                                                                                                 [])  # fmt: skip
    again = _semdup("remove", "--index", index, "--json", opensearch=ml_client)
    assert json.loads(again.stdout)["actions"] == []


def test_the_search_answers_within_2_s_in_its_own_order_when_the_service_is_stopped(
    ml_client: Any, travel: tuple[Path, str, list[Post]], tmp_path: Path
) -> None:
    bundle_dir, index, posts = travel
    post = next(p for p in posts[11:] if p.title and p.body)
    original = _ids(ml_client, index, _site_search(post), search_pipeline="_none")
    with semdup_serve(serve_env(_url(ml_client), bundle_dir, index, f"{KEY}:{index}"), tmp_path / "s.log") as url:
        name = f"semdup-stop-{uuid.uuid4().hex[:6]}"
        assert _semdup("create", "--index", index, "--service-url", url, "--name", name, "--timeout", "1",
                       opensearch=ml_client).returncode == 0  # fmt: skip
        _rerank(url, index, post)  # warm: the first rerank of a fresh service can take over a second here
        assert _ids(ml_client, index, _site_search(post), search_pipeline=name) == rewritten_ids(
            ml_client, index, _site_search(post), url, KEY)
    t0 = time.perf_counter()  # the service is stopped now: its port refuses
    after = _ids(ml_client, index, _site_search(post), search_pipeline=name)
    assert time.perf_counter() - t0 < 2.0 and after == original
    assert _semdup("remove", "--index", index, "--name", name, opensearch=ml_client).returncode == 0


def _url(client: Any) -> str:
    h = client.transport.hosts[0]
    return f"http://{h['host']}:{h['port']}"


def test_the_cohere_shaped_endpoint_scores_every_document(
    ml_client: Any, travel: tuple[Path, str, list[Post]], service: str
) -> None:
    """``/v1/rerank/documents``: post ids scored as /v1/rerank scores them (restricted to those posts), texts
    encoded here; one result per document, best first; an id the index does not hold below all."""
    _, index, posts = travel
    post = next(p for p in posts[20:] if p.title and p.body)
    head = {"Authorization": f"Bearer {KEY}"}
    ids = [p.id for p in posts[30:36]]
    r = httpx.post(f"{service}/v1/rerank/documents", headers=head, timeout=60,
                   json={"query": post.title, "documents": [*ids, "no-such-post"], "documents_are": "ids",
                         "index": index})  # fmt: skip
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert sorted(x["index"] for x in results) == list(range(7)) and results[-1]["index"] == 6
    assert [x["relevance_score"] for x in results] == sorted((x["relevance_score"] for x in results), reverse=True)
    # the reranker's fusion restricted to those posts (lexnorm's min-max over them), as the service ranks them
    from semdup.reranker import Reranker

    bundle_dir = travel[0]
    ranked = Reranker(Bundle.load(bundle_dir), ml_client, index).rank(Post("_q", post.title, ""), k=10,
                                                                       restrict_ids=ids)  # fmt: skip
    assert [c.id for c in ranked] == [ids[x["index"]] for x in results[:-1]]
    assert [x["relevance_score"] for x in results[:-1]] == pytest.approx([c.score for c in ranked], rel=1e-8)
    texts = httpx.post(f"{service}/v1/rerank/documents", headers={"Authorization": f"Bearer {BACK_END}"}, timeout=60,
                       json={"query": post.title, "documents": [post.body, posts[0].body], "top_n": 1})
    assert texts.status_code == 200 and len(texts.json()["results"]) == 1
    assert texts.json()["results"][0]["index"] == 0  # the post's own body ranks above another's
