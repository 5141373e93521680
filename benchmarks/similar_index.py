"""A Travel index for title-only figures (``/v1/similar``): every post with its lexical fields and the bundle's
semdup fields, the title vectors included, written by the indexer's own ``index_batch``.

The corpus's dense vectors and title vectors may come from ``.npy`` tables in Posts.xml order (``semdup
fit-default --cache`` keeps both; encoding 4,919 Travel posts with MiniLM takes about 13 CPU minutes); each table
is checked against the bundle on 8 posts first (:func:`experiments.alerts_eval.dense_table`'s rule). Without
tables the bundle encodes them here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import Bundle
from semdup.core import progress as progress_bar
from semdup.core.errors import BulkWriteError, DataError
from semdup.core.posts import Post
from semdup.index_format.schema import CandidateFields
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.ingest.lexical_index import create_index, delete_index
from semdup.search_templates import register_templates

__all__ = ["TableEncoder", "vector_table", "title_table", "similar_index"]

logger = logging.getLogger(__name__)


def _checked(x: np.ndarray, fresh: np.ndarray, what: str) -> None:
    diff = float(np.max(np.abs(fresh - x))) if x.size else 0.0
    if diff > 1e-3:
        raise DataError(f"{what}: its vectors differ from the bundle's by up to {diff:.3g}; drop it")


def vector_table(
    bundle: Bundle, corpus: Sequence[Post], cache: str | Path | None, *, progress: bool
) -> dict[str, np.ndarray]:
    """post id -> the bundle's dense vector of the post (from ``cache`` when given, checked on 8 posts)."""
    if cache is None:
        chunks = [
            bundle.encode_dense(corpus[i : i + 64])
            for i in progress_bar.progress(range(0, len(corpus), 64), desc="encoding posts", enabled=progress)
        ]
        return {p.id: v for p, v in zip(corpus, np.concatenate(chunks), strict=True)}
    x = np.load(cache, allow_pickle=False)
    if x.shape != (len(corpus), bundle.dimension):
        raise DataError(f"{cache}: holds {x.shape} vectors; expected ({len(corpus)}, {bundle.dimension})")
    sample = np.linspace(0, len(corpus) - 1, 8).astype(int)
    _checked(x[sample], bundle.encode_dense([corpus[i] for i in sample]), str(cache))
    return {p.id: v for p, v in zip(corpus, x, strict=True)}


def title_table(
    bundle: Bundle, corpus: Sequence[Post], cache: str | Path | None, *, progress: bool
) -> dict[str, np.ndarray | None]:
    """post id -> the bundle's title vector (None without a title), from ``cache`` when given (checked)."""
    if cache is None:
        out: dict[str, np.ndarray | None] = {}
        for i in progress_bar.progress(range(0, len(corpus), 64), desc="encoding titles", enabled=progress):
            chunk = corpus[i : i + 64]
            out.update(zip((p.id for p in chunk), bundle.encode_titles(chunk), strict=True))
        return out
    x = np.load(cache, allow_pickle=False)
    if x.shape != (len(corpus), bundle.dimension):
        raise DataError(f"{cache}: holds {x.shape} title vectors; expected ({len(corpus)}, {bundle.dimension})")
    sample = [int(i) for i in np.linspace(0, len(corpus) - 1, 8).astype(int) if corpus[int(i)].title.strip()]
    fresh = bundle.encode_titles([corpus[i] for i in sample])
    _checked(x[sample], np.stack([v for v in fresh if v is not None]), str(cache))
    return {p.id: (v if p.title.strip() else None) for p, v in zip(corpus, x, strict=True)}


class TableEncoder:
    """The indexer's document encoder with the dense and title vectors from tables computed once; the term
    weights and model id from the bundle, as ``Bundle.document_fields`` gives them."""

    def __init__(self, bundle: Bundle, vectors: dict[str, np.ndarray], titles: dict[str, np.ndarray | None]) -> None:
        self.version = bundle.version
        self.vectors = vectors
        self.titles = titles
        self._terms = Bundle(bundle.path, bundle.manifest, bundle.pipeline, bundle.term_weights, None)

    def document_fields(self, posts: Sequence[Post]) -> list[dict[str, Any]]:
        out = self._terms.document_fields(posts)
        for post, fields in zip(posts, out, strict=True):
            fields["vector"] = self.vectors[post.id].tolist()
            title = self.titles.get(post.id)
            fields["title_vector"] = None if title is None else title.tolist()
        return out


@contextmanager
def similar_index(
    client: Any,
    bundle: Bundle,
    corpus: Sequence[Post],
    *,
    vectors: str | Path | None = None,
    titles: str | Path | None = None,
    name: str = "semdup-similar-eval",
    knn: bool = True,
    keep: bool = False,
    progress: bool = True,
) -> Iterator[str]:
    """A fresh index ``name`` of ``corpus`` (lexical fields, packed vectors with title vectors, and the k-NN
    structure when ``knn``), refreshed; dropped afterwards unless ``keep``."""
    encoder = TableEncoder(
        bundle,
        vector_table(bundle, corpus, vectors, progress=progress),
        title_table(bundle, corpus, titles, progress=progress),
    )
    create_index(client, name, dimension=bundle.dimension, knn=knn)
    try:
        search = ensure_index_model(client, name, bundle.version)
        if knn and not search.knn:
            raise DataError(f"index {name!r} got no k-NN structure; does the cluster have the k-NN plugin?")
        register_templates(client)
        failed: list[tuple[str, str]] = []
        for start in progress_bar.progress(range(0, len(corpus), 256), desc=f"indexing {name}", enabled=progress):
            chunk = corpus[start : start + 256]
            failed += index_batch(client, name, [p.to_json() for p in chunk], encoder, search=search).failed
        if failed:
            raise BulkWriteError(f"{len(failed)} posts not indexed into {name!r} (first: {failed[0]})", failed)
        client.indices.refresh(index=name, request_timeout=60)
        logger.info("indexed %d posts into %s (%s)", len(corpus), name, CandidateFields(knn=knn).describe())
        yield name
    finally:
        if not keep:
            delete_index(client, name)
