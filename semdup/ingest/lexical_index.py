"""Create a semdup index from code and load posts into it: the lexical half of indexing."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from semdup.core.errors import BulkWriteError, PostError
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipelineSettings
from semdup.index_format.documents import index_action
from semdup.index_format.layout import Shape
from semdup.index_format.schema import CandidateFields, index_body
from semdup.opensearch_io.boundary import ItemFailure, OpenSearch
from semdup.opensearch_io.bulk import BulkReport, bulk_write
from semdup.search_templates import ensure_templates

__all__ = ["create_index", "load_posts", "delete_index"]

logger = logging.getLogger(__name__)


def create_index(
    client: OpenSearch,
    index: str,
    *,
    dimension: int | None = None,
    knn: bool = False,
    sparse: bool = False,
    recreate: bool = False,
    shape: Shape | None = None,
) -> None:
    """Create ``index`` with semdup's schema; ``recreate`` drops an existing one first.

    ``knn`` / ``sparse`` add the search structures of the reranker's k-NN / learned-sparse candidate paths
    (:class:`~semdup.index_format.schema.CandidateFields`); without them the index holds the packed fields the
    fusion reads, and semantic indexing costs much less. ``shape``: its shards and replicas (the settings'
    ``IndexLayout.created()``; default one shard, ``auto_expand_replicas: 0-1``).

    Raises:
        OpenSearchRefused: OpenSearch refused the index (its name, or it exists already), with its status and type.
    """
    if recreate:
        client.indices.delete(index=index, ignore_unavailable=True)
    fields = CandidateFields(sparse=sparse, knn=knn)
    client.indices.create(index=index, body=index_body(shape=shape, dimension=dimension, fields=fields))
    ensure_templates(client)  # the reranker's candidate searches of this index need them


def load_posts(
    client: OpenSearch,
    index: str,
    posts: Sequence[Post],
    *,
    settings: TextPipelineSettings | None = None,
    progress: bool = True,
    refresh: bool = True,
    strict: bool = True,
) -> BulkReport:
    """Bulk-load posts with their ids as ``_id``. Posts that cannot be indexed are reported, never dropped silently.

    Raises:
        BulkWriteError: with ``strict``, when any post failed (all failures listed on the error).
    """
    skipped: list[ItemFailure] = []

    def actions():
        for p in posts:
            try:
                yield index_action(index, p, settings)
            except PostError as exc:
                skipped.append(ItemFailure.of_error(p.id, exc))

    report = bulk_write(client, actions(), total=len(posts), progress=progress, description=f"indexing {index}")
    report.failed.extend(skipped)
    if refresh:
        client.indices.refresh(index=index)
    if report.failed:
        logger.warning("%d of %d posts were not indexed into %s", len(report.failed), len(posts), index)
        if strict:
            first = "; ".join(f"{f.id}: {f}" for f in report.failed[:3])
            message = f"{len(report.failed)} posts were not indexed into {index!r} ({first})"
            raise BulkWriteError(message, report.failed)
    return report


def delete_index(client: OpenSearch, index: str) -> None:
    client.indices.delete(index=index, ignore_unavailable=True)
