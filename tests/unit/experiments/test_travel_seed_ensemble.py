"""MeanScorer: the seed-ensemble experiment's score is the plain mean of its members' scores."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.travel_seed_ensemble import MeanScorer
from semdup.core.errors import ConfigError
from semdup.core.posts import Post


class _Fixed:
    """A fake member: score = a fixed matrix (unit test of the averaging only)."""

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix

    def score(self, query: Post, candidates, lexical=None) -> np.ndarray:
        return self.matrix[0, : len(candidates)]

    def score_matrix(self, queries, corpus) -> np.ndarray:
        return self.matrix


def test_mean_of_members_for_matrices_and_single_queries() -> None:
    a, b = np.array([[1.0, 0.0, 2.0]]), np.array([[3.0, 2.0, 0.0]])
    mean = MeanScorer([_Fixed(a), _Fixed(b)])
    posts = [Post(str(i), f"t{i}", "b") for i in range(3)]
    np.testing.assert_allclose(mean.score_matrix(posts[:1], posts), [[2.0, 1.0, 1.0]])
    np.testing.assert_allclose(mean.score(posts[0], posts), [2.0, 1.0, 1.0])


def test_an_empty_ensemble_is_refused() -> None:
    with pytest.raises(ConfigError, match="at least one"):
        MeanScorer([])
