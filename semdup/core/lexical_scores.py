"""Torch-free TF-IDF and BM25 over the shared text pipeline's tokens, as sparse matrix products.

Used in training (lexically hard negatives for Travel: the non-duplicates a bag of words ranks
highest) and for T-SCQA's lexical term, min-max normalised with
:func:`semdup.core.scoring.minmax_normalise`. The query-time lexical scores in production come
from OpenSearch; these are for offline work only.

    tfidf(q, d) = cos(tf(q)·idf, tf(d)·idf)
    bm25(q, d)  = Σ_{w∈q} idf_bm25(w) · tf(w,d)·(k1+1) / (tf(w,d) + k1·(1 − b + b·|d|/avgdl))
    idf_bm25(w) = log(1 + (N − df + 0.5)/(df + 0.5))          (Robertson & Zaragoza 2009, eq. 3.3)

Example::

    >>> index = LexicalIndex.build(pipeline, corpus, kind="bm25")
    >>> index.score_matrix(pipeline, queries).shape   # (len(queries), len(corpus))
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline

__all__ = ["LexicalIndex", "LEXICAL_KINDS"]

logger = logging.getLogger(__name__)

LEXICAL_KINDS = ("tfidf", "bm25")


def _term_counts(tokens_list: Sequence[Sequence[str]], stoi: dict[str, int]) -> sp.csr_matrix:
    indptr, indices, data = [0], [], []
    for toks in tokens_list:
        counts: dict[int, int] = {}
        for t in toks:
            i = stoi.get(t)
            if i is not None:
                counts[i] = counts.get(i, 0) + 1
        indices.extend(counts.keys())
        data.extend(counts.values())
        indptr.append(len(indices))
    return sp.csr_matrix(
        (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int64), indptr),
        shape=(len(tokens_list), len(stoi)),
    )


def _l2_rows(m: sp.csr_matrix) -> sp.csr_matrix:
    norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    return sp.diags(1.0 / np.maximum(norms, 1e-12)) @ m


@dataclass(frozen=True)
class LexicalIndex:
    """A corpus as a sparse document–term matrix ready for TF-IDF cosine or BM25 scoring.

    Args:
        kind: ``"tfidf"`` or ``"bm25"``.
        stoi: the corpus's own term → column map (built from the corpus tokens).
        doc_matrix: [N, V] weighted document vectors (L2-normalised tf·idf, or BM25 term weights).
        idf: [V] idf weights applied to query terms.
        ids: the documents' post ids, in row order.
    """

    kind: str
    stoi: dict[str, int]
    doc_matrix: sp.csr_matrix
    idf: np.ndarray
    ids: tuple[str, ...]

    @classmethod
    def build(
        cls, pipeline: TextPipeline, corpus: Sequence[Post], kind: str = "bm25", k1: float = 1.2, b: float = 0.75
    ) -> LexicalIndex:
        """Index ``corpus`` (title + body tokens of the shared pipeline)."""
        if kind not in LEXICAL_KINDS:
            raise ValueError(f"unknown lexical kind {kind!r}; accepted: {LEXICAL_KINDS}")
        docs = [pipeline.text_tokens(p) for p in corpus]
        stoi: dict[str, int] = {}
        for toks in docs:
            for t in toks:
                stoi.setdefault(t, len(stoi))
        tf = _term_counts(docs, stoi)
        n = tf.shape[0]
        df = np.bincount(tf.indices, minlength=len(stoi)).astype(np.float64)
        if kind == "tfidf":
            idf = np.log(n / np.maximum(df, 1.0))
            mat = _l2_rows(tf @ sp.diags(idf))
        else:
            idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
            dl = np.asarray(tf.sum(axis=1)).ravel()
            avgdl = max(float(dl.mean()), 1e-9) if n else 1.0
            mat = tf.tocoo(copy=True)
            denom = mat.data + k1 * (1 - b + b * dl[mat.row] / avgdl)
            mat.data = mat.data * (k1 + 1) / denom
            mat = mat.tocsr()
        logger.info("lexical index (%s): %d documents, %d terms", kind, n, len(stoi))
        return cls(kind, stoi, sp.csr_matrix(mat), idf, tuple(p.id for p in corpus))

    def score_matrix(self, pipeline: TextPipeline, queries: Sequence[Post]) -> np.ndarray:
        """Scores [len(queries), N] of every query against every indexed document."""
        q = _term_counts([pipeline.text_tokens(p) for p in queries], self.stoi)
        if self.kind == "tfidf":
            q = _l2_rows(q @ sp.diags(self.idf))
        else:
            q = q.sign() @ sp.diags(self.idf)  # each distinct query term once
        return np.asarray((q @ self.doc_matrix.T).todense())

    def top_k(self, pipeline: TextPipeline, queries: Sequence[Post], k: int) -> list[list[str]]:
        """The ``k`` highest-scoring document ids per query (query's own id excluded)."""
        scores = self.score_matrix(pipeline, queries)
        out = []
        for qi, q in enumerate(queries):
            order = np.argsort(-scores[qi], kind="stable")[: k + 1]
            out.append([self.ids[j] for j in order if self.ids[j] != q.id][:k])
        return out
