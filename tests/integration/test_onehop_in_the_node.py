"""The one-hop query on a real OpenSearch (k-NN, the stored fused script), run as the node runs it for the site.

* its candidates hold ``/v1/rerank``'s lexical top 100 and nearly all of its k-NN 100, and its ``_score`` of
  each is the fusion of the cosines the reranker computed, with lexnorm = the lexical score / the best one, plus
  the shift (:mod:`semdup.reranker.onehop`);
* a filter that matches 5 % of the posts gets back ``size`` hits, all within it, where the candidate path's
  ~200 unfiltered candidates hold fewer;
* pages past ``k_candidates`` go on: ``from`` + ``size`` widens both candidate lists.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from indexer_stack import travel_bundle_dir, travel_posts
from served_index import build_index

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.scoring import fused_scores
from semdup.reranker import Reranker, RerankerSettings, onehop
from semdup.reranker.rewrite import post_of_search
from semdup.search_templates.components import fused_params

pytestmark = [pytest.mark.opensearch]


@pytest.fixture(scope="module")
def travel_onehop(opensearch_client: Any, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Reranker, list[Post]]]:  # fmt: skip
    """A reranker over 400 Travel posts indexed by the workers' writer (k-NN on), with a lexical weight."""
    bundle_dir: Path = travel_bundle_dir(tmp_path_factory)
    posts = travel_posts()[:400]
    index = f"semdup-test-onehop-{uuid.uuid4().hex[:8]}"
    build_index(opensearch_client, index, Bundle.load(bundle_dir), posts)
    rr = Reranker.from_bundle(bundle_dir, opensearch_client, index, RerankerSettings(knn=True))
    rr.fusion = {**rr.fusion, "alpha": 0.3}  # so lexnorm weighs in the comparison
    yield rr, posts
    opensearch_client.indices.delete(index=index, ignore_unavailable=True)


def _site_search(post: Post, size: int = 10, restrict: list[str] | None = None, start: int = 0) -> dict[str, Any]:
    query: dict[str, Any] = {"bool": {"should": [{"match": {"title": post.title}}, {"match": {"body": post.body}}],
                                      "must_not": [{"ids": {"values": [post.id]}}]}}  # fmt: skip
    if restrict is not None:
        query["bool"]["filter"] = [{"ids": {"values": restrict}}]
    return {"size": size, "from": start, "_source": False, "query": query}


def _run(rr: Reranker, search: dict[str, Any], every: bool = False) -> tuple[list[dict[str, Any]], onehop.OneHop]:
    """The one-hop answer to ``search`` and the hits the node returns for it (as the pipeline puts it in place;
    ``every``: all it matches, not the site's page)."""
    resolved = rr.indices.resolve(rr.index, rr.settings)
    assert onehop.serves(resolved, True)
    answer = onehop.rewrite(rr, search, post_of_search(search, *resolved.text_fields), resolved, rr.index)
    body = {**search, "query": answer.query, **({"size": 1000, "from": 0} if every else {})}
    return rr.client.search(index=rr.index, body=body)["hits"]["hits"], answer


def test_the_one_hop_query_scores_the_reranks_candidates_with_the_fusion(
    travel_onehop: tuple[Reranker, list[Post]],
) -> None:
    rr, posts = travel_onehop
    queries = [p for p in posts[::41] if p.title and p.body][:8]
    for post in queries:
        hits, answer = _run(rr, _site_search(post), every=True)
        found = rr.fusion_inputs(Post("_search", post.title, post.body), exclude_id=post.id)
        assert found is not None and answer.k == 100 and answer.lexical == 100
        # every lexical candidate of the rerank is one here (BM25's top 100 is exact). Its k-NN ones nearly all:
        # the rerank's k-NN searches the graph with a beam of 2k, the one-hop query with k (ml-commons would hand
        # the node an ef_search of 200.0, which k-NN refuses), so an approximate neighbour can differ (at most 1
        # of 100 in 40 queries here); k-NN's k is per segment in the node, so it may also add a few more
        got_ids = {h["_id"] for h in hits}
        sources = found.candidates.sources
        assert {i for i in found.ids if "bm25" in sources.get(i, ())} <= got_ids, post.id
        assert len({i for i in found.ids if "knn" in sources.get(i, ())} - got_ids) <= 3, post.id
        lexical = found.components["lexical"]
        assert answer.best == pytest.approx(float(lexical.max()), rel=1e-6)
        comps = {n: np.nan_to_num(found.components[n]) for n in ("cos_bow", "cos_dense", "cos_title")}
        expected = fused_scores(comps["cos_bow"], comps["cos_dense"], lexical / lexical.max(), rr.fusion,
                                comps["cos_title"])  # fmt: skip
        shift = fused_params({"qv": 1, "qi": 1}, rr.fusion, 0.0)["shift"]
        by_id = dict(zip(found.ids, expected, strict=True))
        got = np.asarray([h["_score"] for h in hits if h["_id"] in by_id])
        want = np.asarray([by_id[h["_id"]] + shift for h in hits if h["_id"] in by_id])
        np.testing.assert_allclose(got, want, rtol=2e-6)  # Lucene's float32 score of the same sum
        every = [h["_score"] for h in hits]
        assert every == sorted(every, reverse=True)


def test_a_filter_of_5_percent_of_the_posts_fills_the_page(travel_onehop: tuple[Reranker, list[Post]]) -> None:
    rr, posts = travel_onehop
    allowed = [p.id for p in posts[::20]]  # 20 of 400
    post = next(p for p in posts[7::20] if p.title and p.body)
    hits, _ = _run(rr, _site_search(post, size=15, restrict=allowed))
    assert len(hits) == 15 and all(h["_id"] in allowed for h in hits)
    scores = [h["_score"] for h in hits]
    assert scores == sorted(scores, reverse=True) and min(scores) > 1.0  # semdup's fused scores, all complete
    # the candidate path ranks ~200 unfiltered candidates, then prunes them: some allowed posts are not among them
    pruned = [c.id for c in rr.rank(Post("_search", post.title, post.body), k=10_000, exclude_id=post.id)]
    assert len([i for i in pruned if i in allowed]) < len(allowed)


def test_pages_past_the_candidates_go_on(travel_onehop: tuple[Reranker, list[Post]]) -> None:
    rr, posts = travel_onehop
    post = next(p for p in posts[3:] if p.title and p.body)
    first, answer = _run(rr, _site_search(post, size=10))
    assert answer.k == 100
    deep, deeper = _run(rr, _site_search(post, size=10, start=390))
    assert deeper.k == 400 and len(deep) == 9  # 399 posts besides the query itself: the last page holds 9
    assert [h["_id"] for h in _run(rr, _site_search(post, size=400))[0][390:]] == [h["_id"] for h in deep]
    assert not {h["_id"] for h in deep} & {h["_id"] for h in first}
