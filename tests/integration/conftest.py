"""Fixtures shared by the reranker's integration tests: real AskUbuntu posts, a tiny exported bow-cnn bundle, and
an index holding them written by the indexer's own ``index_batch``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from served_index import build_index
from tiny_models import tiny_checkpoint

from semdup.bundle import Bundle
from semdup.core.posts import Post
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import sample_posts


@pytest.fixture(scope="module")
def real_posts() -> list[Post]:
    return sample_posts(80)


@pytest.fixture(scope="module")
def tiny_bundle(real_posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("rr-bundle")
    ckpt = tiny_checkpoint("bow-cnn", real_posts, root / "ckpt")
    return export_checkpoint(ckpt, root / "bow-cnn", parity_posts=real_posts[:8]).bundle_dir


@pytest.fixture(scope="module")
def served(opensearch_client: Any, tiny_bundle: Path, real_posts: list[Post]) -> Iterator[tuple[Bundle, str]]:
    """(bundle, index) with every sample post indexed; the index is dropped after the module."""
    import uuid

    bundle = Bundle.load(tiny_bundle)
    index = f"semdup-test-reranker-{uuid.uuid4().hex[:8]}"
    build_index(opensearch_client, index, bundle, real_posts)
    yield bundle, index
    opensearch_client.indices.delete(index=index, ignore_unavailable=True)
