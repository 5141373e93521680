"""The one-hop rewrite's query, built from a site's search (semdup.reranker.onehop); the node's side of it, the
stored fused script and k-NN's filter, runs on a real OpenSearch in tests/integration/test_onehop.py."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.index_format.schema import CandidateFields
from semdup.reranker import onehop
from semdup.reranker.encoding import QueryEncoding
from semdup.reranker.index import ResolvedIndex
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates.components import FUSED_SCRIPT, FUSED_SCRIPT_ID, components_params, fused_params

RESOLVED = ResolvedIndex("posts", "posts", CandidateFields(knn=True), 1, ("title", "body"))
SEARCH = {"size": 10, "query": {"bool": {
    "should": [{"match": {"title": "Visa for Qatar"}}, {"match": {"body": "how long can I stay"}}],
    "filter": [{"term": {"tenant": "a"}}],
    "must_not": [{"ids": {"values": ["7"]}}]}}}  # fmt: skip


class Encoder:
    """Encodes once the lexical search has been asked (``wait_for``): a rewrite that searched only after the
    encoding would time out here."""

    def __init__(self, wait_for: threading.Event | None = None) -> None:
        self.wait_for = wait_for

    def encode_post(self, post: Post) -> QueryEncoding:
        if self.wait_for is not None:
            assert self.wait_for.wait(5), "the lexical search was not asked while the post was encoded"
        return QueryEncoding(np.asarray([0.6, 0.8, 0.1], dtype=np.float32), None, np.asarray([1, 0, 0], np.float32))


class Client:
    def __init__(self) -> None:
        self.asked = threading.Event()
        self.bodies: list[dict[str, Any]] = []

    def search(self, index: str, body: dict[str, Any], params: Any = None) -> dict[str, Any]:
        self.bodies.append(body)
        self.asked.set()
        return {"hits": {"hits": [{"_id": "3", "_score": 4.5}, {"_id": "1", "_score": 2.0}]}}


class Reranker:
    version = "hybrid-minilm-0123abcd"
    fusion = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.05, "beta_title": 0.25}

    def __init__(self, settings: RerankerSettings | None = None, sequential: bool = False) -> None:
        self.settings = settings or RerankerSettings()
        self.client = Client()
        self.encoder = Encoder(None if sequential else self.client.asked)

    def lexical_text(self, post: Post, encoding: Any) -> str:
        return f"{post.title} {post.body}" if encoding is None else "visa qatar"


def _ranking(query: dict[str, Any]) -> dict[str, Any]:
    """The script_score inside the query framed for the pipeline's index."""
    return query["bool"]["should"][0]["bool"]["must"][0]["script_score"]


def test_the_query_finds_both_lists_within_the_sites_filter_and_scores_them_with_the_fused_script() -> None:
    rr = Reranker()
    answer = onehop.rewrite(rr, SEARCH, Post("_search", "Visa for Qatar", "how long can I stay"), RESOLVED, "posts")
    assert (answer.lexical, answer.best, answer.k) == (2, 4.5, 100)
    tenant, without_7 = {"term": {"tenant": "a"}}, [{"ids": {"values": ["7"]}}]
    (asked,) = rr.client.bodies  # the lexical top k, within the site's filter, without the excluded post
    assert asked["size"] == 100 and asked["query"]["bool"]["filter"][0]["bool"]["filter"] == [tenant]
    assert asked["query"]["bool"]["must_not"] == without_7
    ranking = _ranking(answer.query)
    inner = ranking["query"]["bool"]
    assert inner["should"] == [{"match": {"text": {"query": "Visa for Qatar how long can I stay"}}}]
    assert inner["must_not"] == without_7
    either, skeleton = inner["filter"]
    assert skeleton["bool"]["filter"] == [tenant]  # the site's restriction, kept
    ids, knn = either["bool"]["should"]
    assert ids == {"ids": {"values": ["3", "1"]}}
    knn = knn["knn"]["semdup.vector"]
    assert knn["k"] == 100 and knn["filter"]["bool"]["filter"][0] == skeleton and knn["filter"]["bool"]["must_not"]
    assert ranking["script"]["id"] == FUSED_SCRIPT_ID
    params = ranking["script"]["params"]
    assert params["best"] == 4.5 and params["bd"] == 1.0 and params["bt"] == 0.25 and params["bb"] == 0.0
    assert knn["vector"] == params["qv"] == [0.6, 0.8, 0.1]  # each float32 as its shortest decimal
    json.dumps(answer.query)  # JSON's own types only: what the service answers
    assert answer.query["bool"]["should"][0]["bool"]["filter"] == [{"terms": {"_index": ["posts"]}}]


def test_a_text_cut_by_the_encodings_term_weights_is_searched_after_the_encoding() -> None:
    rr = Reranker(RerankerSettings(lexical_terms=8), sequential=True)
    answer = onehop.rewrite(rr, SEARCH, Post("_search", "Visa for Qatar", "how long"), RESOLVED, "posts")
    assert rr.client.bodies[0]["query"]["bool"]["must"] == [{"match": {"text": {"query": "visa qatar"}}}]
    assert _ranking(answer.query)["query"]["bool"]["should"] == [{"match": {"text": {"query": "visa qatar"}}}]


def test_nothing_lexical_leaves_the_knn_list_alone() -> None:
    query = onehop.onehop_query({"query": {"match": {"title": "x"}}}, within={},
                                match={"match": {"text": {"query": "x"}}}, lexical_ids=[], vector=[1.0],
                                script_params={"best": 0.0}, index=None, k=5)  # fmt: skip
    either = query["script_score"]["query"]["bool"]["filter"]
    assert either == [{"bool": {"should": [{"knn": {"semdup.vector": {"vector": [1.0], "k": 5}}}],
                                "minimum_should_match": "1"}}]
    assert query["script_score"]["script"]["params"] == {"best": 0.0}


@pytest.mark.parametrize(("search", "depth"), [
    ({}, 100), ({"size": 20}, 100), ({"from": 95, "size": 10}, 105), ({"size": 500}, 500),
    ({"from": 20_000, "size": 10}, onehop.MAX_DEPTH), ({"from": "x"}, 100), ({"size": -5}, 100)])  # fmt: skip
def test_pages_deeper_than_the_candidates_widen_them(search: dict[str, Any], depth: int) -> None:
    assert onehop.depth_of(search, 100) == depth


def test_only_semdups_own_index_with_knn_and_a_dense_bundle_is_served() -> None:
    assert onehop.serves(RESOLVED, dense=True)
    assert not onehop.serves(RESOLVED, dense=False)
    assert not onehop.serves(ResolvedIndex("site", "semdup-site", CandidateFields(knn=True)), dense=True)  # companion
    assert not onehop.serves(ResolvedIndex("posts", "posts", CandidateFields()), dense=True)


def test_the_shift_keeps_every_complete_score_above_one() -> None:
    comps = components_params("m", np.ones(3, np.float32), None, None)
    params = fused_params(comps, {"beta_bow": 0.7, "beta_dense": -0.4, "alpha": 0.2, "beta_title": 0.3}, 3.0)
    assert (params["bb"], params["bd"], params["bt"]) == (0.0, -0.4, 0.0)  # paths the query lacks weigh 0
    worst = params["shift"] - abs(params["bd"]) - abs(params["alpha"])
    assert worst == pytest.approx(1.0) and params["best"] == 3.0
    # the script: a candidate without semdup's fields, or another model's, scores half its lexnorm (below 1)
    assert FUSED_SCRIPT.count("return 0.5 * ln;") == 4 and FUSED_SCRIPT.count("return ") == 7
    assert "return null" not in FUSED_SCRIPT


class Scripts:
    def __init__(self, held: str | None) -> None:
        self.held = held

    def get_script(self, id: str, params: Any = None) -> dict[str, Any]:  # noqa: A002
        from semdup.core.errors import OpenSearchMissing

        if self.held is None:
            raise OpenSearchMissing(f"GET /_scripts/{id}: 404", status=404)
        return {"_id": id, "found": True, "script": {"lang": "painless", "source": self.held}}


def test_the_one_hop_query_waits_for_its_script_in_the_cluster() -> None:
    assert onehop.script_ready(Scripts(FUSED_SCRIPT), 1.0)
    assert not onehop.script_ready(Scripts("an older version"), 1.0)
    assert not onehop.script_ready(Scripts(None), 1.0)  # absent, or not allowed to read: the candidate query
