"""The Celery indexer's real parts for integration tests: a Travel bundle, worker environments, counts.

Shared by ``tests/integration/test_indexer_celery.py`` and ``test_indexer_faults.py``. The bundle is a real one:
an (untrained) BOW-CNN checkpoint over the Travel vocabulary, exported to ONNX by
``semdup.export.onnx_export.export_checkpoint`` once per test process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from semdup.core.posts import Post
from semdup.data.paths import default_data_dir

# The data folder by the project's own rule (SEMDUP_DATA_DIR, else ../shared/data beside the checkout).
TRAVEL = default_data_dir() / "travel-stackexchange"
HELD_WORKER = Path(__file__).parent / "integration" / "held_worker.py"
WAIT_S = 900.0

_cache: dict[str, Any] = {}


def travel_posts() -> list[Post]:
    if "posts" not in _cache:
        from semdup.data.stackexchange import load_stackexchange_dump

        _cache["posts"] = list(load_stackexchange_dump(TRAVEL).posts.values())
    return _cache["posts"]


def travel_bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained BOW-CNN over the Travel vocabulary, exported once per test process."""
    if "bundle" not in _cache:
        torch = pytest.importorskip("torch")
        from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
        from semdup.export.onnx_export import export_checkpoint
        from semdup.training.checkpoint import save_checkpoint
        from semdup.training.registry import get_arch

        posts = travel_posts()
        torch.manual_seed(0)
        base = TextPipeline(TextPipelineSettings())
        vocab = Vocabulary.build(base.text_tokens(p) for p in posts)
        pipeline = TextPipeline(TextPipelineSettings(), vocab)
        hparams = {"word_vectors": "none", "conv_units": 32, "emb_dim": 16}
        model = get_arch("bow-cnn").model_class.from_hparams(hparams, pipeline)
        root = tmp_path_factory.mktemp("indexer-bundle")
        save_checkpoint(root / "ckpt", model, "bow-cnn", pipeline)
        _cache["bundle"] = export_checkpoint(root / "ckpt", root / "bundle", parity_posts=posts[:16]).bundle_dir
    return _cache["bundle"]


def configure_celery(redis_url: str) -> Any:
    """The indexer's Celery app on the test broker, its queue emptied of what an interrupted run left."""
    from semdup.ingest.celery_app import configure_app

    app = configure_app(redis_url, visibility_timeout=10)
    with app.connection_for_write() as conn:
        client = conn.default_channel.client
        client.delete("semdup.indexer", "unacked", "unacked_index")
    return app


def worker_env(opensearch_url: str, redis_url: str, bundle_dir: Path, **extra: str) -> dict[str, str]:
    """A worker's environment: a 10 s visibility timeout (so a killed worker's batch comes back fast)."""
    env = dict(os.environ)
    env.update(
        SEMDUP_OPENSEARCH_URL=opensearch_url,
        SEMDUP_BROKER_URL=redis_url,
        SEMDUP_BUNDLE=str(bundle_dir),
        SEMDUP_VISIBILITY_TIMEOUT="10",
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def create(client: Any, index: str, bundle: Any) -> None:
    """The index ``semdup index-posts`` creates by default: lexical fields + the packed vector and weights."""
    from semdup.ingest.lexical_index import create_index

    create_index(client, index, dimension=bundle.dimension)


def enqueue(index: str, posts: list[Post], version: str, batch: int = 64) -> None:
    """Send ``index_posts`` tasks directly (no job): what another producer than the CLI would do."""
    from semdup.indexer.tasks import index_posts

    for i in range(0, len(posts), batch):
        index_posts.apply_async(args=[index, [p.to_json() for p in posts[i : i + batch]], version])


def count(client: Any, index: str, version: str) -> int:
    client.indices.refresh(index=index)
    q = {"query": {"term": {"semdup.model": version}}}
    return int(client.count(index=index, body=q)["count"])


def wait_until(predicate: Any, what: str, timeout: float = WAIT_S, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    pytest.fail(f"gave up waiting for {what} after {timeout:.0f} s")


def all_docs(client: Any, index: str) -> dict[str, dict[str, Any]]:
    from opensearchpy.helpers import scan

    client.indices.refresh(index=index)
    return {h["_id"]: h["_source"] for h in scan(client, index=index, query={"query": {"match_all": {}}})}


def held_worker(env: dict[str, str], tmp_path: Path, mode: str, at: int) -> tuple[Any, Path]:
    """A worker that stops at its ``at``-th delivery or task and waits to be killed (``integration/held_worker.py``),
    and the file it writes when it holds there: the kill tests wait for that file, never race the worker."""
    from benchmarks.local_worker import LocalWorker

    signal = tmp_path / f"held-{mode}.json"
    hold = {"SEMDUP_TEST_HOLD": mode, "SEMDUP_TEST_HOLD_AT": str(at), "SEMDUP_TEST_HOLD_SIGNAL": str(signal)}
    return LocalWorker({**env, **hold}, tmp_path / f"held-{mode}.log", program=[str(HELD_WORKER)]), signal
