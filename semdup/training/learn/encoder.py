"""A finished learn run's encoder, as the fit and gate tools take a bundle: ``encode_dense``, ``version``,
``dimension``.

``semdup learn`` scores every labelled query with the fold model that never saw it. Exporting each fold model to
ONNX only to score a few thousand posts would cost more than the scoring (and on a GPU machine onnxruntime may be
CPU-only); the torch model scores on the training device instead. The vectors are what the verified export gives
within its parity tolerance (mean pooling, L2-normalised, the same wordpieces), and the final model, the one that
ships, goes through the verified export.

Example::

    enc = LearnedEncoder("work/fold-0/checkpoint", device="cuda")
    enc.encode_dense(posts).shape   # (N, 384)
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from semdup.core.posts import Post
from semdup.core.text_pipeline import check_post
from semdup.training.checkpoint import WEIGHTS_FILE, load_checkpoint
from semdup.training.learn.frozen import FrozenPrefix, PostVectors

__all__ = ["LearnedEncoder"]

logger = logging.getLogger(__name__)


class LearnedEncoder:
    """Unit dense vectors of a learn checkpoint on ``device`` (float32; posts encoded in length-sorted chunks, the
    frozen bottom read from ``prefix`` when one is given: it must be the checkpoint's own)."""

    def __init__(self, checkpoint_dir: str | Path, device: str = "cpu", chunk_size: int = 64,
                 prefix: FrozenPrefix | None = None) -> None:
        folder = Path(checkpoint_dir)
        model, _, _ = load_checkpoint(folder)
        self.model = model.to(device).eval()
        self._vectors = PostVectors(self.model, prefix, chunk_size)
        self.dimension: int | None = int(self.model.dim)
        digest = hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()[:12]
        self.version = f"learned-{digest}"  # names the weights: the dense-vector cache keys on it

    def encode_dense(self, posts: Sequence[Post]) -> np.ndarray:
        """L2-normalised vectors [N, D] float32.

        Raises:
            PostError: a post with neither title nor body, or binary text.
        """
        for p in posts:
            check_post(p)
        if not posts:
            return np.zeros((0, self.dimension or 0), dtype=np.float32)
        with torch.no_grad():
            x = self._vectors(posts)
        return x.cpu().numpy().astype(np.float32)
