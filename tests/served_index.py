"""An index holding posts with a bundle's fields, written as the workers write it (shared by integration tests)."""

from __future__ import annotations

from typing import Any

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.ingest.lexical_index import create_index
from semdup.opensearch_io.clients import knn_available
from semdup.search_templates import register_templates


def build_index(client: Any, index: str, bundle: Bundle, posts: list[Post], knn: bool = True) -> None:
    """A semdup index holding ``posts`` with the bundle's fields, written by the indexer's ``index_batch``, with
    both hybrid candidate paths' search structures (so the tests cover every path; ``knn=False``: without the
    vector field)."""
    create_index(client, index, dimension=bundle.dimension, knn=knn and knn_available(client), sparse=True)
    search = ensure_index_model(client, index, bundle.version)
    register_templates(client)
    result = index_batch(client, index, [p.to_json() for p in posts], bundle, search=search)
    assert not result.failed, result.failed[:3]
    client.indices.refresh(index=index)
