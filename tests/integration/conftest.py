"""Fixtures shared by the integration tests.

The reranker's: real AskUbuntu posts, a tiny exported bow-cnn bundle, and an index holding them written by the
indexer's own ``index_batch``. The indexer's (:mod:`indexer_stack`): the Travel posts, the Travel BOW-CNN bundle, the
Celery app on the test broker and a ``semdup worker`` subprocess (a module may override any of them, e.g. a worker
with another environment).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from indexer_stack import configure_celery, travel_bundle_dir, worker_env
from indexer_stack import travel_posts as _travel_posts
from served_index import build_index
from tiny_models import tiny_checkpoint

from benchmarks.local_worker import LocalWorker
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


# --- the indexer's real parts --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def travel_posts() -> list[Post]:
    return _travel_posts()


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return travel_bundle_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def bundle(bundle_dir: Path) -> Any:
    return Bundle.load(bundle_dir)


@pytest.fixture(scope="module")
def celery_app(redis_url: str) -> Any:
    return configure_celery(redis_url)


@pytest.fixture
def worker(tmp_path: Path, opensearch_url: str, redis_url: str, bundle_dir: Path, celery_app: Any) -> Iterator[Any]:
    """A ``semdup worker`` (not started: ``worker.start()``), stopped after the test."""
    w = LocalWorker(worker_env(opensearch_url, redis_url, bundle_dir), tmp_path / "worker.log")
    yield w
    w.stop()
