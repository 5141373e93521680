"""The search pipeline keeps the site's restrictions and never calls semdup from semdup (issue #45, the query
rewrite), on real parts: OpenSearch 2.19.1 with ml-commons (the dev stack's ``--ml`` node), a real ``semdup
serve``, ``semdup pipeline create`` as an operator runs it.

* semdup's own searches run without a search pipeline: with semdup's pipeline the index's default, one
  ``/v1/rerank`` makes no rewrite call and ranks as before the pipeline was there; the site's plain ``_search``
  ranks as that ranking made without the pipeline (so ``pipeline check`` compares against it);
* each shape of restriction a site writes (ids inside ``must``, a ``function_score`` whose query holds a
  ``bool.filter``, a ``constant_score`` filter, ``boosting.negative``, nested bools) holds through the pipeline: no
  hit outside what the site's own search allows;
* ``SEMDUP_K_CANDIDATES=1000``: the rewritten query stays within ``indices.query.bool.max_clause_count``;
* hostile bodies sent straight to the endpoints get a 4xx, never a 500, on one kept-alive connection; another
  index searched with this index's pipeline gets its own search; texts mode checks its index.

Run with ``-s`` to see the measured figures (rewrite calls and latency per ``/v1/rerank``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
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

pytestmark = [pytest.mark.opensearch, pytest.mark.slow]

KEY = "restrict-key-5c2e-4f1a-8d3b-9e0a7c6b"
OPS = "restrict-ops-7b9d-42e0-a1c3-5f6e8d2b"


@pytest.fixture(scope="module")
def ml_url() -> Iterator[str]:
    url = os.environ.get("SEMDUP_TEST_ML_OPENSEARCH_URL")
    if url:
        yield url
        return
    from semdup.devstack.local_opensearch import LocalOpenSearch
    from semdup.devstack.ml_plugins import ensure_ml_installed, ml_cache_dir

    ensure_ml_installed()
    with throwaway(LocalOpenSearch, "semdup-test-ml-opensearch-", timeout=300, cache_dir=ml_cache_dir()) as node:
        yield node.url


@pytest.fixture(scope="module")
def own(ml_url: str) -> Any:
    """A client as semdup builds it: its searches never run a search pipeline."""
    return connect(OpenSearchSettings(url=ml_url, timeout=60))


@pytest.fixture(scope="module")
def site(ml_url: str) -> Any:
    """A client as the site's application has it: its searches run the index's default search pipeline."""
    return site_searches(connect(OpenSearchSettings(url=ml_url, timeout=60)))


@pytest.fixture(scope="module")
def travel(own: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, list[Post]]]:
    bundle_dir = travel_bundle_dir(tmp_path_factory)
    posts = travel_posts()[:400]
    index = f"semdup-test-restrict-{uuid.uuid4().hex[:8]}"
    build_index(own, index, Bundle.load(bundle_dir), posts)
    yield bundle_dir, index, posts
    own.indices.delete(index=index, ignore_unavailable=True)


def _env(ml_url: str, travel: tuple[Path, str, list[Post]], **extra: str) -> dict[str, str]:
    bundle_dir, index, _ = travel
    return serve_env(ml_url, bundle_dir, index, f"{KEY}:{index},{OPS}:*:ops", **extra)


@pytest.fixture(scope="module")
def service(ml_url: str, travel: tuple[Path, str, list[Post]], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[str]:  # fmt: skip
    with semdup_serve(_env(ml_url, travel), tmp_path_factory.mktemp("serve") / "serve.log") as served:
        yield served


def _pipeline(ml_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SEMDUP_API_KEY=KEY, SEMDUP_OPENSEARCH_URL=ml_url)
    done = subprocess.run([sys.executable, "-m", "semdup", "pipeline", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _rerank(service: str, index: str, post: Post, k: int = 10) -> list[str]:
    r = httpx.post(f"{service}/v1/rerank", headers={"X-API-Key": KEY}, timeout=60,
                   json={"title": post.title, "body": post.body, "k": k, "index": index, "exclude_id": post.id})
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["candidates"]]


def _rewrites(service: str) -> int:
    """How many /v1/search/rewrite requests the service has answered (its metrics; before issue #45 they were
    labelled ``other``, the only other requests this module's service answers)."""
    text = httpx.get(f"{service}/metrics", headers={"X-API-Key": OPS}, timeout=10).text
    found = re.findall(r'semdup_rerank_requests_total\{path="(?:/v1/search/rewrite|other)",status="[0-9]+"\} '
                       r"([0-9.e+]+)", text)
    return int(sum(float(x) for x in found))


def _site_search(post: Post, size: int = 10, **query: Any) -> dict[str, Any]:
    return {"size": size, "_source": False, "query": query or {"bool": {
        "should": [{"match": {"title": post.title}}, {"match": {"body": post.body}}],
        "must_not": [{"ids": {"values": [post.id]}}]}}}


def _hits(client: Any, index: str, body: dict[str, Any], **params: str) -> list[tuple[str, float]]:
    got = client.search(index=index, body=body, params={"request_timeout": 60, **params})["hits"]["hits"]
    return [(h["_id"], h["_score"]) for h in got]


def test_semdups_own_searches_never_run_the_pipeline(ml_url: str, own: Any, site: Any, service: str,
                                                      travel: tuple[Path, str, list[Post]]) -> None:  # fmt: skip
    _, index, posts = travel
    queries = [p for p in posts[::29] if p.title and p.body][:10]
    for post in queries[:2]:
        _rerank(service, index, post)  # warm
    before = {p.id: _rerank(service, index, p) for p in queries}  # no pipeline anywhere yet
    took_before = []
    for post in queries:
        t0 = time.perf_counter()
        _rerank(service, index, post)
        took_before.append(time.perf_counter() - t0)
    _pipeline(ml_url, "create", "--index", index, "--service-url", service, "--default", "--timeout", "20")
    try:
        calls0 = _rewrites(service)
        took_after, changed = [], 0
        for post in queries:
            t0 = time.perf_counter()
            now = _rerank(service, index, post)
            took_after.append(time.perf_counter() - t0)
            changed += now != before[post.id]
        nested = _rewrites(service) - calls0
        print(f"\n/v1/rerank with semdup's pipeline the index's default: {nested} rewrite calls for {len(queries)} "
              f"reranks, top 10 changed for {changed} of {len(queries)}, p50 "
              f"{statistics.median(took_before) * 1000:.0f} -> {statistics.median(took_after) * 1000:.0f} ms")
        assert nested == 0 and changed == 0
        for post in queries:  # the site's plain _search (the default pipeline): one rewrite, semdup's ranking
            mine = rewritten_ids(own, index, _site_search(post), service, KEY)
            calls0 = _rewrites(service)
            plain = [i for i, _ in _hits(site, index, _site_search(post))]
            assert _rewrites(service) - calls0 == 1 and plain == mine, post.id
        checked = _pipeline(ml_url, "check", "--index", index, "--title", queries[3].title, "--body",
                            queries[3].body)  # fmt: skip
        assert "equal" in checked.stdout
    finally:
        _pipeline(ml_url, "remove", "--index", index)


def _allowed(client: Any, index: str, query: dict[str, Any]) -> set[str]:
    """Every id the site's own search of ``query`` can return (no pipeline)."""
    return {i for i, _ in _hits(client, index, {"size": 10_000, "_source": False, "query": query},
                                search_pipeline="_none")}  # fmt: skip


def test_every_restriction_the_site_writes_holds_through_the_pipeline(
    ml_url: str, own: Any, site: Any, service: str, travel: tuple[Path, str, list[Post]]
) -> None:
    _, index, posts = travel
    name = f"semdup-restrict-{uuid.uuid4().hex[:6]}"
    _pipeline(ml_url, "create", "--index", index, "--service-url", service, "--name", name, "--timeout", "20")
    try:
        post = next(p for p in posts[40:] if p.title and p.body)
        top = _rerank(service, index, post, k=40)
        some = top[::3] + [p.id for p in posts[300:310]]  # some of semdup's candidates and some others
        fewer = some[::2]
        text = {"match": {"title": post.title}}
        ids = {"ids": {"values": some}}
        shapes: dict[str, dict[str, Any]] = {
            "ids inside must": {"bool": {"must": [text, ids]}},
            "terms inside must": {"bool": {"must": [text, {"terms": {"_id": some}}]}},
            "function_score over bool.filter": {"function_score": {
                "query": {"bool": {"must": [text], "filter": [ids]}}, "functions": [{"weight": 2}]}},
            "constant_score filter": {"bool": {"should": [text], "must": [{"constant_score": {"filter": ids}}]}},
            "boosting": {"boosting": {"positive": {"bool": {"must": [text, ids]}},
                                      "negative": {"ids": {"values": fewer}}, "negative_boost": 0.25}},
            "nested bools": {"bool": {"should": [text], "must": [{"bool": {
                "must_not": [{"ids": {"values": fewer}}],
                "filter": [{"bool": {"should": [ids, {"ids": {"values": ["no-such"]}}]}}]}}]}},
        }
        for shape, query in shapes.items():
            # what the site's own search allows, its text aside (semdup replaces how text matches, by design:
            # the text clause as match_all), run by OpenSearch on the site's own structure
            relaxed = json.loads(json.dumps(query).replace(json.dumps(text), json.dumps({"match_all": {}})))
            allowed = _allowed(own, index, relaxed)
            got = _hits(site, index, {"size": 50, "_source": False, "query": query}, search_pipeline=name)
            outside = [i for i, _ in got if i not in allowed]
            print(f"\n{shape}: the site's own search allows {len(allowed)} (text aside; "
                  f"{len(_allowed(own, index, query))} with its text), through the pipeline {len(got)} hits, "
                  f"{len(outside)} outside")
            assert got and not outside, shape
        # boosting's negative demotes semdup's scores as it demoted the site's: x 0.25 on those posts
        plain = dict(_hits(site, index, {"size": 50, "query": shapes["ids inside must"]}, search_pipeline=name))
        boosted = dict(_hits(site, index, {"size": 50, "query": shapes["boosting"]}, search_pipeline=name))
        assert set(plain) == set(boosted)
        for doc, score in boosted.items():
            assert score == pytest.approx(plain[doc] * (0.25 if doc in fewer else 1.0), rel=1e-5), doc
    finally:
        _pipeline(ml_url, "remove", "--index", index, "--name", name)


def test_a_filter_of_5_percent_of_the_posts_fills_the_page_through_the_pipeline(
    ml_url: str, own: Any, site: Any, service: str, travel: tuple[Path, str, list[Post]]
) -> None:
    """Issue #42: the one-hop query finds its candidates within the site's filter, so a filter that semdup's ~200
    unfiltered candidates would mostly miss still gets a full page, every hit allowed, in semdup's order."""
    _, index, posts = travel
    allowed = [p.id for p in posts[::20]]  # 20 of the 400 posts
    name = f"semdup-filter-{uuid.uuid4().hex[:6]}"
    _pipeline(ml_url, "create", "--index", index, "--service-url", service, "--name", name, "--timeout", "20",
              "--on-failure", "error")  # fmt: skip
    try:
        for post in [p for p in posts[7::20] if p.title and p.body][:3]:
            body = _site_search(post, size=15)
            body["query"]["bool"]["filter"] = [{"ids": {"values": allowed}}]
            got = _hits(site, index, body, search_pipeline=name)
            assert len(got) == 15 and all(i in allowed for i, _ in got), got
            assert [i for i, _ in got] == rewritten_ids(own, index, body, service, KEY)  # semdup's ranking
            scores = [s for _, s in got]
            assert scores == sorted(scores, reverse=True) and min(scores) >= 1.0  # fused (+ shift), all complete
    finally:
        _pipeline(ml_url, "remove", "--index", index, "--name", name)


def test_k_candidates_1000_stays_within_max_clause_count(
    ml_url: str, own: Any, site: Any, travel: tuple[Path, str, list[Post]], tmp_path: Path
) -> None:
    bundle_dir = travel[0]
    posts = travel_posts()[:1300]  # enough for ~1,000 candidates per source, so over the 1,024 clauses unbounded
    index = f"semdup-test-k1000-{uuid.uuid4().hex[:8]}"
    build_index(own, index, Bundle.load(bundle_dir), posts, knn=False)  # no k-NN: the candidate rewrite answers
    env = _env(ml_url, (bundle_dir, index, posts), SEMDUP_K_CANDIDATES="1000")
    with semdup_serve(env, tmp_path / "k1000.log") as url:
        name = f"semdup-k1000-{uuid.uuid4().hex[:6]}"
        _pipeline(ml_url, "create", "--index", index, "--service-url", url, "--name", name, "--timeout", "20",
                  "--on-failure", "error")  # fmt: skip
        try:
            post = next(p for p in posts[60:] if p.title and p.body)
            direct = httpx.post(f"{url}/v1/search/rewrite", headers={"X-API-Key": KEY}, timeout=60,
                                json={"index": index, "search": _site_search(post)})  # fmt: skip
            assert direct.status_code == 200, direct.text
            print(f"\nK_CANDIDATES=1000: the rewritten query holds {direct.json()['ranked']} candidates")
            assert direct.json()["ranked"] > 500
            got = [i for i, _ in _hits(site, index, _site_search(post), search_pipeline=name)]
            assert got == _rerank(url, index, post)  # semdup's order, not a maxClauseCount 400
        finally:
            _pipeline(ml_url, "remove", "--index", index, "--name", name)
            own.indices.delete(index=index, ignore_unavailable=True)


def _deep(levels: int, make: Any, leaf: dict[str, Any]) -> dict[str, Any]:
    out = leaf
    for _ in range(levels):
        out = make(out)
    return out


def test_hostile_direct_calls_get_a_4xx_on_a_kept_alive_connection(
    service: str, travel: tuple[Path, str, list[Post]]
) -> None:
    _, index, _ = travel
    text = {"match": {"title": "visa on arrival"}}
    rewrite = f"{service}/v1/search/rewrite"
    bodies: dict[str, tuple[str, Any]] = {
        "a filter 90 bools deep": (rewrite, {"index": index, "search": {"query": {"bool": {"must": [text], "filter": [
            _deep(90, lambda q: {"bool": {"filter": [q]}}, {"ids": {"values": ["1"]}})]}}}}),
        "a must_not of 200 nested constant_score": (rewrite, {"index": index, "search": {"query": {"bool": {
            "must": [text], "must_not": [_deep(200, lambda q: {"constant_score": {"filter": q}},
                                               {"ids": {"values": ["1"]}})]}}}}),
        "query_string.fields 7": (rewrite, {"index": index, "search": {"query": {
            "query_string": {"query": "visa", "fields": 7}}}}),
        "a lone surrogate in the search": (rewrite, json.dumps({"index": index, "search": {"query": {"bool": {
            "must": [text], "filter": [{"term": {"title": "SURROGATE"}}]}}}}).replace("SURROGATE", "\\ud800")),
        "a lone surrogate in a document": (f"{service}/v1/rerank/documents", json.dumps(
            {"index": index, "query": "visa", "documents": ["SURROGATE"]}).replace("SURROGATE", "\\ud800")),
        "a 900 kB single token": (rewrite, {"index": index, "search": {"query": {"match": {"title": "x" * 900_000}}}}),
        "texts mode, a missing index": (f"{service}/v1/rerank/documents",
                                        {"index": "no-such-index", "query": "visa", "documents": ["a visa"]}),
    }
    with httpx.Client(headers={"X-API-Key": KEY, "Content-Type": "application/json"}, timeout=60) as http:
        for what, (url, body) in bodies.items():
            content = body if isinstance(body, str) else json.dumps(body)
            r = http.post(url, content=content.encode("utf-8"))
            print(f"\n{what}: {r.status_code} {r.text[:160]}")
            assert 400 <= r.status_code < 500, (what, r.status_code, r.text[:300])
            assert r.headers.get("connection", "").lower() != "close", what
        assert http.post(f"{service}/v1/rerank/documents", content=json.dumps(
            {"index": "no-such-index", "query": "visa", "documents": ["a visa"]})).status_code == 404
        ok = http.post(rewrite, content=json.dumps({"index": index, "search": {"query": text}}))
        assert ok.status_code == 200 and ok.json()["ranked"] > 0  # the same connection still answers


def test_another_index_searched_with_this_pipeline_gets_its_own_search(
    ml_url: str, own: Any, site: Any, service: str, travel: tuple[Path, str, list[Post]]
) -> None:
    _, index, posts = travel
    other = f"semdup-test-other-{uuid.uuid4().hex[:8]}"
    own.indices.create(index=other, body={"mappings": {"properties": {"title": {"type": "text"},
                                                                      "body": {"type": "text"}}}})  # fmt: skip
    try:
        for p in posts[:200]:  # the same ids as the served index's posts
            own.index(index=other, id=p.id, body={"title": p.title, "body": p.body})
        own.indices.refresh(index=other)
        name = f"semdup-other-{uuid.uuid4().hex[:6]}"
        _pipeline(ml_url, "create", "--index", index, "--service-url", service, "--name", name, "--timeout", "20")
        try:
            post = next(p for p in posts[250:] if p.title and p.body)
            body = _site_search(post, size=20)
            theirs = _hits(own, other, body)  # the other index's own search, no pipeline
            through = _hits(site, other, body, search_pipeline=name)
            assert [i for i, _ in through] == [i for i, _ in theirs]
            assert [s for _, s in through] == pytest.approx([s for _, s in theirs], rel=1e-6)
            ours = [i for i, _ in _hits(site, index, body, search_pipeline=name)]
            assert ours == rewritten_ids(own, index, body, service, KEY)  # its own index: semdup's ranking
        finally:
            _pipeline(ml_url, "remove", "--index", index, "--name", name)
    finally:
        own.indices.delete(index=other, ignore_unavailable=True)
