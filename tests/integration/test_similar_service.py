"""``GET /v1/similar`` against a real cluster and a real `semdup serve`, and its example page in a real browser.

The index holds 300 Travel posts and one post whose title, once cleaned, reads as an ``<img onerror=…>`` tag
(written by the indexer's own ``index_batch`` with the indexer tests' untrained BOW-CNN, k-NN mapped). Its scores
mean nothing, so the tests ask what holds for any model: a post's own title finds that post (BM25 on the title
ranks it first among the candidates and the fusion keeps it in the top 10), both candidate paths answer, the
titles are the indexed ones, one encoding and one ``_msearch`` per call, BM25's body is the stored template's,
and the access rules of ``/v1/rerank``. A headless chromium (selenium + chromium-driver) types a title into
``/examples/ask.html`` key by key and sees the similar questions appear, debounced, the tag-like title as text.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from indexer_stack import travel_posts as _travel_posts
from review_stack import headless_chromium, semdup_serve, serve_env
from served_index import build_index

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.reranker.reranker import Reranker
from semdup.reranker.similar import TitleSearch, title_query
from semdup.search_templates import query_text, template_id, template_params

pytestmark = [pytest.mark.opensearch, pytest.mark.slow]

SEARCH_KEY, REVIEW_KEY = "similar-search-5d1e-7d2f0c9e4b1a", "similar-review-a07b-7d2f0c9e4b1a"
TAGGED = Post(
    "tagged-1",
    "Is a &lt;img src=x onerror=&quot;window.__pwned=1&quot;&gt; tag in a visa form dangerous?",
    "<p>My visa form shows it.</p>",
)


@pytest.fixture(scope="module")
def indexed(opensearch_client: Any, bundle: Bundle) -> Iterator[dict[str, Any]]:
    index = f"semdup-test-similar-{uuid.uuid4().hex[:8]}"
    posts = [p for p in _travel_posts()[:300] if p.title.strip()] + [TAGGED]
    build_index(opensearch_client, index, bundle, posts)
    mapping = opensearch_client.indices.get_mapping(index=index)[index]["mappings"]
    assert mapping["properties"]["semdup"]["properties"]["vector"]["type"] == "knn_vector"
    titles = {
        h["_id"]: h["_source"]["title"]
        for h in opensearch_client.search(index=index, body={"size": 400, "_source": ["title"]})["hits"]["hits"]
    }
    yield {"index": index, "posts": posts, "titles": titles}
    opensearch_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def served(indexed: dict[str, Any], opensearch_url: str, bundle_dir: Path, tmp_path_factory: Any) -> Iterator[str]:
    index = indexed["index"]
    keys = f"{SEARCH_KEY}:{index},{REVIEW_KEY}:{index}:review:rev"
    root = tmp_path_factory.mktemp("similar-serve")
    env = serve_env(opensearch_url, bundle_dir, index, keys)
    with semdup_serve(env, root / "serve.log") as base:
        yield base


class CountingClient:
    """The real client, counting the ``_msearch`` calls (a title search's one request)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.msearches = 0

    def msearch(self, **kwargs: Any) -> Any:
        self.msearches += 1
        return self._client.msearch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_posts_own_title_finds_it_with_one_encoding_and_one_msearch(
    opensearch_client: Any, bundle: Bundle, indexed: dict[str, Any]
) -> None:
    counting = CountingClient(opensearch_client)
    search = TitleSearch(Reranker(bundle, counting, indexed["index"]))
    encoded = []
    encode = bundle.encode_query
    try:
        bundle.encode_query = lambda post: (encoded.append(post), encode(post))[1]  # type: ignore[method-assign]
        seen_paths: set[str] = set()
        for post in indexed["posts"][:40:4]:
            cands, _, _ = search.candidates_of(post.title, indexed["index"])
            assert cands.sources[cands.ids[0]][0] == "bm25" and cands.ids[0] == post.id  # BM25's first: itself
            found = search.search(post.title, indexed["index"], size=10)
            assert post.id in [p.id for p in found]
            for p in found:
                assert p.title == indexed["titles"][p.id] and p.complete
                seen_paths.update(p.sources)
        assert seen_paths == {"bm25", "knn"}
        assert counting.msearches == len(encoded) == 20  # 10 titles, twice each: one encoding + one _msearch a call
    finally:
        del bundle.encode_query


def test_the_bm25_body_is_the_stored_title_template(opensearch_client: Any, indexed: dict[str, Any]) -> None:
    text = query_text("Transit visa in Doha")
    rendered = opensearch_client.render_search_template(
        body={"id": template_id("bm25", "title"), "params": template_params(text, size=7, exclude_id="87")}
    )["template_output"]
    ours = title_query(text, 7, exclude_id="87", source=None)
    assert ours["query"] == rendered["query"] and ours["size"] == rendered["size"]


def test_the_service_answers_and_applies_the_rerank_access_rules(served: str, indexed: dict[str, Any]) -> None:
    post = indexed["posts"][10]
    with httpx.Client(base_url=served, timeout=60) as http:
        r = http.get("/v1/similar", params={"title": post.title, "size": 10}, headers={"X-API-Key": SEARCH_KEY})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["index"] == indexed["index"] and post.id in [p["id"] for p in body["similar"]]
        mine = next(p for p in body["similar"] if p["id"] == post.id)
        assert mine["title"] == indexed["titles"][post.id] and "bm25" in mine["sources"]
        assert mine["url"] == f"https://travel.stackexchange.com/questions/{post.id}"
        assert http.get("/v1/similar", params={"title": post.title}).status_code == 401
        assert http.get("/v1/similar", params={"title": "x"}, headers={"X-API-Key": REVIEW_KEY}).status_code == 403
        for params, status in (
            ({"title": post.title, "index": "semdup-nope"}, 404),
            ({"title": post.title, "index": "*"}, 404),
            ({"title": "   "}, 422),
            ({"title": "x" * 301}, 422),
            ({"title": post.title, "size": 0}, 422),
        ):
            r = http.get("/v1/similar", params=params, headers={"X-API-Key": SEARCH_KEY})
            assert r.status_code == status, (params, r.text)
            assert r.json()["error"]["message"]


def test_an_asker_types_a_title_and_sees_similar_questions(
    served: str, indexed: dict[str, Any], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    post = indexed["posts"][25]
    typed = post.title.strip()
    with headless_chromium(tmp_path) as driver:
        driver.get(f"{served}/examples/ask.html")
        driver.find_element(By.ID, "key").send_keys(SEARCH_KEY)
        box = driver.find_element(By.ID, "title")
        for ch in typed:  # key by key, as a person types
            box.send_keys(ch)
        WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.answered") == typed)
        items = driver.find_elements(By.CSS_SELECTOR, "#similar li")
        ids = [li.get_attribute("data-id") for li in items]
        assert 1 <= len(items) <= 5 and post.id in ids, ids
        shown = {li.get_attribute("data-id"): li.find_element(By.CSS_SELECTOR, ".title").text for li in items}
        assert all(shown[i] == indexed["titles"][i] for i in ids)
        calls = int(driver.execute_script("return document.body.dataset.calls"))
        assert 1 <= calls < len(typed)  # debounced: not one call per key
        driver.save_screenshot(str(tmp_path / "ask-similar.png"))

        box.clear()
        box.send_keys("onerror img tag visa form dangerous")
        WebDriverWait(driver, 60).until(
            lambda d: (
                d.execute_script("return document.body.dataset.answered") == "onerror img tag visa form dangerous"
            )
        )
        titles = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#similar li .title")]
        assert indexed["titles"][TAGGED.id] in titles and "<img" in indexed["titles"][TAGGED.id]
        assert driver.execute_script("return window.__pwned") is None
        assert driver.find_elements(By.CSS_SELECTOR, "#similar img") == []
        driver.save_screenshot(str(tmp_path / "ask-tagged-title.png"))
    assert (tmp_path / "ask-similar.png").stat().st_size > 0
