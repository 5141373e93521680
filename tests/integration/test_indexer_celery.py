"""The Celery indexer against the real parts: Redis broker, OpenSearch, and `semdup worker` subprocesses.

The bundle is a real one: an (untrained) BOW-CNN checkpoint over the Travel vocabulary, exported to ONNX by
``semdup.export.onnx_export.export_checkpoint`` in the test process. Every check compares what the workers
wrote with ``Bundle.document_fields`` computed here, offline.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from semdup.core.posts import Post

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

TRAVEL = Path(os.environ.get("SEMDUP_DATA", "/work/shared/data")) / "travel-stackexchange"
WAIT_S = 900.0


# --- fixtures -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def travel_posts() -> list[Post]:
    from semdup.data.stackexchange import load_stackexchange_dump

    return list(load_stackexchange_dump(TRAVEL).posts.values())


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory, travel_posts: list[Post]) -> Path:
    torch = pytest.importorskip("torch")
    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
    from semdup.export.onnx_export import export_checkpoint
    from semdup.training.checkpoint import save_checkpoint
    from semdup.training.registry import get_arch

    torch.manual_seed(0)
    base = TextPipeline(TextPipelineSettings())
    vocab = Vocabulary.build(base.text_tokens(p) for p in travel_posts)
    pipeline = TextPipeline(TextPipelineSettings(), vocab)
    hparams = {"word_vectors": "none", "conv_units": 32, "emb_dim": 16}
    model = get_arch("bow-cnn").model_class.from_hparams(hparams, pipeline)
    root = tmp_path_factory.mktemp("indexer-bundle")
    save_checkpoint(root / "ckpt", model, "bow-cnn", pipeline)
    return export_checkpoint(root / "ckpt", root / "bundle", parity_posts=travel_posts[:16]).bundle_dir


@pytest.fixture(scope="module")
def bundle(bundle_dir: Path) -> Any:
    from semdup.bundle.bundle import Bundle

    return Bundle.load(bundle_dir)


@pytest.fixture(scope="module")
def celery_app(redis_url: str) -> Any:
    from semdup.indexer.celery_app import configure_app

    app = configure_app(redis_url, visibility_timeout=10)
    with app.connection_for_write() as conn:
        conn.default_channel.client.delete("semdup.indexer")  # a queue left by an earlier, interrupted run
    return app


class Worker:
    """A `semdup worker` subprocess in its own process group (so SIGKILL takes the pool children too)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log, self.proc = env, log, None

    def start(self, timeout: float = 120.0) -> None:
        start_at = self.log.stat().st_size if self.log.exists() else 0
        out = self.log.open("ab")
        cmd = [sys.executable, "-m", "semdup", "worker", "--concurrency", "1", "--loglevel", "INFO"]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[start_at:].decode("utf-8", "replace")
            if "ready." in text:
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.3)
        raise RuntimeError(f"worker not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def _env(opensearch_url: str, redis_url: str, bundle_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SEMDUP_OPENSEARCH_URL=opensearch_url,
        SEMDUP_BROKER_URL=redis_url,
        SEMDUP_BUNDLE=str(bundle_dir),
        SEMDUP_VISIBILITY_TIMEOUT="10",
        OMP_NUM_THREADS="1",
    )
    return env


@pytest.fixture
def worker(tmp_path: Path, opensearch_url: str, redis_url: str, bundle_dir: Path, celery_app: Any):
    w = Worker(_env(opensearch_url, redis_url, bundle_dir), tmp_path / "worker.log")
    yield w
    w.stop()


class Outage:
    """A TCP forwarder in front of OpenSearch that the test can cut and restore: a real network outage."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.split("://", 1)[-1].rstrip("/").split(":")
        self.upstream = (host, int(port))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def up(self) -> None:
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()

    def down(self) -> None:
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept() (Linux)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self._conns.clear()

    def _accept(self, ls: socket.socket) -> None:
        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


# --- helpers ------------------------------------------------------------------------------------------------
def _create(client: Any, index: str, bundle: Any) -> None:
    """The index ``semdup index-posts`` creates by default: lexical fields + the packed vector and weights."""
    from semdup.indexer.lexical_index import create_index

    create_index(client, index, dimension=bundle.dimension)


def _enqueue(index: str, posts: list[Post], version: str, batch: int = 64) -> None:
    from semdup.indexer.tasks import index_posts

    for i in range(0, len(posts), batch):
        index_posts.apply_async(args=[index, [p.to_json() for p in posts[i : i + batch]], version])


def _count(client: Any, index: str, version: str) -> int:
    client.indices.refresh(index=index)
    q = {"query": {"term": {"semdup.model": version}}}
    return int(client.count(index=index, body=q)["count"])


def _wait_for(predicate, what: str, timeout: float = WAIT_S, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    pytest.fail(f"gave up waiting for {what} after {timeout:.0f} s")


def _all_docs(client: Any, index: str) -> dict[str, dict[str, Any]]:
    from opensearchpy.helpers import scan

    client.indices.refresh(index=index)
    return {h["_id"]: h["_source"] for h in scan(client, index=index, query={"query": {"match_all": {}}})}


def _assert_matches_offline(docs: dict[str, dict[str, Any]], posts: list[Post], bundle: Any) -> None:
    """Every post holds exactly one vector and one term-weight set, equal (1e-5) to the offline model's."""
    from semdup.reranker.candidates import stored_semdup_fields

    expected = bundle.document_fields(posts)
    assert set(docs) == {p.id for p in posts}
    for post, exp in zip(posts, expected, strict=True):
        source = docs[post.id]["semdup"]
        assert source["model"] == bundle.version
        packed = stored_semdup_fields(source, bundle.feature_names())  # the packed copy the reranker reads
        assert packed["vector"] is not None and packed["terms"] is not None, post.id
        # the search structures' copies too, where the index holds them (rank_features terms, knn vector)
        for got in (packed, source):
            if got.get("vector") is not None:
                vec = np.asarray(got["vector"], dtype=np.float64)
                assert vec.shape == (bundle.dimension,), post.id
                np.testing.assert_allclose(vec, np.asarray(exp["vector"]), atol=1e-5, rtol=0, err_msg=post.id)
            if got.get("terms") is not None:
                assert set(got["terms"]) == set(exp["terms"]), post.id
                for k, w in exp["terms"].items():
                    assert abs(got["terms"][k] - w) <= 1e-5, (post.id, k)


# --- tests --------------------------------------------------------------------------------------------------
def test_travel_dump_survives_worker_sigkill(opensearch_client, unique_index, worker, bundle, travel_posts):
    """The whole Travel dump (4,919 posts); the worker is SIGKILLed mid-job, restarted, and nothing is lost."""
    from semdup.indexer.parking import count_parked

    _create(opensearch_client, unique_index, bundle)
    _enqueue(unique_index, travel_posts, bundle.version)
    worker.start()
    _wait_for(lambda: _count(opensearch_client, unique_index, bundle.version) >= 600, "600 posts", every=0.2)
    worker.kill()
    at_kill = _count(opensearch_client, unique_index, bundle.version)
    assert at_kill < len(travel_posts), "the job finished before the kill; the test needs a longer job"
    worker.start()
    total = len(travel_posts)
    _wait_for(lambda: _count(opensearch_client, unique_index, bundle.version) >= total, f"{total} posts")
    assert count_parked(opensearch_client, unique_index) == 0
    _assert_matches_offline(_all_docs(opensearch_client, unique_index), travel_posts, bundle)


def test_task_delivered_twice_writes_the_same_documents(opensearch_client, unique_index, worker, bundle, travel_posts):
    posts = travel_posts[:64]
    _create(opensearch_client, unique_index, bundle)
    worker.start()
    _enqueue(unique_index, posts, bundle.version)
    _wait_for(lambda: _count(opensearch_client, unique_index, bundle.version) == 64, "first delivery")
    first = _all_docs(opensearch_client, unique_index)
    _enqueue(unique_index, posts, bundle.version)  # the same message again, as a redelivery would bring it

    def second_done() -> bool:
        opensearch_client.indices.refresh(index=unique_index)
        docs = opensearch_client.mget(index=unique_index, body={"ids": [p.id for p in posts]})["docs"]
        return all(d["_version"] >= 2 for d in docs)

    _wait_for(second_done, "second delivery")
    assert _all_docs(opensearch_client, unique_index) == first
    _assert_matches_offline(first, posts, bundle)


def test_opensearch_down_mid_job_is_retried_and_nothing_lost(
    opensearch_client, opensearch_url, redis_url, unique_index, bundle_dir, bundle, travel_posts, tmp_path, celery_app
):
    posts = travel_posts[:640]
    _create(opensearch_client, unique_index, bundle)
    outage = Outage(opensearch_url)
    outage.up()
    w = Worker(_env(outage.url, redis_url, bundle_dir), tmp_path / "worker.log")
    try:
        w.start()
        _enqueue(unique_index, posts[:320], bundle.version)
        _wait_for(lambda: _count(opensearch_client, unique_index, bundle.version) >= 64, "first batch", every=0.2)
        outage.down()
        _enqueue(unique_index, posts[320:], bundle.version)  # these batches meet a cluster that is unreachable
        _wait_for(lambda: "Retry in" in w.text(), "a retried task", timeout=120)
        outage.up()
        _wait_for(lambda: _count(opensearch_client, unique_index, bundle.version) >= len(posts), "all posts")
    finally:
        w.stop()
        outage.down()
    from semdup.indexer.parking import count_parked

    assert count_parked(opensearch_client, unique_index) == 0
    _assert_matches_offline(_all_docs(opensearch_client, unique_index), posts, bundle)


def test_bad_posts_are_parked_visible_and_replayable(opensearch_client, unique_index, worker, bundle, travel_posts):
    """The index job's library API (enqueue, wait, replay parked) against a real worker."""
    from semdup.indexer.jobs import JobProgress, enqueue_posts, replay_parked, wait_for
    from semdup.indexer.parking import count_parked, iter_parked

    good = travel_posts[:5]
    _create(opensearch_client, unique_index, bundle)
    worker.start()
    bad = [Post("no-text", "", "   "), Post("binary", "\x00\x01\x02\x03\x04\x05\x06\x07\x08" * 20, "\ufffd" * 50)]
    ids = enqueue_posts(unique_index, good + bad, bundle.version, progress=False)
    # A good post enqueued for another model is refused before any write and parked, not dropped.
    late = travel_posts[5]
    enqueue_posts(unique_index, [late], "bow-cnn-000000000000", progress=False)
    done = wait_for(opensearch_client, unique_index, ids, bundle.version, timeout=WAIT_S, progress=False)
    assert done == JobProgress(unique_index, bundle.version, total=7, written=5, parked=2)
    _wait_for(lambda: count_parked(opensearch_client, unique_index) == 3, "3 parked posts")
    parked = {r.post_id: r for r in iter_parked(opensearch_client, unique_index)}
    assert set(parked) == {"no-text", "binary", late.id}
    assert "neither title nor body" in parked["no-text"].error
    assert parked["no-text"].payload == {"id": "no-text", "title": "", "body": "   "}
    assert "bow-cnn-000000000000" in parked[late.id].error
    assert _count(opensearch_client, unique_index, bundle.version) == 5

    replayed = replay_parked(opensearch_client, unique_index, bundle.version, progress=False)
    assert sorted(replayed) == sorted(parked)
    again = wait_for(opensearch_client, unique_index, replayed, bundle.version, timeout=WAIT_S, progress=False)
    assert (again.written, again.parked) == (1, 2)  # the late post is written; the bad ones are parked again
    assert _count(opensearch_client, unique_index, bundle.version) == 6
    assert {r.post_id for r in iter_parked(opensearch_client, unique_index)} == {"no-text", "binary"}


def test_index_posts_cli_reads_enqueues_waits_and_replays(
    opensearch_url, redis_url, unique_index, worker, bundle_dir, bundle, travel_posts, tmp_path
):
    """`semdup index-posts` on a JSONL file with one post that cannot be indexed, then --list-parked and
    --replay-parked: the command creates the index, waits, and prints the job's result and the parked post."""
    import json

    posts = travel_posts[:20]
    source = tmp_path / "posts.jsonl"
    lines = [json.dumps(p.to_json()) for p in posts] + [json.dumps({"id": "empty", "title": "", "body": " "})]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = _env(opensearch_url, redis_url, bundle_dir)
    worker.start()

    def semdup(*args: str) -> str:
        cmd = [sys.executable, "-m", "semdup", "index-posts", "--index", unique_index, *args]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    printed = semdup("--input", str(source), "--batch-size", "8")
    assert f"created index {unique_index} (dimension {bundle.dimension}" in printed
    assert f"20 posts written to {unique_index} with model {bundle.version}, 1 parked" in printed
    assert "  parked empty (index_posts): " in printed
    assert f"1 parked posts in {unique_index}" in semdup("--list-parked")
    printed = semdup("--replay-parked", "--batch-size", "8")
    assert f"replayed 1 parked posts of {unique_index}" in printed
    assert f"0 posts written to {unique_index} with model {bundle.version}, 1 parked" in printed


def test_model_mixing_is_refused(opensearch_client, unique_index, bundle):
    from semdup.core.errors import IndexError_
    from semdup.index_format.mapping import index_model
    from semdup.indexer.semantic import ensure_index_model

    _create(opensearch_client, unique_index, bundle)
    ensure_index_model(opensearch_client, unique_index, bundle.version)
    assert index_model(opensearch_client, unique_index) == {unique_index: bundle.version}
    with pytest.raises(IndexError_, match="never mixed"):
        ensure_index_model(opensearch_client, unique_index, "rcnn-aaaaaaaaaaaa")


def test_enable_and_backfill_a_foreign_index(opensearch_client, unique_index, worker, bundle, travel_posts):
    """An index made by plain opensearch-py gains semdup; its documents and searches stay as they were."""
    from opensearchpy.helpers import bulk

    from semdup.index_format.schema import CandidateFields
    from semdup.indexer.backfill import count_pending, enqueue_backfill
    from semdup.indexer.enable import enable_index

    posts = travel_posts[:300]
    opensearch_client.indices.create(
        index=unique_index,
        body={
            "mappings": {
                "dynamic": "strict",
                "properties": {"subject": {"type": "text"}, "content": {"type": "text"}, "tags": {"type": "keyword"}},
            }
        },
    )
    bulk(
        opensearch_client,
        (
            {"_index": unique_index, "_id": p.id, "_source": {"subject": p.title, "content": p.body, "tags": ["t"]}}
            for p in posts
        ),
        refresh=True,
    )
    queries = [
        {"match": {"content": "visa schengen"}},
        {"multi_match": {"query": "cheap flights", "fields": ["subject", "content"]}},
    ]

    def hits() -> list[dict[str, float]]:
        """Every hit of each query with its score (size covers the whole index)."""
        opensearch_client.indices.refresh(index=unique_index)
        out = []
        for q in queries:
            r = opensearch_client.search(index=unique_index, body={"query": q, "size": len(posts)})
            out.append({h["_id"]: h["_score"] for h in r["hits"]["hits"]})
        return out

    before_hits = hits()
    before_docs = _all_docs(opensearch_client, unique_index)

    enable_index(
        opensearch_client,
        unique_index,
        version=bundle.version,
        dimension=bundle.dimension,
        title_field="subject",
        body_field="content",
        fields=CandidateFields(sparse=True),  # the backfill also fills a search structure
    )
    worker.start()
    enqueued = enqueue_backfill(opensearch_client, unique_index, bundle.version, progress=False)
    assert sorted(enqueued) == sorted(p.id for p in posts)
    _wait_for(lambda: count_pending(opensearch_client, unique_index, bundle.version) == 0, "backfill")

    # The same queries find the same documents in the same order. (Scores move by well under 1%: the
    # partial updates rewrite each document, which shifts BM25's shard statistics a little.)
    def ranked(h: dict[str, float]) -> list[str]:
        return [k for k, _ in sorted(h.items(), key=lambda kv: (-round(kv[1], 2), kv[0]))]

    after_hits = hits()
    for before, after in zip(before_hits, after_hits, strict=True):
        assert before and before.keys() == after.keys()
        assert ranked(before)[:10] == ranked(after)[:10]
    after_docs = _all_docs(opensearch_client, unique_index)
    assert {k: {f: v for f, v in d.items() if f != "semdup"} for k, d in after_docs.items()} == before_docs
    _assert_matches_offline(after_docs, posts, bundle)
    assert all("terms" in d["semdup"] and "vector" not in d["semdup"] for d in after_docs.values())  # --sparse only
    # Resumable: nothing is left to enqueue once everything holds the current model.
    assert enqueue_backfill(opensearch_client, unique_index, bundle.version, progress=False) == []
