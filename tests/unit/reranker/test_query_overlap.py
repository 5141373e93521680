"""The one query path (the lexical search during the query's encoding, k-NN hits carrying their lexical score) ranks
exactly as the sequential reference (``tests/reranker_reference.py``: encode body, encode title, search the
templates, then k-NN, a second request for the lexical scores of k-NN-only candidates, fuse).

The fake cluster answers what OpenSearch answers: a stored lexical template (a word-overlap score standing in for
BM25), a k-NN body in an ``_msearch`` (cosine), a k-NN ``_search`` with the named-query score of its post filter,
the hits' packed docvalue fields. It counts the requests: the second round trip is gone.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.index_format.packed_fields import pack_semdup_fields
from semdup.index_format.schema import PACKED_FIELD, CandidateFields
from reranker_reference import sequential

from semdup.reranker.reranker import Reranker
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import LEXICAL_QUERY_NAME

VERSION = "hybrid-minilm-0123abcd"
WORDS = "visa qatar stay arrival train paris ticket airport lounge night bus border".split()


def _vector(text: str) -> np.ndarray:
    """A deterministic unit vector of a text (word counts over WORDS, plus a constant so none is zero)."""
    words = text.lower().split()
    v = np.array([words.count(w) for w in WORDS] + [1.0], dtype=np.float32)
    return v / np.linalg.norm(v)


class FakeBundle:
    version = VERSION
    fusion = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.1, "beta_title": 0.25}
    term_weights = None
    dimension = len(WORDS) + 1
    threshold = None
    uses_title = True

    def __init__(self) -> None:
        self.threads: set[str] = set()

    def encode_query(self, post: Post) -> tuple[np.ndarray, None]:
        self.threads.add(threading.current_thread().name)
        return _vector(f"{post.title} {post.body}"), None

    def encode_titles(self, posts: list[Post]) -> list[np.ndarray | None]:
        self.threads.add(threading.current_thread().name)
        return [_vector(p.title) if p.title else None for p in posts]


class FakeCluster:
    """Posts with a lexical score (shared words), k-NN by cosine, named-query scores, packed docvalue fields."""

    def __init__(self, posts: list[Post]) -> None:
        self.posts = {p.id: p for p in posts}
        self.requests: list[str] = []
        self.lock = threading.Lock()

    def _lexical(self, text: str, doc_id: str) -> float:
        p = self.posts[doc_id]
        words = f"{p.title} {p.body}".lower().split()
        return float(sum(words.count(w) for w in set(text.lower().split())))

    def _hit(self, doc_id: str, score: float, docvalues: bool) -> dict[str, Any]:
        hit: dict[str, Any] = {"_id": doc_id, "_score": score}
        if docvalues:
            p = self.posts[doc_id]
            title = _vector(p.title) if p.title else None
            packed = pack_semdup_fields(_vector(f"{p.title} {p.body}"), {}, [], title, with_title=True)
            hit["fields"] = {PACKED_FIELD: [packed], "semdup.model": [VERSION]}
        return hit

    def _template(self, params: dict[str, Any]) -> dict[str, Any]:
        text, ids = params["text"], params.get("ids")
        scored = [
            (d, self._lexical(text, d))
            for d in self.posts
            if d != params.get("exclude_id") and (ids is None or d in ids)
        ]
        scored = sorted([(d, s) for d, s in scored if s > 0], key=lambda x: (-x[1], x[0]))[: params["size"]]
        hits = [self._hit(d, s, bool(params.get("has_docvalue_fields"))) for d, s in scored]
        return {"hits": {"hits": hits}}

    def _knn(self, body: dict[str, Any], named_scores: bool = False) -> dict[str, Any]:
        named_text = None
        if "post_filter" in body:  # with_lexical_score's named match (the post filter also matches all)
            named_text = next(iter(body["post_filter"]["bool"]["should"][0]["match"].values()))["query"]
        knn = body["query"]["knn"]["semdup.vector"]
        excluded = knn.get("filter", {}).get("bool", {}).get("must_not", [{}])[0].get("ids", {}).get("values", [])
        q = np.asarray(knn["vector"], dtype=np.float32)
        scored = [(d, (1.0 + float(q @ _vector(f"{p.title} {p.body}"))) / 2) for d, p in self.posts.items()]
        scored = sorted([x for x in scored if x[0] not in excluded], key=lambda x: (-x[1], x[0]))[: knn["k"]]
        hits = []
        for d, s in scored:
            hit = self._hit(d, s, "docvalue_fields" in body)
            if named_text is not None and named_scores:
                lexical = self._lexical(named_text, d)
                hit["matched_queries"] = {LEXICAL_QUERY_NAME: lexical} if lexical > 0 else {}
            hits.append(hit)
        return {"hits": {"hits": hits}}

    def search(self, index: str, body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests.append("_search")
        return self._knn(body, named_scores=params.get("include_named_queries_score") == "true")

    def msearch_template(self, body: list[dict[str, Any]], params: Any = None) -> dict[str, Any]:
        responses = []
        for request in body[1::2]:
            with self.lock:
                self.requests.append(request["id"])
            responses.append(self._template(request["params"]))
        return {"responses": responses}

    def msearch(self, body: list[dict[str, Any]], params: Any = None) -> dict[str, Any]:
        with self.lock:
            self.requests.append("_msearch")
        return {"responses": [self._knn(request) for request in body[1::2]]}


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


def _reranker(cluster: FakeCluster, bundle: FakeBundle, k_candidates: int) -> Reranker:
    rr = Reranker(bundle, cluster, "posts", RerankerSettings(k_candidates=k_candidates))  # type: ignore[arg-type]
    # the index was resolved and its templates stored (what the first IndexResolver.resolve records)
    rr.indices._mapped["posts"] = ("posts", CandidateFields(knn=True))
    rr.indices._stored.add(("bm25", "text"))
    return rr


@pytest.mark.parametrize("k_candidates", [2, 3, 8])
@pytest.mark.parametrize("query", [Post("q1", "Visa for Qatar", "how long can I stay"), Post("q2", "", "night train")])
def test_the_one_path_ranks_exactly_as_the_sequential_reference(query: Post, k_candidates: int) -> None:
    cluster, bundle = FakeCluster(POSTS), FakeBundle()
    rr = _reranker(cluster, bundle, k_candidates=k_candidates)
    expected = sequential(rr).rank(query, k=8, exclude_id="1")
    asked_sequential = list(cluster.requests)
    cluster.requests.clear()
    got = rr.rank(query, k=8, exclude_id="1")
    assert expected and [c.to_json() for c in got] == [c.to_json() for c in expected]
    knn_only = [c for c in expected if c.sources == ("knn",)]
    # the reference asked the lexical template again for the k-NN-only candidates; the one path never
    assert asked_sequential.count("semdup-bm25-text") == (2 if knn_only else 1)
    assert sorted(cluster.requests) == ["_search", "semdup-bm25-text"]


def test_the_lexical_search_and_the_encoding_overlap_and_the_title_follows_the_body() -> None:
    cluster, bundle = FakeCluster(POSTS), FakeBundle()
    _reranker(cluster, bundle, k_candidates=3).rank(Post("q", "Visa", "qatar stay"), k=3)
    # the body and the title on the caller's thread, one after the other (each run with the session's threads)
    assert bundle.threads == {threading.current_thread().name}


class OldCluster(FakeCluster):
    """A cluster before OpenSearch 2.13: ``_search`` refuses ``include_named_queries_score``."""

    def search(self, index: str, body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
        from opensearchpy.exceptions import TransportError

        from semdup.core.opensearch import client_error

        reason = "request [/posts/_search] contains unrecognized parameter: [include_named_queries_score]"
        refused = TransportError(400, "illegal_argument_exception", {"error": {"type": "x", "reason": reason}})
        raise client_error(refused, "POST", f"/{index}/_search")  # as the client raises it


def test_a_cluster_without_named_scores_gets_the_second_request_and_the_same_ranking(caplog: Any) -> None:
    query = Post("q1", "Visa for Qatar", "how long can I stay")
    expected = sequential(_reranker(FakeCluster(POSTS), FakeBundle(), k_candidates=3)).rank(query, 8, "1")
    assert any(c.sources == ("knn",) for c in expected)
    cluster = OldCluster(POSTS)
    rr = _reranker(cluster, FakeBundle(), k_candidates=3)
    with caplog.at_level("WARNING"):
        got = rr.rank(query, 8, "1")
        again = rr.with_settings().rank(query, 8, "1")  # remembered, by the copies too: no second refusal
    assert [c.to_json() for c in got] == [c.to_json() for c in expected] == [c.to_json() for c in again]
    assert caplog.text.count("include_named_queries_score") == 1
    assert cluster.requests.count("semdup-bm25-text") == 4  # per call: the search, then the k-NN-only scores
