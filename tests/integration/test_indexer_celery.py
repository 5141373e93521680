"""The Celery indexer against the real parts: Redis broker, OpenSearch, and `semdup worker` subprocesses.

The bundle is a real one: an (untrained) BOW-CNN checkpoint over the Travel vocabulary, exported to ONNX by
``semdup.export.onnx_export.export_checkpoint`` in the test process. Every check compares what the workers
wrote with ``Bundle.document_fields`` computed here, offline.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from indexer_stack import (
    WAIT_S,
    all_docs,
    count,
    create,
    enqueue,
    wait_until,
    worker_env,
)

from benchmarks.local_worker import LocalWorker
from benchmarks.tcp_proxy import TcpProxy
from semdup.core.posts import Post

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]


# --- fixtures -----------------------------------------------------------------------------------------------


# --- helpers ------------------------------------------------------------------------------------------------
def _assert_matches_offline(docs: dict[str, dict[str, Any]], posts: list[Post], bundle: Any) -> None:
    """Every post holds exactly one vector and one term-weight set, equal (1e-5) to the offline model's."""
    from semdup.reranker.stored_fields import stored_semdup_fields

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
    from semdup.ingest.parking import count_parked

    create(opensearch_client, unique_index, bundle)
    enqueue(unique_index, travel_posts, bundle.version)
    worker.start()
    wait_until(lambda: count(opensearch_client, unique_index, bundle.version) >= 600, "600 posts", every=0.2)
    worker.kill()
    at_kill = count(opensearch_client, unique_index, bundle.version)
    assert at_kill < len(travel_posts), "the job finished before the kill; the test needs a longer job"
    worker.start()
    total = len(travel_posts)
    wait_until(lambda: count(opensearch_client, unique_index, bundle.version) >= total, f"{total} posts")
    assert count_parked(opensearch_client, unique_index) == 0
    _assert_matches_offline(all_docs(opensearch_client, unique_index), travel_posts, bundle)


def test_task_delivered_twice_writes_the_same_documents(opensearch_client, unique_index, worker, bundle, travel_posts):
    posts = travel_posts[:64]
    create(opensearch_client, unique_index, bundle)
    worker.start()
    enqueue(unique_index, posts, bundle.version)
    wait_until(lambda: count(opensearch_client, unique_index, bundle.version) == 64, "first delivery")
    first = all_docs(opensearch_client, unique_index)
    enqueue(unique_index, posts, bundle.version)  # the same message again, as a redelivery would bring it

    def second_done() -> bool:
        opensearch_client.indices.refresh(index=unique_index)
        docs = opensearch_client.mget(index=unique_index, body={"ids": [p.id for p in posts]})["docs"]
        return all(d["_version"] >= 2 for d in docs)

    wait_until(second_done, "second delivery")
    assert all_docs(opensearch_client, unique_index) == first
    _assert_matches_offline(first, posts, bundle)


def test_celery_dash_a_the_worker_app_runs_the_tasks(
    opensearch_client, opensearch_url, redis_url, unique_index, bundle_dir, bundle, travel_posts, tmp_path, celery_app
):
    """`celery -A semdup.apps.worker worker`, without the semdup CLI: the composition root's worker app reads the
    settings tree from the environment, loads the indexer's (and the alerts') task modules and writes the posts."""
    posts = travel_posts[:64]
    create(opensearch_client, unique_index, bundle)
    w = LocalWorker(
        worker_env(opensearch_url, redis_url, bundle_dir),
        tmp_path / "worker.log",
        args=("--concurrency", "1", "--pool", "prefork", "--without-mingle", "--without-gossip"),
        program=("-m", "celery", "-A", "semdup.apps.worker"),
    )
    try:
        w.start()
        enqueue(unique_index, posts, bundle.version)
        wait_until(lambda: count(opensearch_client, unique_index, bundle.version) >= len(posts), "64 posts")
    finally:
        w.stop()
    assert "semdup.alerts.flag_duplicates" in w.text() and "semdup.indexer.index_posts" in w.text()  # [tasks]
    _assert_matches_offline(all_docs(opensearch_client, unique_index), posts, bundle)


def test_opensearch_down_mid_job_is_retried_and_nothing_lost(
    opensearch_client, opensearch_url, redis_url, unique_index, bundle_dir, bundle, travel_posts, tmp_path, celery_app
):
    posts = travel_posts[:640]
    create(opensearch_client, unique_index, bundle)
    outage = TcpProxy(opensearch_url)
    outage.up()
    w = LocalWorker(worker_env(outage.url, redis_url, bundle_dir), tmp_path / "worker.log")
    try:
        w.start()
        enqueue(unique_index, posts[:320], bundle.version)
        wait_until(lambda: count(opensearch_client, unique_index, bundle.version) >= 64, "first batch", every=0.2)
        outage.down()
        enqueue(unique_index, posts[320:], bundle.version)  # these batches meet a cluster that is unreachable
        wait_until(lambda: "Retry in" in w.text(), "a retried task", timeout=120)
        outage.up()
        wait_until(lambda: count(opensearch_client, unique_index, bundle.version) >= len(posts), "all posts")
    finally:
        w.stop()
        outage.down()
    from semdup.ingest.parking import count_parked

    assert count_parked(opensearch_client, unique_index) == 0
    _assert_matches_offline(all_docs(opensearch_client, unique_index), posts, bundle)


@pytest.fixture
def short_budget_worker(tmp_path: Path, opensearch_url: str, redis_url: str, bundle_dir: Path, celery_app: Any):
    """A worker whose retry budget is 3 s: a batch only another bundle's worker could write is parked quickly."""
    w = LocalWorker(worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_RETRY_BUDGET="3"), tmp_path / "w.log")
    yield w
    w.stop()


def test_bad_posts_are_parked_visible_and_replayable(
    opensearch_client, unique_index, short_budget_worker, bundle, travel_posts
):
    """The index job's library API (enqueue, wait, replay parked) against a real worker."""
    from semdup.ingest.jobs import enqueue_posts, replay_parked, wait_for
    from semdup.ingest.parking import count_parked, iter_parked

    good = travel_posts[:5]
    create(opensearch_client, unique_index, bundle)
    short_budget_worker.start()
    bad = [Post("no-text", "", "   "), Post("binary", "\x00\x01\x02\x03\x04\x05\x06\x07\x08" * 20, "\ufffd" * 50)]
    job = enqueue_posts(opensearch_client, unique_index, good + bad, bundle.version, progress=False)
    # A good post enqueued for another model goes back to the queue for a worker of that bundle (a rolling upgrade);
    # with none, it is parked once the retry budget is spent, never dropped.
    late = travel_posts[5]
    other = enqueue_posts(opensearch_client, unique_index, [late], "bow-cnn-000000000000", progress=False)
    done = wait_for(opensearch_client, job, timeout=WAIT_S, progress=False)
    assert done.finished and (done.total, done.written, done.parked) == (7, 5, 2)
    refused = wait_for(opensearch_client, other, timeout=WAIT_S, progress=False)
    assert refused.finished and (refused.written, refused.parked) == (0, 1)
    assert count_parked(opensearch_client, unique_index) == 3
    parked = {r.post_id: r for r in iter_parked(opensearch_client, unique_index)}
    assert set(parked) == {"no-text", "binary", late.id}
    assert "neither title nor body" in parked["no-text"].error
    assert parked["no-text"].payload == {"id": "no-text", "title": "", "body": "   "}
    assert "bow-cnn-000000000000" in parked[late.id].error
    assert count(opensearch_client, unique_index, bundle.version) == 5

    replayed = replay_parked(opensearch_client, unique_index, bundle.version, progress=False)
    assert replayed.total == 3
    again = wait_for(opensearch_client, replayed, timeout=WAIT_S, progress=False)
    assert (again.written, again.parked) == (1, 2)  # the late post is written; the bad ones are parked again
    assert count(opensearch_client, unique_index, bundle.version) == 6
    assert {r.post_id for r in iter_parked(opensearch_client, unique_index)} == {"no-text", "binary"}


def test_index_posts_cli_reads_enqueues_waits_and_replays(
    opensearch_client, opensearch_url, redis_url, unique_index, worker, bundle_dir, bundle, travel_posts, tmp_path
):
    """`semdup index-posts` on a JSONL file with one post that cannot be indexed, then --list-parked and
    --replay-parked: the command creates the index, skips and names the bad line, waits, prints the job's result,
    and exits 1; the same post sent by a producer that bypasses the CLI is parked by the worker, listed, replayed,
    and the command exits 1 while it is parked."""
    import json

    from semdup.ingest.parking import count_parked

    posts = travel_posts[:20]
    source = tmp_path / "posts.jsonl"
    empty = Post("empty", "", " ")
    lines = [json.dumps(p.to_json()) for p in posts] + [json.dumps(empty.to_json())]
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = worker_env(opensearch_url, redis_url, bundle_dir)
    worker.start()

    parked = ("Error: 1 posts parked", "--replay-parked")

    def semdup(*args: str, code: int = 0, errors: tuple[str, ...] = parked) -> str:
        cmd = [sys.executable, "-m", "semdup", "index-posts", "--index", unique_index, *args]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
        assert out.returncode == code, out.stderr[-3000:]
        if code:
            assert all(e in out.stderr for e in errors), out.stderr[-3000:]
        return out.stdout

    skipped = (f"Error: 1 line of {source} skipped (listed above) and not indexed; the other 20 posts were written",)
    printed = semdup("--input", str(source), "--batch-size", "8", code=1, errors=skipped)
    assert f"created index {unique_index} (dimension {bundle.dimension}" in printed
    assert f"read 20 posts from {source} (jsonl), skipped 1 line:\n  line 21: neither title nor body" in printed
    assert f"enqueued 20 posts for {unique_index}" in printed
    assert f"20 posts written to {unique_index} with model {bundle.version}, 0 parked" in printed
    enqueue(unique_index, [empty], bundle.version)  # a producer that bypasses the CLI: the worker parks it
    wait_until(lambda: count_parked(opensearch_client, unique_index) == 1, "the worker to park the post", WAIT_S)
    listed = semdup("--list-parked")
    assert f"1 parked posts in {unique_index}" in listed and "  parked empty (index_posts): " in listed
    assert "neither title nor body" in listed
    printed = semdup("--replay-parked", "--batch-size", "8", code=1)
    assert f"replayed 1 parked posts of {unique_index}" in printed
    assert f"0 posts written to {unique_index} with model {bundle.version}, 1 parked" in printed
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
    assert f"20 posts written to {unique_index} with model {bundle.version}, 0 parked" in semdup("--input", str(good))


def test_index_posts_cli_names_and_skips_a_deeply_nested_line_and_writes_the_good_one(
    opensearch_client, opensearch_url, redis_url, unique_index, worker, bundle_dir, bundle, tmp_path
):
    """Issue #34, its repro: one line nested 1,100 levels made `semdup index-posts --input` print a traceback
    (RecursionError) and write nothing. It is a bad line like any other now: named, skipped, the rest written."""
    source = tmp_path / "deep.jsonl"
    deep = '{"id":"deep","title":"t","n":' + "[" * 1100 + "]" * 1100 + "}"
    source.write_text('{"id":"ok1","title":"a good post","body":"b"}\n' + deep + "\n", encoding="utf-8")
    worker.start()
    cmd = [sys.executable, "-m", "semdup", "index-posts", "--input", str(source), "--index", unique_index]
    env = worker_env(opensearch_url, redis_url, bundle_dir)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert f"Error: 1 line of {source} skipped (listed above) and not indexed; the other 1 posts were written" in (
        out.stderr
    ), out.stderr[-3000:]
    assert (
        f"read 1 posts from {source} (jsonl), skipped 1 line:\n  line 2: JSON that nests arrays or objects too deeply "
        "to be read (json gives up at about 1,000 levels)"
    ) in out.stdout, out.stdout
    assert set(all_docs(opensearch_client, unique_index)) == {"ok1"}
    assert count(opensearch_client, unique_index, bundle.version) == 1


def test_model_mixing_is_refused(opensearch_client, unique_index, bundle):
    from semdup.core.errors import SearchIndexError
    from semdup.index_format.mapping import index_model
    from semdup.indexer.batch_writer import ensure_index_model

    create(opensearch_client, unique_index, bundle)
    ensure_index_model(opensearch_client, unique_index, bundle.version)
    assert index_model(opensearch_client, unique_index) == {unique_index: bundle.version}
    with pytest.raises(SearchIndexError, match="never mixed"):
        ensure_index_model(opensearch_client, unique_index, "rcnn-aaaaaaaaaaaa")
