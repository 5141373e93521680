"""``BundleScorer``: the scoring contract over a model bundle, with onnxruntime instead of torch.

    s = β_bow · cos(tf(q)∘t, tf(c)∘t) + β_dense · cos(E(q), E(c)) + α · lexnorm

the same maths, in the same numpy functions (:mod:`semdup.encoders.scorer`), as
:class:`semdup.encoders.checkpoint.CheckpointScorer`; only ``E`` runs in onnxruntime. ``tests/test_export_parity.py``
holds the two within 1e-5 on real posts.

Example::

    scorer = BundleScorer.load("artifacts/bundles/bow-cnn-travel")
    scorer.score(query, candidates)            # np.ndarray [len(candidates)]
    scorer.score_matrix(queries, corpus)       # np.ndarray [len(queries), len(corpus)]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from semdup.encoders.scorer import bow_matrix, cosine_matrix, cosine_rows, fused_scores, minmax_normalise
from semdup.encoders.text_pipeline import check_post
from semdup.export.bundle import Bundle
from semdup.posts import Post

__all__ = ["BundleScorer"]

logger = logging.getLogger(__name__)


class BundleScorer:
    """:class:`semdup.encoders.scorer.PostScorer` over a verified :class:`Bundle` (torch-free).

    Args:
        bundle: a loaded bundle.
        batch_size: posts per onnxruntime call.
    """

    def __init__(self, bundle: Bundle, batch_size: int = 64) -> None:
        self.bundle = bundle
        self.batch_size = batch_size
        self.fusion = dict(bundle.fusion)

    @classmethod
    def load(cls, path: str | Path, providers: list[str] | None = None, intra_op_threads: int | None = None,
             batch_size: int = 64) -> BundleScorer:
        """Load and verify the bundle at ``path`` (directory or ``.tar.gz``)."""
        return cls(Bundle.load(path, providers=providers, intra_op_threads=intra_op_threads), batch_size=batch_size)

    @property
    def threshold(self) -> float | None:
        """The duplicate decision threshold chosen in training (None if none was chosen)."""
        return self.bundle.threshold

    @property
    def version(self) -> str:
        return self.bundle.version

    def encode(self, posts: Sequence[Post]) -> tuple[np.ndarray | None, Any]:
        """(dense [N, D] unit vectors or None, L2-normalised BOW CSR [N, |V|] or None)."""
        for p in posts:
            check_post(p)
        dense = self.bundle.encode_dense(posts, batch_size=self.batch_size)
        t = self.bundle.term_weights
        bow = bow_matrix(self.bundle.pipeline, posts, t) if t is not None else None
        return dense, bow

    def score(self, query: Post, candidates: Sequence[Post], lexical: Sequence[float] | None = None) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        dense, bow = self.encode([query, *candidates])
        n = len(candidates)
        cos_dense = cosine_rows(np.repeat(dense[:1], n, axis=0), dense[1:]) if dense is not None else None
        cos_bow = np.asarray((bow[1:] @ bow[0].T).todense()).ravel() if bow is not None else None
        lexnorm = minmax_normalise(lexical) if lexical is not None else None
        return fused_scores(cos_bow, cos_dense, lexnorm, self.fusion)

    def score_matrix(self, queries: Sequence[Post], corpus: Sequence[Post]) -> np.ndarray:
        q_dense, q_bow = self.encode(queries)
        c_dense, c_bow = self.encode(corpus)
        cos_dense = cosine_matrix(q_dense, c_dense) if q_dense is not None else None
        cos_bow = cosine_matrix(q_bow, c_bow) if q_bow is not None else None
        return fused_scores(cos_bow, cos_dense, None, self.fusion)
