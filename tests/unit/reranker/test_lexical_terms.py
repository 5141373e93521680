"""The lexical templates match the query's heaviest terms (``RerankerSettings.lexical_terms``), in the BM25 search
and in the k-NN hits' rescore alike; a bundle without term weights, or ``lexical_terms=0``, matches the whole text."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from semdup.core.errors import ConfigError
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.index_format.packed_fields import PackedTerms
from semdup.reranker.settings import RerankerSettings
from semdup.reranker.sources import heaviest_terms_text
from semdup.search_templates import query_text

from tests.unit.reranker.test_one_round_trip import POSTS, FakeBundle, FakeCluster, _reranker

WEIGHTS = {"visa": 0.6, "qatar": 0.7, "stay": 0.3, "how": 0.05, "long": 0.1, "can": 0.02, "i": 0.01, "for": 0.03}


def test_the_heaviest_terms_keep_their_order_and_repeats() -> None:
    tokens = ["how", "long", "visa", "for", "qatar", "visa", "stay"]
    assert heaviest_terms_text(tokens, WEIGHTS, 2) == "visa qatar visa"
    assert heaviest_terms_text(tokens, WEIGHTS, 3) == "visa qatar visa stay"
    assert heaviest_terms_text(tokens, WEIGHTS, 100) == " ".join(tokens)  # fewer terms than the cut: all of them


def test_words_the_vocabulary_lacks_are_always_kept() -> None:
    # a new word (absent at fit time) may be in posts indexed since: it is never cut
    assert heaviest_terms_text(["covid", "visa", "for", "qatar"], WEIGHTS, 1) == "covid qatar"


def test_the_cut_ranks_only_the_texts_own_terms_and_breaks_ties_by_name() -> None:
    # "qatar" is the heaviest of the weights but not in these tokens: the cut is among the text's terms
    assert heaviest_terms_text(["stay", "long", "how"], WEIGHTS, 1) == "stay"
    assert heaviest_terms_text(["b", "a"], {"a": 0.5, "b": 0.5}, 1) == "a"


def test_a_dotted_token_is_weighed_under_its_feature_name() -> None:
    # rank_features names hold no dots ("12.04" is stored as "12·04"); the token itself goes to the match
    weights = {"ubuntu": 0.4, "12\u00b704": 0.9, "the": 0.01}
    assert heaviest_terms_text(["ubuntu", "12.04", "the"], weights, 1) == "12.04"


def test_a_negative_cut_is_refused() -> None:
    with pytest.raises(ConfigError, match="lexical_terms"):
        RerankerSettings(lexical_terms=-1)


class WeighingBundle(FakeBundle):
    """FakeBundle with bag-of-words weights, tokenised by a real text pipeline."""

    term_weights = np.ones(1)
    pipeline = TextPipeline(TextPipelineSettings())

    def encode_query(self, post: Post) -> tuple[np.ndarray, PackedTerms]:
        vector, _ = super().encode_query(post)
        names = sorted(set(self.pipeline.tokens(f"{post.title} {post.body}")))
        weights = np.array([WEIGHTS.get(t, 0.01) for t in names])
        return vector, PackedTerms(weights, names=names, ids=np.arange(len(names)))


def _matched_texts(request: list[dict[str, Any]]) -> list[str]:
    lexical, knn = request[1], request[3]
    return [lexical["query"]["bool"]["must"][0]["match"]["text"]["query"],
            knn["rescore"]["query"]["rescore_query"]["match"]["text"]["query"]]


def test_the_default_matches_the_whole_text() -> None:
    assert RerankerSettings().lexical_terms == 0


@pytest.mark.parametrize(("cut", "expected"), [(2, "visa qatar"), (0, None)])
def test_the_search_and_the_rescore_match_the_same_cut_text(cut: int, expected: str | None) -> None:
    cluster = FakeCluster(POSTS)
    rr = _reranker(cluster, 3).with_settings(lexical_terms=cut)
    rr.bundle = WeighingBundle()
    rr.encoder.bundle = rr.bundle
    query = Post("q", "Visa for Qatar", "how long can I stay")
    rr.rank(query, k=3)
    assert _matched_texts(cluster.requests[0]) == [expected or query_text(query.title, query.body)] * 2


def test_a_bundle_without_term_weights_matches_the_whole_text() -> None:
    cluster = FakeCluster(POSTS)
    query = Post("q", "Visa for Qatar", "how long can I stay")
    _reranker(cluster, 3).with_settings(lexical_terms=2).rank(query, k=3)  # FakeBundle has no term weights
    assert _matched_texts(cluster.requests[0]) == [query_text(query.title, query.body)] * 2
