"""The Jaccard word-shingle baseline (experiments/shingles_baseline.py): shingles, Jaccard, the scorer and the
choice of shingle size on train pairs."""

from __future__ import annotations

import pytest

from experiments.shingles_baseline import ShingleJaccardScorer, jaccard, shingles, tune_shingle_size
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data import PostPair

# A threshold is a midpoint of two Jaccard values and the accuracy a ratio of counts: rel 1e-12 holds their roundings.
CLOSE = {"rel": 1e-12, "abs": 1e-12}


def test_shingles_jaccard_and_the_scorer() -> None:
    assert shingles(["a", "b", "c"], 2) == frozenset({("a", "b"), ("b", "c")})
    assert shingles(["a"], 2) == frozenset({("a",)}) and shingles([], 2) == frozenset()
    assert jaccard(frozenset({1, 2}), frozenset({2, 3})) == pytest.approx(1 / 3)
    assert jaccard(frozenset(), frozenset()) == 0.0
    posts = [Post("1", "How to mount a USB drive?", "<p>I have a <b>usb</b> stick</p>"),
             Post("2", "mount usb drive ubuntu", ""), Post("3", "", "best visa for india travel")]
    s = ShingleJaccardScorer(TextPipeline(TextPipelineSettings()), 1).score(posts[0], posts[1:])
    assert s[0] > s[1] == 0.0
    with pytest.raises(ValueError, match="not in"):
        ShingleJaccardScorer(TextPipeline(TextPipelineSettings()), 5)


def test_tune_shingle_size_takes_the_smaller_size_on_ties() -> None:
    """The value core/shingles.py's own loop over sizes returned on these pairs (strict >: the smaller size on ties);
    see tests/unit/measures/test_fitting.py for the former copies of the fitting loop."""
    texts = [("how do I get a visa for japan", "japan visa how to get one", True),
             ("how do I get a visa for japan", "best beaches in thailand", False),
             ("cheap flights from london to paris", "london paris cheap flight", True),
             ("cheap flights from london to paris", "trains from paris to rome", False),
             ("can I bring food through customs in australia", "bringing food through australian customs", True),
             ("can I bring food through customs in australia", "customs rules for alcohol in the usa", False),
             ("is tap water safe to drink in mexico", "drinking tap water mexico safe", True),
             ("is tap water safe to drink in mexico", "where to buy water in mexico city", False)]
    pairs = [PostPair(Post(f"q{i}", "", a), Post(f"c{i}", "", b), y, "") for i, (a, b, y) in enumerate(texts)]
    size, threshold, accuracy = tune_shingle_size(TextPipeline(TextPipelineSettings()), pairs)
    assert size == 1 and (threshold, accuracy) == pytest.approx((0.3875, 87.5), **CLOSE)
