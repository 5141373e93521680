"""``BundleScorer``: the scoring contract over a model bundle, with onnxruntime instead of torch.

    s = β_bow · cos(tf(q)∘t, tf(c)∘t) + β_dense · cos(E(q), E(c)) + α · lexnorm

the same maths, in the same numpy functions (:mod:`semdup.core.scoring`), as
:class:`semdup.training.checkpoint.CheckpointScorer`; only ``E`` runs in onnxruntime.
``tests/unit/export/test_export_parity.py`` holds the two within 1e-5 on real posts.

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

from semdup.bundle.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.scoring import EncodingScorer, bow_matrix
from semdup.core.text_pipeline import check_post

__all__ = ["BundleScorer"]

logger = logging.getLogger(__name__)


class BundleScorer(EncodingScorer):
    """:class:`semdup.core.scoring.PostScorer` over a verified :class:`Bundle` (torch-free).

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

