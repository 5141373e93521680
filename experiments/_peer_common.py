"""The MiniLM experiments' embedding cache: posts embedded once, reused by every later run.

Measures and protocols are not here: every experiment scores through :mod:`semdup.measures.protocols`
(and so :mod:`semdup.measures.ranking`), the code training and ``semdup eval`` use, and loads its data
with :mod:`semdup.data`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from semdup.core.posts import Post

__all__ = ["CACHE", "post_key", "cached_embeddings"]

logger = logging.getLogger(__name__)

CACHE = Path("artifacts/experiments/embeddings")


def post_key(posts: Sequence[Post]) -> str:
    """A short hash of the posts' ids and text: the cache key, so edited data is never served stale vectors."""
    h = hashlib.sha1()
    for p in posts:
        h.update(f"{p.id}\x00{p.title}\x00{p.body}\x01".encode())
    return h.hexdigest()[:16]


def cached_embeddings(tag: str, posts: Sequence[Post], embed: Callable[[Sequence[Post]], np.ndarray]) -> np.ndarray:
    """``embed(posts) -> (N, D)`` cached under artifacts/ by a hash of the posts' text."""
    path = CACHE / f"{tag}-{post_key(posts)}.npy"
    if path.exists():
        return np.load(path)
    vec = np.asarray(embed(posts), dtype=np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vec, allow_pickle=False)
    return vec
