"""The protocols over precomputed scores are the ones training and ``semdup eval`` run: same ranking, same figures."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from semdup.core.posts import Post
from semdup.measures.fitting import best_threshold
from semdup.measures.protocols import (
    eval_pair_scores,
    eval_pairs,
    eval_semeval,
    eval_travel,
    rank_corpus,
    semeval_pair_scores,
    travel_rankings,
    travel_scores,
)
from semdup.measures.ranking import retrieval_scores, semeval_scores

CORPUS = [Post(i, f"title {i}", "body") for i in ("p1", "p2", "p3", "p4", "p5")]
IDS = [p.id for p in CORPUS]
# Rows: queries p1 and p3 (both in the corpus); p3's row ties p2/p4/p5 at 0.5.
MATRIX = np.array([[9.0, 0.2, 0.7, 0.7, 0.1], [0.5, 0.5, 9.0, 0.5, 0.9]], dtype=np.float32)
QUERIES = [
    SimpleNamespace(post=CORPUS[0], relevant=frozenset({"p4", "p5"})),
    SimpleNamespace(post=CORPUS[2], relevant=frozenset({"p4"})),
]


class _MatrixScorer:
    """A fake PostScorer whose scores are a fixed matrix (unit test of the protocol, not of a model)."""

    def __init__(self, matrix: np.ndarray, rows: dict[str, int], cols: dict[str, int]) -> None:
        self.matrix, self.rows, self.cols = matrix, rows, cols

    def score(self, query: Post, candidates, lexical=None) -> np.ndarray:
        return np.array([self.matrix[self.rows[query.id], self.cols[c.id]] for c in candidates])

    def score_matrix(self, queries, corpus) -> np.ndarray:
        return self.matrix[np.ix_([self.rows[q.id] for q in queries], [self.cols[p.id] for p in corpus])]


def test_rank_corpus_drops_the_query_and_keeps_corpus_order_on_ties() -> None:
    ranked = rank_corpus(MATRIX, ["p1", "p3"], IDS, cutoff=3)
    assert [d for d, _ in ranked["p1"]] == ["p3", "p4", "p2"]
    assert [d for d, _ in ranked["p3"]] == ["p5", "p1", "p2"]  # p1, p2, p4 tie: corpus order
    assert ranked["p3"][0] == ("p5", pytest.approx(0.9))
    outside = rank_corpus(MATRIX[:1], ["not-in-corpus"], IDS, cutoff=2)
    assert [d for d, _ in outside["not-in-corpus"]] == ["p1", "p3"]


def test_rank_corpus_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="expected \\(queries, corpus\\) = \\(1, 5\\)"):
        rank_corpus(MATRIX, ["p1"], IDS)
    with pytest.raises(ValueError, match="NaN"):
        rank_corpus(np.full((1, 5), np.nan), ["p1"], IDS)


def test_travel_scores_of_a_matrix_equal_eval_travel_and_hand_figures() -> None:
    dump = SimpleNamespace(queries=lambda split: QUERIES, corpus=lambda: CORPUS)
    scorer = _MatrixScorer(MATRIX, {"p1": 0, "p3": 1}, {p: j for j, p in enumerate(IDS)})
    figures = travel_scores(MATRIX, QUERIES, IDS)
    # exact here and below: each protocol reaches the same measure function over the same scores, so the two
    # sides run the same arithmetic (the claim is that they are one path)
    assert eval_travel(scorer, dump, "dev") == figures
    # p1: p3 p4 p2 p5 -> relevant at ranks 2 and 4; p3: p5 p1 p2 p4 -> relevant at rank 4.
    assert figures["MAP"] == pytest.approx(100 * ((1 / 2 + 2 / 4) / 2 + 1 / 4) / 2)
    assert figures["MRR"] == pytest.approx(100 * (1 / 2 + 1 / 4) / 2)
    assert (figures["Acc@1"], figures["Acc@5"]) == (0.0, 100.0)
    ranked, relevant = travel_rankings(scorer, dump, "dev")
    assert retrieval_scores(ranked, relevant) == figures


def test_semeval_pair_scores_are_the_official_scores_of_the_same_predictions() -> None:
    related = [SimpleNamespace(post=Post(r, "t", "b")) for r in ("a", "b", "c")]
    question = SimpleNamespace(post=Post("q", "t", "b"), related=related)
    gold = {"q": {"a": False, "b": True, "c": False}}
    semeval_set = SimpleNamespace(questions=[question], gold=lambda: gold)
    pairs = {("q", "a"): 0.5, ("q", "b"): 0.5, ("q", "c"): 0.9}  # a and b tie: gold order puts a first
    got = semeval_pair_scores(semeval_set, pairs.items())
    assert got == semeval_scores({"q": {"a": 0.5, "b": 0.5, "c": 0.9}}, gold)
    assert got["MRR"] == pytest.approx(100 / 3)
    scorer = _MatrixScorer(np.array([[0.5, 0.5, 0.9]]), {"q": 0}, {"a": 0, "b": 1, "c": 2})
    assert eval_semeval(scorer, semeval_set) == got


def test_eval_pair_scores_chooses_on_one_set_and_applies_on_another() -> None:
    train_scores, train_labels = [0.1, 0.4, 0.35, 0.8, 0.9], [False, False, True, True, True]
    chosen = eval_pair_scores(train_scores, train_labels)
    assert (chosen["threshold"], chosen["accuracy"]) == best_threshold(train_scores, train_labels)
    assert chosen["threshold_tuned_here"] == 1.0
    test = eval_pair_scores([0.2, 0.7], [False, True], threshold=chosen["threshold"])
    assert test == {"accuracy": 100.0, "threshold": chosen["threshold"], "n_pairs": 2}
    q, a, b = Post("q", "t", "b"), Post("a", "t", "b"), Post("b", "t", "b")
    pairs = [SimpleNamespace(query=q, candidate=a, duplicate=True), SimpleNamespace(query=q, candidate=b, duplicate=0)]
    scorer = _MatrixScorer(np.array([[0.7, 0.2]]), {"q": 0}, {"a": 0, "b": 1})
    assert eval_pairs(scorer, pairs, chosen["threshold"]) == test
