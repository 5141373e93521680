"""A rerank is one encoding and one ``_msearch``: every source in it, each hit carrying the fusion's
cosines (the cluster's components script) and the vector sources' hits the template's score (their rescore).

The fake cluster answers what OpenSearch answers: a stored lexical template (a word-overlap score standing in for
BM25), a k-NN body (cosine) rescored with the template's ``match`` at weight 0, the restricted posts, and for each hit
the script field the components script computes (here in numpy, from the post's vectors). The ranking must be the
fusion of every candidate by hand; the integration tests check the real script against the decoded packed fields.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.core.scoring import fused_scores, minmax_normalise
from semdup.index_format.schema import CandidateFields
from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.search_templates import query_text, template_body, template_params
from semdup.search_templates.components import COMPONENTS_SCRIPT_ID

VERSION = "hybrid-minilm-0123abcd"
WORDS = "visa qatar stay arrival train paris ticket airport lounge night bus border".split()
FUSION = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.1, "beta_title": 0.25}


def _vector(text: str) -> np.ndarray:
    """A deterministic unit vector of a text (word counts over WORDS, plus a constant so none is zero)."""
    words = text.lower().split()
    v = np.array([words.count(w) for w in WORDS] + [1.0], dtype=np.float32)
    return v / np.linalg.norm(v)


class FakeBundle:
    version = VERSION
    fusion = FUSION
    term_weights = None
    dimension = len(WORDS) + 1
    threshold = None
    uses_title = True

    def encode_query(self, post: Post) -> tuple[np.ndarray, None]:
        return _vector(f"{post.title} {post.body}"), None

    def encode_titles(self, posts: list[Post]) -> list[np.ndarray | None]:
        return [_vector(p.title) if p.title else None for p in posts]


class FakeCluster:
    """Posts with a lexical score (shared words), k-NN by cosine, the components script's field on every hit."""

    def __init__(self, posts: list[Post]) -> None:
        self.posts = {p.id: p for p in posts}
        self.requests: list[list[dict[str, Any]]] = []
        self.lock = threading.Lock()

    def lexical(self, text: str, doc_id: str) -> float:
        p = self.posts[doc_id]
        words = f"{p.title} {p.body}".lower().split()
        return float(sum(words.count(w) for w in set(text.lower().split())))

    def components(self, doc_id: str, params: dict[str, Any]) -> list[float]:
        p = self.posts[doc_id]
        dense = float(np.asarray(params["qv"]) @ _vector(f"{p.title} {p.body}"))
        title = float(np.asarray(params["qt"]) @ _vector(p.title)) if params["qt"] is not None and p.title else 0.0
        return [0.0, dense, title, 1.0]

    def _hits(self, scored: list[tuple[str, float]], script: dict[str, Any] | None) -> dict[str, Any]:
        hits = []
        for d, s in scored:
            hit: dict[str, Any] = {"_id": d, "_score": s}
            if script is not None:
                assert script["semdup"]["script"]["id"] == COMPONENTS_SCRIPT_ID
                hit["fields"] = {"semdup": self.components(d, script["semdup"]["script"]["params"])}
            hits.append(hit)
        return {"hits": {"hits": hits}}

    def _lexical_hits(self, body: dict[str, Any]) -> dict[str, Any]:
        clauses = body["query"]["bool"]
        text = clauses["must"][0]["match"]["text"]["query"]
        ids = clauses["filter"][0]["ids"]["values"] if clauses["filter"] else None
        excluded = clauses["must_not"][0]["ids"]["values"] if clauses["must_not"] else []
        scored = [(d, self.lexical(text, d)) for d in self.posts if d not in excluded and (ids is None or d in ids)]
        scored = sorted([(d, s) for d, s in scored if s > 0], key=lambda x: (-x[1], x[0]))[: body["size"]]
        return self._hits(scored, body.get("script_fields"))

    def _body(self, body: dict[str, Any]) -> dict[str, Any]:
        query = body["query"]
        if "must" in query.get("bool", {}):  # a lexical template's body
            return self._lexical_hits(body)
        if "knn" in query:
            knn = query["knn"]["semdup.vector"]
            excluded = knn.get("filter", {}).get("bool", {}).get("must_not", [{}])[0].get("ids", {}).get("values", [])
            q = np.asarray(knn["vector"], dtype=np.float32)
            scored = [(d, (1.0 + float(q @ _vector(f"{p.title} {p.body}"))) / 2) for d, p in self.posts.items()]
            scored = sorted([x for x in scored if x[0] not in excluded], key=lambda x: (-x[1], x[0]))[: knn["k"]]
            rescore = body["rescore"]["query"]
            assert rescore["query_weight"] == 0.0 and rescore["rescore_query_weight"] == 1.0
            text = rescore["rescore_query"]["match"]["text"]["query"]
            scored = sorted([(d, self.lexical(text, d)) for d, _ in scored], key=lambda x: -x[1])
        else:  # the restricted posts
            wanted = query["bool"]["filter"][0]["ids"]["values"]
            scored = [(d, 0.0) for d in wanted if d in self.posts]
        return self._hits(scored[: body["size"]], body.get("script_fields"))

    def msearch(self, body: list[dict[str, Any]], params: Any = None) -> dict[str, Any]:
        with self.lock:
            self.requests.append(body)
        return {"responses": [self._body(x) for x in body[1::2]]}


POSTS = [
    Post("1", "Visa on arrival in Qatar", "How long can I stay with a visa on arrival"),
    Post("2", "Train from Paris", "Which train ticket do I need from Paris"),
    Post("3", "Airport lounge at night", "Can I sleep in the airport lounge at night"),
    Post("4", "Bus over the border", "Is there a night bus across the border"),
    Post("5", "", "Qatar airport transit"),
    Post("6", "Stay", "visa stay stay stay"),
    Post("7", "Lounge", "lounge lounge"),
    Post("8", "Border visa", "border visa qatar arrival"),
]


def _reranker(cluster: FakeCluster, k_candidates: int) -> Reranker:
    rr = Reranker(FakeBundle(), cluster, "posts", RerankerSettings(k_candidates=k_candidates))  # type: ignore[arg-type]
    # the index was resolved and its templates stored (what the first IndexResolver.resolve records)
    rr.indices._mapped["posts"] = ("posts", CandidateFields(knn=True), 1, ("title", "body"))
    rr.indices._stored.add(("bm25", "text"))
    return rr


def _by_hand(cluster: FakeCluster, query: Post, ids: list[str]) -> list[tuple[str, float]]:
    """The fusion of the candidates ``ids``, every term computed here."""
    params = {"qv": _vector(f"{query.title} {query.body}"), "qt": _vector(query.title) if query.title else None}
    comps = np.asarray([cluster.components(d, params) for d in ids])
    lex = [cluster.lexical(f"{query.title} {query.body}", d) for d in ids]
    scores = fused_scores(None, comps[:, 1], minmax_normalise(lex), FUSION, comps[:, 2])
    return sorted(zip(ids, scores.tolist(), strict=True), key=lambda x: (-x[1], x[0]))


@pytest.mark.parametrize("k_candidates", [2, 3, 8])
@pytest.mark.parametrize("query", [Post("q1", "Visa for Qatar", "how long can I stay"), Post("q2", "", "night train")])
def test_one_request_ranks_every_candidate_with_the_clusters_components(query: Post, k_candidates: int) -> None:
    cluster = FakeCluster(POSTS)
    got = _reranker(cluster, k_candidates).rank(query, k=8, exclude_id="1")
    assert len(cluster.requests) == 1  # one round trip: the template and the k-NN body in one _msearch/template
    lines = cluster.requests[0][1::2]
    assert [("match" in str(x["query"])[:60], "knn" in x["query"]) for x in lines] == [(True, False), (False, True)]
    assert lines[0] == template_body("bm25", "text", template_params(
        query_text(query.title, query.body), size=k_candidates, exclude_id="1",
        script_fields=lines[0]["script_fields"]))  # the body the stored template renders
    ids = sorted({c.id for c in got})
    assert "1" not in ids
    expected = _by_hand(cluster, query, ids)
    assert [(c.id, pytest.approx(c.score, abs=1e-12)) for c in got] == expected
    knn_only = [c for c in got if c.sources == ("knn",)]
    for c in knn_only:  # its lexical score came with its hit (the rescore), no second request
        assert c.components["lexical"] == cluster.lexical(f"{query.title} {query.body}", c.id)


def test_restricted_posts_all_come_with_their_components_and_no_match_scores_zero() -> None:
    cluster = FakeCluster(POSTS)
    rr = _reranker(cluster, 3).with_settings(knn=False)
    rr.indices._mapped["posts"] = ("posts", CandidateFields(), 1, ("title", "body"))
    got = rr.rank(Post("q", "Visa", "qatar stay"), k=5, restrict_ids=["2", "6", "8", "missing"])
    assert len(cluster.requests) == 1
    assert sorted(c.id for c in got) == ["2", "6", "8"]  # a post the index does not hold is left out
    by_id = {c.id: c for c in got}
    assert by_id["2"].sources == ("restrict",) and by_id["2"].components["lexical"] == 0.0
    assert by_id["6"].components["lexical"] > 0 and "bm25" in by_id["6"].sources


class DownCluster(FakeCluster):
    def msearch(self, body: list[dict[str, Any]], params: Any = None) -> dict[str, Any]:
        from opensearchpy.exceptions import ConnectionError as ClientConnectionError

        from semdup.opensearch_io.boundary import client_error

        refused = ClientConnectionError("N/A", "connection refused", None)
        raise client_error(refused, "POST", "/_msearch")  # as the client raises it


def test_a_cluster_that_is_down_is_the_error_the_caller_gets() -> None:
    from semdup.core.errors import OpenSearchUnavailable

    with pytest.raises(OpenSearchUnavailable):
        _reranker(DownCluster(POSTS), 3).rank(Post("q", "Visa for Qatar?", ""))


@pytest.mark.parametrize(
    ("shards", "dfs", "expected"),
    [(1, None, None), (3, None, "dfs_query_then_fetch"), (3, False, None), (1, True, "dfs_query_then_fetch")],
)
def test_an_index_of_several_shards_is_searched_with_global_statistics(
    shards: int, dfs: bool | None, expected: str | None
) -> None:
    """BM25 on several shards scores with each shard's own statistics unless the search gathers them first."""
    cluster = FakeCluster(POSTS)
    rr = _reranker(cluster, 3).with_settings(dfs=dfs)
    rr.indices._mapped["posts"] = ("posts", CandidateFields(knn=True), shards, ("title", "body"))
    rr.rank(Post("q", "Visa for Qatar", "how long can I stay"), k=5)
    headers = [line for body in cluster.requests for line in body[0::2]]
    assert headers and all(h.get("search_type") == expected for h in headers)
