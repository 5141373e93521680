"""experiments/onehop_lexnorm.py: the lexnorms a one-hop query could compute, on hand-built candidates."""

from __future__ import annotations

import numpy as np

from experiments.onehop_lexnorm import QueryCandidates, hybrid_scores, lexnorms, minmax, ranked


def _cands(lexical: list[float], semantic: list[float], in_bm25: list[bool], in_knn: list[bool]) -> QueryCandidates:
    return QueryCandidates([f"p{i}" for i in range(len(lexical))], np.asarray(lexical, dtype=float),
                           np.asarray(semantic, dtype=float), np.asarray(in_bm25), np.asarray(in_knn))  # fmt: skip


def test_bm25_over_its_max_is_todays_lexnorm_wherever_a_candidate_matches_no_term() -> None:
    c = _cands([6.0, 3.0, 0.0], [0.1, 0.2, 0.9], [True, True, False], [False, True, True])
    got = lexnorms(c, saturation=2.0)
    np.testing.assert_allclose(got["today"], [1.0, 0.5, 0.0])
    np.testing.assert_allclose(got["bm25 / max"], got["today"])
    np.testing.assert_allclose(got["saturating"], [6 / 8, 3 / 5, 0.0])


def test_they_differ_where_every_candidate_matches_a_term() -> None:
    c = _cands([6.0, 4.0, 2.0], [0.0, 0.0, 0.0], [True, True, True], [False, False, False])
    got = lexnorms(c, saturation=1.0)
    np.testing.assert_allclose(got["today"], [1.0, 0.5, 0.0])
    np.testing.assert_allclose(got["bm25 / max"], [1.0, 4 / 6, 2 / 6])


def test_the_hybrid_normalizes_each_sub_query_over_what_it_returned_only() -> None:
    # p2 matched BM25 (score 2) but only k-NN returned it: the hybrid's BM25 part gives it 0, not its own score
    c = _cands([6.0, 4.0, 2.0], [0.2, 0.5, 0.8], [True, True, False], [False, True, True])
    np.testing.assert_allclose(hybrid_scores(c, 0.5), [0.5 * 1.0, 0.5 * 0.0 + 0.5 * 0.0, 0.5 * 1.0])
    assert ranked(c, hybrid_scores(c, 0.5)) == ["p0", "p2", "p1"]  # ties broken by id


def test_minmax_of_equal_scores_or_an_empty_mask_is_zero() -> None:
    np.testing.assert_array_equal(minmax(np.array([3.0, 3.0])), [0.0, 0.0])
    np.testing.assert_array_equal(minmax(np.array([3.0, 1.0]), np.array([False, False])), [0.0, 0.0])
