"""``/v1/similar`` and :class:`TitleSearch` with a fake cluster: one encoding and one ``_msearch/template`` per call,
the BM25 and k-NN bodies, the fusion's order, titles, access and bad input. The fake computes the components script's
field in numpy; the real cluster: tests/integration/test_similar_service.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.core.errors import PostError, SearchIndexError
from semdup.core.settings import OpenSearchSettings
from semdup.index_format.packed_fields import PackedTerms
from semdup.index_format.schema import CandidateFields
from semdup.reranker.encoding import QueryEncoder
from semdup.reranker.index import ResolvedIndex
from semdup.reranker.reranker import ModelMismatch, Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.similar import MAX_TITLE_CHARS, SIMILAR_FUSION, TitleSearch, title_query
from semdup.service.auth_throttle import FailureThrottle
from semdup.service.routers import similar as similar_router
from semdup.service.routers.access import AuthError

OS = OpenSearchSettings(url="http://127.0.0.1:9")
KEY, COOK_KEY, REVIEW_ONLY = "key-sim-4f2a-7d2f0c9e4b1a", "key-cook-77b0-7d2f0c9e4b1a", "key-rev-0c3d-7d2f0c9e4b1a"
VERSION = "hybrid-minilm-0123abcd"


def _unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


QUERY = _unit(1.0, 0.0, 0.0)
# post id -> (title, dense vector); "near" is closest to the query's title vector, "far" least
POSTS = {
    "near": ("Visa on arrival", _unit(1.0, 0.1, 0.0)),
    "mid": ("Visa rules", _unit(1.0, 1.0, 0.0)),
    "far": ("Cheap trains", _unit(0.0, 0.0, 1.0)),
}


def _hit(doc_id: str, score: float, params: dict[str, Any], model: str = VERSION) -> dict[str, Any]:
    """A hit as the cluster answers it: the components script's field (every post holds the one term 7 with weight
    1, and its title vector is its dense vector)."""
    title, vector = POSTS[doc_id]
    cos = float(np.asarray(params["qv"]) @ vector)
    same = [1.0] if model == params["model"] else [0.0, model]
    return {"_id": doc_id, "_score": score, "_source": {"title": title}, "fields": {"semdup": [1.0, cos, cos, *same]}}


class FakeClient:
    def __init__(self, knn: bool = True, model: str = VERSION) -> None:
        self.calls: list[list[dict[str, Any]]] = []
        self.model, self.knn = model, knn
        vector = {"type": "knn_vector", "dimension": 3} if knn else {"type": "float"}
        mapping = {"properties": {"semdup": {"properties": {"vector": vector}}}}
        self.indices = SimpleNamespace(get_mapping=lambda index: {index: {"mappings": mapping}})

    def msearch(self, body: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(body)
        out = []
        for head, line in zip(body[::2], body[1::2], strict=True):
            assert head == {"index": "travel"}
            query = line
            script = query["script_fields"]["semdup"]["script"]["params"]
            hits = [_hit("far", 9.0, script, self.model), _hit("mid", 5.0, script, self.model)]
            if "knn" in query["query"]:  # rescored with BM25 on the title: far matches nothing
                hits = [_hit("mid", 5.0, script, self.model), _hit("near", 0.0, script, self.model)]
            out.append({"hits": {"hits": hits}})
        return {"responses": out}


class FakeBundle:
    dimension = 3

    def __init__(self) -> None:
        self.encoded: list[Any] = []

    def encode_query(self, post: Any) -> tuple[np.ndarray, PackedTerms]:
        self.encoded.append(post)
        return QUERY, PackedTerms(np.asarray([1.0], dtype=np.float32), ids=np.asarray([7], dtype=np.uint32))


class FakeIndices:
    """Resolves like IndexResolver: k-NN where the mapping has the vector and the settings do not turn it off."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def resolve(self, name: str, settings: RerankerSettings) -> ResolvedIndex:
        if name == "missing":
            raise SearchIndexError("index 'missing' does not exist")
        return ResolvedIndex(name, name, CandidateFields(knn=self.client.knn and settings.knn is not False))


class FakeReranker:
    version = VERSION
    index = "travel"
    check_models = Reranker.check_models

    def __init__(self, knn: bool | None = None, client: FakeClient | None = None) -> None:
        self.client = client or FakeClient()
        self.bundle = FakeBundle()
        self.settings = RerankerSettings(knn=knn)
        self.indices = FakeIndices(self.client)
        self.encoder = QueryEncoder(self.bundle)

    def target(self, index: str) -> str:
        return self.indices.resolve(index, self.settings).target


def test_one_encoding_and_one_msearch_with_bm25_on_the_title_and_knn_on_its_vector() -> None:
    rr = FakeReranker()
    found = TitleSearch(rr).search("  Visa on arrival?  ", "travel", size=3)
    assert [p.id for p in found] == ["near", "mid", "far"]  # by the title's cosine with each post, not BM25
    assert [p.title for p in found] == ["Visa on arrival", "Visa rules", "Cheap trains"]
    assert found[0].sources == ("knn",) and set(found[1].sources) == {"bm25", "knn"}
    assert len(rr.bundle.encoded) == 1 and rr.bundle.encoded[0].body == ""
    (call,) = rr.client.calls
    bm25, knn = call[1], call[3]
    assert bm25["query"]["bool"]["must"] == [{"match": {"title": {"query": "Visa on arrival?"}}}]
    assert bm25["_source"] == ["title"] and "docvalue_fields" not in bm25  # no packed fields cross the wire
    assert knn["query"]["knn"]["semdup.vector"]["vector"].tolist() == pytest.approx(QUERY.tolist())
    assert knn["_source"] == ["title"] and knn["rescore"]["query"]["rescore_query"] == bm25["query"]["bool"]["must"][0]
    script = bm25["script_fields"]["semdup"]["script"]["params"]
    assert script["qv"].tolist() == script["qt"].tolist() == pytest.approx(QUERY.tolist())  # the title is the query


def test_the_scores_are_the_fusion_of_the_title_vector_with_each_post() -> None:
    found = TitleSearch(FakeReranker()).search("Visa on arrival?", "travel", size=3)
    near = POSTS["near"][1]
    # cos_bow is 1 (one shared term, weight 1 on each side); the post's title vector is its dense vector here
    expected = SIMILAR_FUSION["beta_dense"] * float(QUERY @ near) + SIMILAR_FUSION["beta_bow"] * 1.0
    expected += SIMILAR_FUSION["beta_title"] * float(QUERY @ near)
    assert found[0].score == pytest.approx(expected, abs=1e-5)


def test_no_knn_where_the_index_has_no_vector_field_or_the_reranker_turned_it_off() -> None:
    for rr in (FakeReranker(client=FakeClient(knn=False)), FakeReranker(knn=False)):
        found = TitleSearch(rr).search("Visa?", "travel", size=5)
        (call,) = rr.client.calls
        assert len(call) == 2 and "match" in str(call[1])
        assert {p.id for p in found} == {"far", "mid"}


def test_bad_titles_and_sizes_are_refused_before_any_search() -> None:
    rr = FakeReranker()
    search = TitleSearch(rr)
    for title in ("", "   ", "x" * (MAX_TITLE_CHARS + 1)):
        with pytest.raises(PostError):
            search.search(title, "travel")
    with pytest.raises(ValueError):
        search.search("Visa?", "travel", size=0)
    assert rr.client.calls == [] and rr.bundle.encoded == []


def test_posts_of_another_model_are_refused() -> None:
    with pytest.raises(ModelMismatch, match="other-model"):
        TitleSearch(FakeReranker(client=FakeClient(model="other-model"))).search("Visa?", "travel")


def test_title_query_excludes_an_id_and_matches_the_stored_template_shape() -> None:
    body = title_query("visa", 4, exclude_id="87", source=None)
    assert body["size"] == 4 and body["_source"] is False and "docvalue_fields" not in body
    assert body["query"]["bool"]["must_not"] == [{"ids": {"values": ["87"]}}]


def _settings(**values: Any) -> Any:
    config = {
        "bundle": "b",
        "index": "travel",
        "indices": "travel,cooking",
        "api_key": KEY,
        "api_keys": f"{COOK_KEY}:cooking,{REVIEW_ONLY}:travel:review:rev",
        **values,
    }
    return service_settings(config, OS)


def test_the_similar_router_alone() -> None:
    settings = _settings()
    app = FastAPI()
    app.state.settings, app.state.reranker, app.state.throttle = settings, FakeReranker(), FailureThrottle(None)
    app.include_router(similar_router.router(settings))
    client = TestClient(app)
    r = client.get("/v1/similar", params={"title": "Visa on arrival?", "size": 2}, headers={"X-API-Key": KEY})
    assert r.status_code == 200, r.text
    assert r.json()["index"] == "travel" and [p["id"] for p in r.json()["similar"]] == ["near", "mid"]
    assert isinstance(app.state.similar, TitleSearch)  # made on the first call, kept
    with pytest.raises(AuthError):
        client.get("/v1/similar", params={"title": "Visa?"}, headers={"X-API-Key": "wrong"})


def _client() -> TestClient:
    return TestClient(create_app(_settings(), reranker=FakeReranker()))  # type: ignore[arg-type]


def test_through_the_app_answers_and_access() -> None:
    client = _client()
    r = client.get("/v1/similar", params={"title": "Visa on arrival?"}, headers={"X-API-Key": KEY})
    assert r.status_code == 200 and r.json()["model"] == VERSION and len(r.json()["similar"]) == 3
    assert r.json()["similar"][0] == {
        "id": "near",
        "score": pytest.approx(r.json()["similar"][0]["score"]),
        "title": "Visa on arrival",
        "sources": ["knn"],
        "complete": True,
        "url": None,
    }
    assert client.get("/v1/similar", params={"title": "Visa?"}).status_code == 401
    refused = client.get("/v1/similar", params={"title": "Visa?"}, headers={"X-API-Key": REVIEW_ONLY})
    assert refused.status_code == 403 and "no search scope" in refused.json()["error"]["message"]  # a right key
    for index in ("travel", "elsewhere", "*"):  # the cooking key may not search travel; the others are not served
        r = client.get("/v1/similar", params={"title": "Visa?", "index": index}, headers={"X-API-Key": COOK_KEY})
        assert r.status_code == 404 and r.json()["error"]["type"] == "SearchIndexError", r.text
        assert "not one this API key may search" in r.json()["error"]["message"]


def test_through_the_app_bad_input_is_422_and_a_vanished_index_404() -> None:
    client = _client()
    head = {"X-API-Key": KEY}
    for params in (
        {},
        {"title": ""},
        {"title": "   "},
        {"title": "x" * (MAX_TITLE_CHARS + 1)},
        {"title": "Visa?", "size": 0},
        {"title": "Visa?", "size": 51},
        {"title": "Visa?", "size": "many"},
    ):
        r = client.get("/v1/similar", params=params, headers=head)
        assert r.status_code == 422, (params, r.text)
        assert r.json()["error"]["message"]
    settings = _settings(indices="travel,cooking,missing")
    app = create_app(settings, reranker=FakeReranker())  # type: ignore[arg-type]
    r = TestClient(app).get("/v1/similar", params={"title": "Visa?", "index": "missing"}, headers=head)
    assert r.status_code == 404 and "missing" in r.json()["error"]["message"]


def test_each_post_links_to_the_site_and_the_example_page_is_served_with_a_strict_policy() -> None:
    app = create_app(
        _settings(post_url="https://travel.stackexchange.com/questions/{id}?from={index}"), reranker=FakeReranker()
    )  # type: ignore[arg-type]
    client = TestClient(app)
    r = client.get("/v1/similar", params={"title": "Visa?"}, headers={"X-API-Key": KEY})
    assert r.json()["similar"][0]["url"] == "https://travel.stackexchange.com/questions/near?from=travel"
    page = client.get("/examples/ask.html")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"] and '<script src="ask.js">' in page.text
    script = client.get("/examples/ask.js")
    assert "/v1/similar" in script.text and "textContent" in script.text and "innerHTML" not in script.text
    assert client.get("/examples/ask.css").status_code == 200
    assert client.get("/examples/..%2Fsimilar.py").status_code == 404
    assert client.get("/examples/other.html").status_code == 404
