"""The reranker scores as the offline model does, on real posts, a real OpenSearch and a real exported bundle.

The bundle is a tiny untrained bow-cnn exported by ``semdup.export`` (so every term of the fusion is live:
cos_bow from stored ``semdup.terms``, cos_dense from stored ``semdup.vector``), plus the trained bundles under
``artifacts/bundles`` when this checkout has them. Posts are real AskUbuntu posts, indexed by the indexer's own
``index_batch``. Scores must equal ``BundleScorer.score`` on the same candidates within 1e-5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from reranker_reference import local_fusion
from served_index import build_index

from semdup.bundle import Bundle, BundleScorer
from semdup.core.posts import Post
from semdup.index_format.mapping import MODEL_META_KEY
from semdup.indexer.batch_writer import index_batch
from semdup.ingest.lexical_index import create_index
from semdup.opensearch_io.clients import knn_available
from semdup.reranker import ModelMismatch, Reranker, RerankerSettings
from semdup.reranker.sources import SourceQuery, SparseSource, search, sparse_query

TOLERANCE = 1e-5
REPO = Path(__file__).resolve().parents[2]
TRAINED = {name: REPO / "artifacts" / "bundles" / name for name in ("t-scqa-semeval", "bow-cnn-askubuntu")}


def offline_gap(rr: Reranker, scorer: BundleScorer, posts: dict[str, Post], queries: list[Post]) -> tuple[float, int]:
    """Largest |service score - offline score| over the queries' ranked candidates, and how many were compared."""
    worst, n = 0.0, 0
    for q in queries:
        cands = rr.rank(q, k=1000, exclude_id=q.id)
        assert cands, f"no candidates for {q.id}"
        offline = scorer.score(q, [posts[c.id] for c in cands], lexical=[c.components["lexical"] for c in cands])
        worst = max(worst, float(np.max(np.abs(offline - np.array([c.score for c in cands])))))
        n += len(cands)
    return worst, n


@pytest.mark.parametrize("alpha", [0.0, 0.5])
def test_scores_equal_the_offline_model(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post], alpha: float
) -> None:
    bundle, index = served
    saved = bundle.fusion
    bundle.fusion = {**bundle.fusion, "alpha": alpha}  # the same fusion for both sides; alpha 0.5 checks lexnorm
    try:
        settings = RerankerSettings(
            templates=("bm25", "lmj"), sparse=True, knn=knn_available(opensearch_client), k_candidates=30
        )
        rr = Reranker(bundle, opensearch_client, index, settings)
        worst, n = offline_gap(rr, BundleScorer(bundle), {p.id: p for p in real_posts}, real_posts[:10])
    finally:
        bundle.fusion = saved
    assert n >= 100
    assert worst <= TOLERANCE, f"reranker differs from BundleScorer by {worst:.2e} (> {TOLERANCE})"


@pytest.mark.parametrize("name", sorted(TRAINED))
def test_trained_bundle_scores_equal_the_offline_model(
    opensearch_client: Any, unique_index: str, real_posts: list[Post], name: str
) -> None:
    if not (TRAINED[name] / "manifest.json").is_file():
        pytest.skip(f"{TRAINED[name]} is not in this checkout (artifacts/ is not versioned); export it to run this")
    bundle = Bundle.load(TRAINED[name])
    build_index(opensearch_client, unique_index, bundle, real_posts)
    rr = Reranker(
        bundle,
        opensearch_client,
        unique_index,
        RerankerSettings(sparse=bundle.term_weights is not None, k_candidates=30),
    )
    worst, n = offline_gap(rr, BundleScorer(bundle), {p.id: p for p in real_posts}, real_posts[:6])
    assert n >= 50
    assert worst <= TOLERANCE


def test_learned_sparse_query_is_cos_bow_inside_opensearch(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    """The rank_feature query's score is cos_bow up to Lucene's feature precision (9 significant bits)."""
    bundle, index = served
    q = real_posts[3]
    terms = bundle.encode_terms([q])[0]
    query = SourceQuery("unused", 20, exclude_id=q.id, terms=terms)
    ((_, hits),) = search(opensearch_client, index, [SparseSource()], query, timeout=10)
    sparse_ids = [h.id for h in hits]
    resp = opensearch_client.search(index=index, body=sparse_query(terms, query), request_timeout=10)
    got = {h["_id"]: h["_score"] for h in resp["hits"]["hits"]}
    rr = Reranker(bundle, opensearch_client, index, RerankerSettings(sparse=True, k_candidates=20))
    exact = {c.id: c.components["cos_bow"] for c in rr.rank(q, k=1000, exclude_id=q.id)}
    assert sparse_ids and set(got) == set(sparse_ids)
    for doc_id, score in got.items():
        assert score == pytest.approx(exact[doc_id], rel=1e-2, abs=1e-3)


def test_candidates_not_indexed_yet_are_kept_and_flagged(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    bundle, index = served
    q = real_posts[0]
    pending = Post("pending-1", q.title, q.body)  # same words as the query: surely a BM25 candidate
    opensearch_client.index(
        index=index,
        id=pending.id,
        body={"post_id": pending.id, "title": pending.title, "body": pending.body},
        refresh=True,
    )
    try:
        rr = Reranker(bundle, opensearch_client, index, RerankerSettings(k_candidates=20))
        cands = rr.rank(q, k=1000, exclude_id=q.id)
        flagged = [c for c in cands if not c.complete]
        assert [c.id for c in flagged] == ["pending-1"]
        assert cands[-1].id == "pending-1"  # ranked after every complete candidate
        assert flagged[0].components["cos_dense"] is None and flagged[0].is_duplicate is None
    finally:
        opensearch_client.delete(index=index, id=pending.id, refresh=True)


def test_candidates_of_another_model_are_refused(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    bundle, index = served
    q = real_posts[1]
    doc = opensearch_client.get(index=index, id=real_posts[2].id)["_source"]
    doc["semdup"]["model"] = "bow-cnn-000000000000"
    opensearch_client.index(index=index, id="foreign-1", body={**doc, "post_id": "foreign-1"}, refresh=True)
    try:
        rr = Reranker(bundle, opensearch_client, index, RerankerSettings(k_candidates=100))
        with pytest.raises(ModelMismatch, match="bow-cnn-000000000000"):
            rr.rank(real_posts[2], k=10, restrict_ids=["foreign-1", q.id])
    finally:
        opensearch_client.delete(index=index, id="foreign-1", refresh=True)


def test_index_claimed_by_another_model_is_refused(
    opensearch_client: Any, unique_index: str, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    bundle, _ = served
    create_index(opensearch_client, unique_index, dimension=bundle.dimension)
    opensearch_client.indices.put_mapping(index=unique_index, body={"_meta": {MODEL_META_KEY: "cnn-111111111111"}})
    rr = Reranker(bundle, opensearch_client, unique_index)
    with pytest.raises(ModelMismatch, match="cnn-111111111111"):
        rr.rank(real_posts[0])


def test_restrict_ids_ranks_exactly_those(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    bundle, index = served
    ids = [p.id for p in real_posts[10:20]]
    rr = Reranker(bundle, opensearch_client, index)
    cands = rr.rank(real_posts[0], k=100, restrict_ids=ids)
    assert sorted(c.id for c in cands) == sorted(ids)
    assert [c.score for c in cands] == sorted((c.score for c in cands), reverse=True)


def test_a_reindexed_post_is_scored_by_its_new_fields(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    """The cluster scores what the index holds now: a re-indexed candidate is scored by its new text, never its old."""
    bundle, index = served
    posts = {p.id: p for p in real_posts}
    rr = Reranker(bundle, opensearch_client, index, RerankerSettings(k_candidates=30))
    q = real_posts[8]
    target = rr.rank(q, k=100, exclude_id=q.id)[0].id
    changed = Post(target, real_posts[30].title, real_posts[30].body)
    assert not index_batch(opensearch_client, index, [changed.to_json()], bundle).failed
    opensearch_client.indices.refresh(index=index)
    try:
        after = {c.id: c for c in rr.rank(q, k=1000, exclude_id=q.id, restrict_ids=[target])}
        want = BundleScorer(bundle).score(q, [changed], lexical=[after[target].components["lexical"]])[0]
        assert abs(after[target].score - want) <= TOLERANCE
    finally:
        index_batch(opensearch_client, index, [posts[target].to_json()], bundle)
        opensearch_client.indices.refresh(index=index)


def test_hybrid_paths_on_an_index_without_their_structures_are_skipped_not_failed(
    opensearch_client: Any,
    unique_index: str,
    served: tuple[Bundle, str],
    real_posts: list[Post],
    caplog: pytest.LogCaptureFixture,
) -> None:
    bundle, _ = served
    create_index(opensearch_client, unique_index, dimension=bundle.dimension)  # the default: packed fields only
    assert not index_batch(opensearch_client, unique_index, [p.to_json() for p in real_posts[:30]], bundle).failed
    opensearch_client.indices.refresh(index=unique_index)
    hybrid = RerankerSettings(templates=("bm25",), sparse=True, knn=True, k_candidates=10)
    rr = Reranker(bundle, opensearch_client, unique_index, hybrid)
    with caplog.at_level("WARNING", logger="semdup.reranker.index"):
        cands = rr.rank(real_posts[0], k=10, exclude_id=real_posts[0].id)
    assert cands and all(c.sources == ("bm25",) for c in cands)
    assert "k-NN candidates are off" in caplog.text and "learned-sparse candidates are off" in caplog.text
    # and the fusion is the same as on an index that holds both structures: only the candidate paths differ
    plain = Reranker(bundle, opensearch_client, unique_index, RerankerSettings(k_candidates=10))
    assert [(c.id, c.score) for c in plain.rank(real_posts[0], k=10, exclude_id=real_posts[0].id)] == [
        (c.id, c.score) for c in cands
    ]


def test_the_title_term_scores_equal_the_offline_model(
    opensearch_client: Any, unique_index: str, tiny_bundle: Path, real_posts: list[Post]
) -> None:
    """A bundle with a title term: the workers pack each title's vector, the reranker encodes the query's title,
    and the scores still equal the offline model's; a post or query without a title has a title cosine of 0."""
    bundle = Bundle.load(tiny_bundle)
    bundle.fusion = {**bundle.fusion, "alpha": 0.3, "beta_title": 0.5}
    assert bundle.uses_title
    posts = [*real_posts, Post("untitled-1", "", real_posts[1].body)]
    build_index(opensearch_client, unique_index, bundle, posts)
    rr = Reranker(bundle, opensearch_client, unique_index, RerankerSettings(k_candidates=30))
    queries = [*real_posts[:6], Post("untitled-q", "", real_posts[2].body)]
    worst, n = offline_gap(rr, BundleScorer(bundle), {p.id: p for p in posts}, queries)
    assert n >= 50
    assert worst <= TOLERANCE, f"reranker differs from BundleScorer by {worst:.2e} (> {TOLERANCE})"
    ranked = rr.rank(real_posts[1], k=1000, exclude_id=real_posts[1].id)
    by_id = {c.id: c for c in ranked}
    assert by_id["untitled-1"].components["cos_title"] == 0.0 and by_id["untitled-1"].complete
    assert any(c.components["cos_title"] for c in ranked)


def test_knn_candidates_are_on_by_default_where_the_index_maps_the_vector(
    opensearch_client: Any, served: tuple[Bundle, str], unique_index: str, real_posts: list[Post], caplog: Any
) -> None:
    bundle, index = served
    if not knn_available(opensearch_client):
        pytest.skip("this cluster has no k-NN plugin")
    q = real_posts[5]
    found = {s for c in Reranker(bundle, opensearch_client, index).rank(q, k=1000, exclude_id=q.id) for s in c.sources}
    assert "knn" in found
    off = Reranker(bundle, opensearch_client, index, RerankerSettings(knn=False)).rank(q, k=1000, exclude_id=q.id)
    assert all("knn" not in c.sources for c in off)
    # an index made without --knn: BM25 candidates, quietly (no warning about a path nobody asked for)
    build_index(opensearch_client, unique_index, bundle, real_posts[:20], knn=False)
    with caplog.at_level("WARNING"):
        plain = Reranker(bundle, opensearch_client, unique_index).rank(q, k=1000, exclude_id=q.id)
    assert plain and all("knn" not in c.sources for c in plain)
    assert "k-NN candidates are off" not in caplog.text


@pytest.mark.parametrize("paths", [{"knn": True}, {"sparse": True}, {"knn": True, "sparse": True}])
def test_the_clusters_components_equal_the_fusion_of_the_decoded_packed_fields(
    opensearch_client: Any,
    served: tuple[Bundle, str],
    real_posts: list[Post],
    paths: dict[str, bool],
    monkeypatch: Any,
) -> None:
    """One ``_msearch/template`` whose hits carry the cosines the stored painless script computed from
    ``semdup.packed``, and the vector sources' hits their BM25 score (a rescore at weight 0): the same ranking, and
    the same scores to float64 rounding, as the reference (tests/reranker_reference.py) that decodes every
    candidate's packed fields and computes the cosines in numpy. No second request for lexical scores."""
    bundle, index = served
    if paths.get("knn") and not knn_available(opensearch_client):
        pytest.skip("this cluster has no k-NN plugin")
    saved = bundle.fusion
    bundle.fusion = {**bundle.fusion, "alpha": 0.5}  # the fusion reads the lexical score of every candidate
    try:
        settings = RerankerSettings(k_candidates=10, knn=paths.get("knn", False), sparse=paths.get("sparse", False))
        rr = Reranker(bundle, opensearch_client, index, settings)
        reference = local_fusion(rr)
        queries = real_posts[:10]
        expected = [reference.rank(q, k=100, exclude_id=q.id) for q in queries]
        import semdup.reranker.reranker as module

        def refused(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a second request for lexical scores")

        monkeypatch.setattr(module, "lexical_scores", refused)
        got = [rr.rank(q, k=100, exclude_id=q.id) for q in queries]
    finally:
        bundle.fusion = saved
    for mine, ref in zip(got, expected, strict=True):
        assert [c.id for c in mine] == [c.id for c in ref]
        for a, b in zip(mine, ref, strict=True):
            # float64 sums in another order (painless, numpy): equal to ~1e-15, well inside what a ranking reads
            assert a.score == pytest.approx(b.score, rel=0, abs=1e-12)
            assert a.components == pytest.approx(b.components, rel=0, abs=1e-12)
            assert (a.sources, a.complete) == (b.sources, b.complete)
    only_vector = [c for ranked in expected for c in ranked if "bm25" not in c.sources]
    assert only_vector and any(c.components["lexical"] for c in only_vector)  # the rescored scores were exercised


def test_more_queries_than_the_clusters_compilation_limit_compile_nothing(
    opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]
) -> None:
    """OpenSearch compiles at most 75 dynamic scripts in 5 minutes: a rerank must send no inline template or
    script (its k-NN body goes through the stored search-body template), or the 76th query fails."""
    bundle, index = served
    if not knn_available(opensearch_client):
        pytest.skip("this cluster has no k-NN plugin")
    rr = Reranker(bundle, opensearch_client, index, RerankerSettings(k_candidates=5, knn=True))
    before = opensearch_client.nodes.stats(metric="script")["nodes"]
    compilations = sum(n["script"]["compilations"] for n in before.values())
    for i in range(80):
        post = real_posts[i % len(real_posts)]
        assert rr.rank(Post(f"q{i}", f"{post.title} {i}", post.body), k=3)
    after = opensearch_client.nodes.stats(metric="script")["nodes"]
    assert sum(n["script"]["compilations"] for n in after.values()) - compilations <= 3  # the stored ones, once
