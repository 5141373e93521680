"""The Jaccard word-shingle baseline of Bogdanova et al. 2015 (§5.1) on the AskUbuntu pairs: shingle size and
threshold chosen on train, accuracy reported on test once. Torch-free.

    python -m experiments.shingles_baseline

    J_n(q, c) = |S_n(q) ∩ S_n(c)| / |S_n(q) ∪ S_n(c)|,  S_n = the set of n-word shingles (n = 1..4)

A pair is a duplicate when J_n exceeds a threshold; n and the threshold are tuned on training
pairs (:func:`tune_shingle_size`). Tokens come from the shared text pipeline (title + body).

Example::

    >>> pipe = TextPipeline(TextPipelineSettings())
    >>> ShingleJaccardScorer(pipe, size=1).score(Post("q", "mount usb"), [Post("c", "mount usb drive")])
    array([0.66666667])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings
from semdup.data import load_pairs_jsonl
from semdup.data.paths import askubuntu_files
from semdup.measures.fitting import best_threshold, grid_search, pair_accuracy

__all__ = ["SHINGLE_SIZES", "shingles", "jaccard", "ShingleJaccardScorer", "tune_shingle_size", "main"]

logger = logging.getLogger(__name__)

SHINGLE_SIZES = (1, 2, 3, 4)


def shingles(tokens: Sequence[str], size: int) -> frozenset[tuple[str, ...]]:
    """The set of contiguous ``size``-word shingles; a text shorter than ``size`` is one shingle."""
    if size < 1:
        raise ValueError(f"shingle size must be >= 1, got {size}")
    if len(tokens) < size:
        return frozenset([tuple(tokens)]) if tokens else frozenset()
    return frozenset(tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """|a ∩ b| / |a ∪ b|, 0 when both are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


class ShingleJaccardScorer:
    """Scores a query's candidates by Jaccard over word shingles (a :class:`~semdup.core.scoring.PostScorer`'s
    ``score``).

    Args:
        pipeline: the shared text pipeline (no vocabulary needed).
        size: shingle size n (1–4).
    """

    def __init__(self, pipeline: TextPipeline, size: int = 1) -> None:
        if size not in SHINGLE_SIZES:
            raise ValueError(f"shingle size {size} not in {SHINGLE_SIZES}")
        self.pipeline = pipeline
        self.size = size

    def _sets(self, posts: Sequence[Post]) -> list[frozenset]:
        return [shingles(self.pipeline.text_tokens(p), self.size) for p in posts]

    def score(self, query: Post, candidates: Sequence[Post], lexical: Sequence[float] | None = None) -> np.ndarray:
        q = self._sets([query])[0]
        return np.asarray([jaccard(q, c) for c in self._sets(candidates)], dtype=np.float64)


def tune_shingle_size(pipeline: TextPipeline, pairs: Sequence[Any]) -> tuple[int, float, float]:
    """Best (size, threshold, train accuracy %) over sizes 1–4 on labelled ``PostPair`` records."""
    labels = [bool(p.duplicate) for p in pairs]

    def threshold_at(n: int) -> dict[str, float]:
        scorer = ShingleJaccardScorer(pipeline, n)
        thr, acc = best_threshold([jaccard(*scorer._sets([p.query, p.candidate])) for p in pairs], labels)
        logger.info("shingle size %d: best train accuracy %.2f at threshold %.4f", n, acc, thr)
        return {"threshold": thr, "accuracy": acc}

    fit = grid_search(SHINGLE_SIZES, threshold_at, metric="accuracy")  # ties: the smaller size
    return fit.point, fit.figures["threshold"], fit.value


def main() -> None:
    """The Jaccard baseline on the AskUbuntu pairs (Bogdanova protocol):
    shingle size and threshold chosen on train, accuracy reported on test."""
    train_path, test_path = askubuntu_files()
    pipeline = TextPipeline(TextPipelineSettings())
    size, threshold, train_acc = tune_shingle_size(pipeline, load_pairs_jsonl(train_path))
    test = load_pairs_jsonl(test_path)
    scorer = ShingleJaccardScorer(pipeline, size)
    scores = [float(scorer.score(p.query, [p.candidate])[0]) for p in test]
    acc = pair_accuracy(scores, [p.duplicate for p in test], threshold)
    print(f"jaccard shingles: size {size}, threshold {threshold:.4f} (train accuracy {train_acc:.2f}); "
          f"test accuracy {acc:.2f} on {len(test)} pairs")


if __name__ == "__main__":
    main()
