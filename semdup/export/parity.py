"""ONNX vs torch on real posts: the check every export runs and ``parity_report`` repeats on demand.

Compared, on the same posts and batches:

* ``max_abs_dense``: the raw dense-encoder outputs, torch module vs onnxruntime session;
* ``max_abs_score``: the fused scores of all post pairs, :class:`CheckpointScorer` vs :class:`BundleScorer`;
* ``max_abs_term_weight``: t in model.pt vs term_weights.npy (0 when the arch has no BOW path).

An export is refused when ``max_abs_dense`` exceeds the tolerance (1e-4 by default).

Example::

    posts = sample_posts(64)
    parity_report("artifacts/bow-cnn-travel", "artifacts/bundles/bow-cnn-travel", posts).to_dict()
    # {"arch": "bow-cnn", "n_posts": 64, "max_abs_dense": 3.6e-07, "max_abs_score": 2.4e-07, ...}
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from semdup.core.errors import DataError, PostError
from semdup.core.inputs import build_inputs, input_names
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, check_post

__all__ = ["DEFAULT_TOLERANCE", "ParityReport", "dense_parity", "parity_report", "sample_posts"]

logger = logging.getLogger(__name__)

DEFAULT_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ParityReport:
    """How far the bundle is from its checkpoint on ``n_posts`` real posts."""

    arch: str
    version: str
    n_posts: int
    max_abs_dense: float
    max_abs_score: float
    max_abs_term_weight: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return max(self.max_abs_dense, self.max_abs_score, self.max_abs_term_weight) <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def dense_parity(
    encoder: nn.Module, session: Any, input_kind: str, pipeline: TextPipeline, posts: Sequence[Post],
    batch_size: int = 32,
) -> float:
    """Max |torch − onnxruntime| over the raw encoder outputs of ``posts`` (batched the same way)."""
    names = input_names(input_kind)
    worst = 0.0
    with torch.no_grad():
        for i in range(0, len(posts), batch_size):
            arrays = build_inputs(input_kind, pipeline, posts[i : i + batch_size])
            ref = encoder(*[torch.from_numpy(arrays[n]) for n in names]).float().numpy()
            got = session.run(["vector"], {n: arrays[n] for n in names})[0]
            worst = max(worst, float(np.max(np.abs(ref - got))))
    return worst


def parity_report(
    checkpoint_dir: str | Path, bundle_dir: str | Path, posts: Sequence[Post], tolerance: float = DEFAULT_TOLERANCE
) -> ParityReport:
    """Compare a checkpoint with the bundle exported from it on ``posts`` (see the module docstring)."""
    from semdup.bundle.scorer import BundleScorer
    from semdup.training.checkpoint import CheckpointScorer

    ckpt = CheckpointScorer.from_dir(checkpoint_dir)
    bundled = BundleScorer.load(bundle_dir)
    encoder = ckpt.model.dense_encoder()
    dense = 0.0
    if encoder is not None:
        dense = dense_parity(encoder, bundled.bundle.session, ckpt.model.input_kind, bundled.bundle.pipeline, posts)
    scores = float(np.max(np.abs(ckpt.score_matrix(posts, posts) - bundled.score_matrix(posts, posts))))
    t_ref, t_got = ckpt.model.term_weights(), bundled.bundle.term_weights
    tw = 0.0 if t_ref is None or t_got is None else float(np.max(np.abs(t_ref - t_got)))
    report = ParityReport(bundled.bundle.arch, bundled.version, len(posts), dense, scores, tw, tolerance)
    logger.info("parity %s: %s", bundled.version, report.to_dict())
    return report


def sample_posts(n: int = 64, path: str | Path | None = None) -> list[Post]:
    """Up to ``n`` distinct real posts (queries and candidates) from a pairs JSONL file.

    Default: AskUbuntu's test pairs in the shared data directory (long HTML bodies, code, URLs: every
    branch of the text pipeline). Posts the pipeline refuses (empty, binary) are skipped.
    """
    from semdup.data.pairs import load_pairs_jsonl
    from semdup.data.paths import askubuntu_files

    source = Path(path) if path is not None else askubuntu_files()[1]
    out: list[Post] = []
    seen: set[str] = set()
    for pair in load_pairs_jsonl(source):
        for post in (pair.query, pair.candidate):
            if post.id in seen:
                continue
            seen.add(post.id)
            try:
                check_post(post)
            except PostError:
                continue
            out.append(post)
            if len(out) >= n:
                return out
    if not out:
        raise DataError(f"{source} holds no usable post for the parity check; give a pairs JSONL file with posts")
    return out
