"""The scoring contract every architecture meets, torch-free, shared by evaluation, export and serving.

Every model scores a (query, candidate) pair as

    s = β_bow · cos(tf(q)∘t, tf(c)∘t) + β_dense · cos(E(q), E(c)) + α · lexnorm(q, c)
        [+ β_title · cos(E(title q), E(title c))]

(dos Santos et al. 2015, §3.3 for the first two terms; Das et al. 2016, §3.4 for the lexical
interpolation of T-SCQA). Any term may be absent: a model without term weights has no BOW
term, lexnorm is 0 unless the caller passes lexical scores. ``E`` is the exportable dense
encoder, ``t`` the learned term weights saved as a numpy array.

The title term is the hybrid default's, and optional: the same encoder on the titles alone (a duplicate usually
asks the same thing in its title, which the body, cut at the encoder's length, dilutes). A fusion without
``beta_title`` (every trained model's) has no such term; a post with an empty title has a zero title vector, so
its title cosine is 0.

This module holds the numpy half (BOW vectors, cosine, fusion) and the :class:`PostScorer`
protocol; :class:`semdup.training.checkpoint.CheckpointScorer` implements it with torch, and the
ONNX reranker implements it with onnxruntime.

Example::

    >>> fused_scores(np.array([0.5]), np.array([1.0]), None, {"beta_bow": 1.0, "beta_dense": 0.5, "alpha": 0.0})
    array([1.])
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline

__all__ = [
    "PostScorer",
    "EncodingScorer",
    "Fusion",
    "DEFAULT_FUSION",
    "TITLE_WEIGHT",
    "check_fusion",
    "title_posts",
    "title_vectors",
    "bow_matrix",
    "cosine_rows",
    "cosine_matrix",
    "fused_scores",
    "minmax_normalise",
]

logger = logging.getLogger(__name__)

Fusion = Mapping[str, float]
DEFAULT_FUSION: dict[str, float] = {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
TITLE_WEIGHT = "beta_title"  # optional: kept in a fusion only when non-zero, so older bundles keep their version


@runtime_checkable
class PostScorer(Protocol):
    """Anything that scores candidates for a query post (higher = more likely a duplicate)."""

    def score(self, query: Post, candidates: Sequence[Post], lexical: Sequence[float] | None = None) -> np.ndarray:
        """Scores [len(candidates)]; ``lexical`` are raw lexical scores (e.g. BM25) of the same candidates."""
        ...

    def score_matrix(self, queries: Sequence[Post], corpus: Sequence[Post]) -> np.ndarray:
        """Scores [len(queries), len(corpus)] for exhaustive retrieval (no lexical term)."""
        ...


def check_fusion(fusion: Mapping[str, float]) -> dict[str, float]:
    """Return the three fusion weights as floats, and ``beta_title`` when it is given and non-zero; refuse
    unknown keys."""
    accepted = {*DEFAULT_FUSION, TITLE_WEIGHT}
    unknown = set(fusion) - accepted
    if unknown:
        raise ValueError(f"unknown fusion weights {sorted(unknown)}; accepted: {sorted(accepted)}")
    out = {k: float(fusion.get(k, 0.0)) for k in DEFAULT_FUSION}
    if float(fusion.get(TITLE_WEIGHT, 0.0)) != 0.0:
        out[TITLE_WEIGHT] = float(fusion[TITLE_WEIGHT])
    return out


def title_posts(posts: Sequence[Post]) -> tuple[list[int], list[Post]]:
    """(positions of the posts with a title, those posts as title-only posts): what the title term encodes."""
    at = [i for i, p in enumerate(posts) if p.title.strip()]
    return at, [Post(posts[i].id, posts[i].title, "") for i in at]


def bow_matrix(pipeline: TextPipeline, posts: Sequence[Post], term_weights: np.ndarray) -> sp.csr_matrix:
    """L2-normalised rows tf(p)∘t as a CSR matrix [len(posts), |V|] (dos Santos et al. 2015, eq. 1).

    A post with no known word gets a zero row, so its cosine with anything is 0.
    """
    t = np.asarray(term_weights, dtype=np.float64)
    indptr, indices, values = [0], [], []
    for p in posts:
        tf = pipeline.term_frequencies(pipeline.text_tokens(p))
        ids = np.fromiter(tf.keys(), dtype=np.int64, count=len(tf))
        v = np.fromiter(tf.values(), dtype=np.float64, count=len(tf)) * t[ids] if len(tf) else np.zeros(0)
        norm = float(np.sqrt(np.sum(v * v)))
        if norm > 0:
            v = v / norm
        indices.append(ids)
        values.append(v)
        indptr.append(indptr[-1] + len(ids))
    data = np.concatenate(values) if values else np.zeros(0)
    idx = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
    return sp.csr_matrix((data, idx, np.asarray(indptr)), shape=(len(posts), len(t)))


def _normalise_dense(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(n, 1e-8)


def cosine_rows(a: np.ndarray | sp.spmatrix, b: np.ndarray | sp.spmatrix) -> np.ndarray:
    """Row-wise cosine of two matrices of the same (or broadcastable, dense) shape; sparse inputs must be
    L2-normalised already."""
    if sp.issparse(a):
        return np.asarray(a.multiply(b).sum(axis=1)).ravel()
    return np.sum(_normalise_dense(a) * _normalise_dense(b), axis=-1)


def cosine_matrix(a: np.ndarray | sp.spmatrix, b: np.ndarray | sp.spmatrix) -> np.ndarray:
    """All-pairs cosine [len(a), len(b)]; sparse inputs must be L2-normalised already."""
    if sp.issparse(a):
        return np.asarray((a @ b.T).todense())
    return _normalise_dense(a) @ _normalise_dense(b).T


def minmax_normalise(scores: Sequence[float]) -> np.ndarray:
    """Min-max normalise lexical scores over one candidate list to [0, 1] (T-SCQA's lexnorm).

    All-equal scores (or a single candidate) give zeros, not a division by zero.
    """
    x = np.asarray(scores, dtype=np.float64)
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 1e-12:
        return np.zeros_like(x)
    return (x - lo) / (hi - lo)


def title_vectors(posts: Sequence[Post], encode: Callable[[Sequence[Post]], np.ndarray], dimension: int) -> np.ndarray:
    """[N, D] float64: ``encode`` of each post's title alone, a zero row for a post without one (its title cosine is
    then 0, offline as in the reranker)."""
    out = np.zeros((len(posts), dimension))
    at, titles = title_posts(posts)
    if titles:
        out[at] = encode(titles)
    return out


def fused_scores(
    cos_bow: np.ndarray | None,
    cos_dense: np.ndarray | None,
    lexnorm: np.ndarray | None,
    fusion: Fusion,
    cos_title: np.ndarray | None = None,
) -> np.ndarray:
    """s = β_bow·cos_bow + β_dense·cos_dense + α·lexnorm (+ β_title·cos_title), absent terms counted as 0."""
    f = check_fusion(fusion)
    parts = [(f["beta_bow"], cos_bow), (f["beta_dense"], cos_dense), (f["alpha"], lexnorm)]
    parts.append((f.get(TITLE_WEIGHT, 0.0), cos_title))
    shape = next((np.shape(x) for _, x in parts if x is not None), None)
    if shape is None:
        raise ValueError("fused_scores needs at least one of cos_bow, cos_dense, lexnorm")
    out = np.zeros(shape, dtype=np.float64)
    for w, x in parts:
        if x is not None and w != 0.0:
            out += w * np.asarray(x, dtype=np.float64)
    return out


class EncodingScorer:
    """The fusion half of a :class:`PostScorer`, shared by the torch and the onnxruntime scorers.

    Subclasses provide ``encode(posts) -> (dense [N, D] or None, L2-normalised BOW CSR or None)`` and a
    ``fusion`` dict; the scores are then the same maths whatever ran the encoder.
    """

    fusion: Mapping[str, float]

    def encode(self, posts: Sequence[Post]) -> tuple[np.ndarray | None, sp.csr_matrix | None]:
        raise NotImplementedError

    def _titles(self, posts: Sequence[Post], dense: np.ndarray | None) -> np.ndarray | None:
        """Title vectors [N, D] (zero rows for posts without a title) when the fusion has a title term."""
        if dense is None or not self.fusion.get(TITLE_WEIGHT):
            return None
        return title_vectors(posts, lambda titles: self.encode(titles)[0], dense.shape[1])

    def score(self, query: Post, candidates: Sequence[Post], lexical: Sequence[float] | None = None) -> np.ndarray:
        if not candidates:
            return np.zeros(0)
        dense, bow = self.encode([query, *candidates])
        n = len(candidates)
        cos_dense = cosine_rows(np.repeat(dense[:1], n, axis=0), dense[1:]) if dense is not None else None
        cos_bow = np.asarray((bow[1:] @ bow[0].T).todense()).ravel() if bow is not None else None
        lexnorm = minmax_normalise(lexical) if lexical is not None else None
        titles = self._titles([query, *candidates], dense)
        cos_title = cosine_rows(np.repeat(titles[:1], n, axis=0), titles[1:]) if titles is not None else None
        return fused_scores(cos_bow, cos_dense, lexnorm, self.fusion, cos_title)

    def score_matrix(self, queries: Sequence[Post], corpus: Sequence[Post]) -> np.ndarray:
        q_dense, q_bow = self.encode(queries)
        c_dense, c_bow = self.encode(corpus)
        cos_dense = cosine_matrix(q_dense, c_dense) if q_dense is not None else None
        cos_bow = cosine_matrix(q_bow, c_bow) if q_bow is not None else None
        q_title, c_title = self._titles(queries, q_dense), self._titles(corpus, c_dense)
        cos_title = cosine_matrix(q_title, c_title) if q_title is not None and c_title is not None else None
        return fused_scores(cos_bow, cos_dense, None, self.fusion, cos_title)
