"""The evaluation runners measure the candidate paths they name: k-NN only when asked, not the service's auto."""

from __future__ import annotations

from semdup.evaluation.through_reranker import DENSE_ALONE, _reranker


class NamedBundle:
    version = "hybrid-minilm-0123abcd"
    fusion = {"beta_bow": 0.1, "beta_dense": 1.0, "alpha": 0.1}
    term_weights = None
    dimension = 384
    threshold = None


def test_a_runners_reranker_takes_knn_only_when_asked() -> None:
    assert _reranker(NamedBundle(), None, "travel").settings.knn is False  # candidate recall's "bm25" row
    assert _reranker(NamedBundle(), None, "travel", knn=True).settings.knn is True
    peer = _reranker(NamedBundle(), None, "travel", DENSE_ALONE)
    assert peer.fusion["beta_dense"] == 1.0 and peer.fusion["alpha"] == 0.0
