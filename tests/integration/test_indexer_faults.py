"""Nothing lost under faults (issue #13, items 1-4): real OpenSearch, Redis and `semdup worker` processes.

Every post ends written, parked, or still queued on the broker, and the CLI counts by its own tasks' outcomes:

* an OpenSearch outage longer than the retry budget (a TCP proxy in front of the cluster, cut): the batches
  cannot park either, so they stay on the broker and are written once the cluster is back;
* a post whose id OpenSearch refuses (600 bytes): parked alone, with a record whose ``_id`` is a hash;
* a write-blocked index holding old copies of the posts: every post parked, ``index-posts`` says so and exits 1;
* no worker running: ``index-posts`` says the posts are still queued, exits 1, and ``--job`` follows them later;
* a file with an empty id and a line that is not UTF-8 (issue #17): both lines named, every other post written;
* a worker SIGKILLed whole while it runs a batch: its batch comes back after the visibility timeout (10 s here);
* a worker SIGKILLed between kombu's BRPOP and its HSET into ``unacked`` (issue #17): the batch is on the broker
  nowhere, and the job's sweeper sends it again;
* OpenSearch cut while ``--job`` waits: it says so in its log lines, then finishes.

The kills happen at exact points (``held_worker.py`` stops the worker there and signals), never by racing a
worker with sleeps.

Each test stays well under a minute; the retry budget is 3 s here (``SEMDUP_RETRY_BUDGET``), 30 minutes by default.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from indexer_stack import all_docs, count, create, held_worker, wait_until, worker_env
from indexer_stack import travel_posts as _travel_posts

from benchmarks.local_worker import LocalWorker
from benchmarks.tcp_proxy import TcpProxy
from semdup.core.posts import Post

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

BUDGET_S = "3"
STEP_S = 60.0  # the longest any single wait below may take


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return _travel_posts()


@pytest.fixture
def env(opensearch_url: str, redis_url: str, bundle_dir: Path, celery_app: Any) -> dict[str, str]:
    return worker_env(opensearch_url, redis_url, bundle_dir, SEMDUP_RETRY_BUDGET=BUDGET_S)


@pytest.fixture
def worker(tmp_path: Path, env: dict[str, str]):
    w = LocalWorker(env, tmp_path / "worker.log")
    yield w
    w.stop()


def _queued(job: Any) -> set[str]:
    from semdup.ingest.backlog import queued_post_ids
    from semdup.ingest.celery_app import app

    ids = queued_post_ids(app, job=job.id)
    assert ids is not None, "the test broker is Redis: its queue can be read"
    return ids


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "semdup", "index-posts", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=STEP_S * 3, check=False)


def _jsonl(path: Path, posts: list[Post]) -> Path:
    path.write_text("".join(json.dumps(p.to_json()) + "\n" for p in posts), encoding="utf-8")
    return path


def test_an_outage_longer_than_the_retry_budget_keeps_the_batches_queued(
    opensearch_client, opensearch_url, unique_index, env, bundle, posts, tmp_path
):
    """The worker's only path to OpenSearch is cut for 4x the retry budget: no batch is acknowledged and dropped.
    Parking fails too (same cluster), so every post stays on the broker, and all are written once it is back."""
    from semdup.ingest.jobs import enqueue_posts, wait_for
    from semdup.ingest.outcomes import job_counts

    sent = posts[:200]
    create(opensearch_client, unique_index, bundle)
    proxy = TcpProxy(opensearch_url)
    proxy.up()
    w = LocalWorker({**env, "SEMDUP_OPENSEARCH_URL": proxy.url}, tmp_path / "worker.log")
    try:
        w.start()
        proxy.down()
        cut_at = time.monotonic()
        job = enqueue_posts(opensearch_client, unique_index, sent, bundle.version, batch_size=25, progress=False)
        wait_until(lambda: "could neither be written nor parked" in w.text(), "a spent budget", STEP_S, every=0.5)
        time.sleep(max(0.0, cut_at + 4 * float(BUDGET_S) - time.monotonic()))
        # Mid-outage: nothing written, nothing parked, every post still in a message on the broker.
        assert job_counts(opensearch_client, job.id).written == 0
        assert _queued(job) == {p.id for p in sent}
        assert "Retry in" in w.text()
        proxy.up()
        done = wait_for(opensearch_client, job, timeout=STEP_S, interval=0.5, progress=False)
    finally:
        w.stop()
        proxy.close()
    assert done.finished and (done.written, done.parked) == (200, 0)
    assert count(opensearch_client, unique_index, bundle.version) == 200
    assert _queued(job) == set()


def test_a_bad_id_is_parked_alone_and_the_rest_of_its_batch_written(
    opensearch_client, unique_index, worker, bundle, posts
):
    from semdup.indexer.batch_writer import _bulk_or_split
    from semdup.ingest.jobs import enqueue_posts, replay_parked, wait_for
    from semdup.ingest.parking import PARKED_INDEX, iter_parked

    long_id = "q" * 600
    batch = posts[:9] + [Post(long_id, "A valid post", "whose id OpenSearch refuses")]
    create(opensearch_client, unique_index, bundle)
    worker.start()
    job = enqueue_posts(opensearch_client, unique_index, batch, bundle.version, batch_size=10, progress=False)
    done = wait_for(opensearch_client, job, timeout=STEP_S, interval=0.5, progress=False)
    assert done.finished and (done.written, done.parked) == (9, 1)
    assert count(opensearch_client, unique_index, bundle.version) == 9
    (record,) = list(iter_parked(opensearch_client, unique_index))
    assert record.post_id == long_id and "600 bytes" in record.error and record.payload["title"] == "A valid post"
    assert record.record_id != long_id and len(record.record_id) < 512
    hit = opensearch_client.get(index=PARKED_INDEX, id=record.record_id)["_source"]
    assert hit["post_id"] == long_id  # the raw id is kept in a field

    again = wait_for(
        opensearch_client, replay_parked(opensearch_client, unique_index, bundle.version, progress=False),
        timeout=STEP_S, interval=0.5, progress=False,
    )  # fmt: skip
    assert (again.written, again.parked) == (0, 1)  # parked again, not lost
    # Below the task: a bulk request OpenSearch refuses whole is split until the refused document stands alone.
    actions = [
        {"_op_type": "index", "_index": unique_index, "_id": i, "_source": {"post_id": i, "title": "t"}}
        for i in ("split-1", long_id, "split-2")
    ]
    report = _bulk_or_split(opensearch_client, actions)
    assert report.written == 2 and [f.id for f in report.failed] == [long_id] and report.failed[0].status == 400


def test_a_write_blocked_index_parks_every_post_and_the_cli_exits_1(
    opensearch_client, unique_index, worker, env, bundle, posts, tmp_path
):
    """Old copies of the posts are already there (same model): they must not pass for this run's writes."""
    from semdup.ingest.parking import count_parked

    sent = posts[:30]
    source = _jsonl(tmp_path / "posts.jsonl", sent)
    worker.start()
    first = _cli(env, "--input", str(source), "--index", unique_index, "--batch-size", "10")
    assert first.returncode == 0, first.stderr[-2000:]
    opensearch_client.indices.put_settings(index=unique_index, body={"index.blocks.write": True})
    try:
        blocked = _cli(env, "--input", str(source), "--index", unique_index, "--batch-size", "10")
    finally:
        opensearch_client.indices.put_settings(index=unique_index, body={"index.blocks.write": False})
    assert blocked.returncode == 1, blocked.stdout[-2000:]
    assert f"0 posts written to {unique_index} with model {bundle.version}, 30 parked" in blocked.stdout
    assert "cluster_block_exception" in blocked.stdout
    assert "Error: 30 posts parked" in blocked.stderr and "--replay-parked" in blocked.stderr
    assert count_parked(opensearch_client, unique_index) == 30

    replayed = _cli(env, "--index", unique_index, "--replay-parked", "--batch-size", "10")
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert f"30 posts written to {unique_index} with model {bundle.version}, 0 parked" in replayed.stdout
    assert count_parked(opensearch_client, unique_index) == 0


def test_an_empty_id_and_a_non_utf8_line_cost_those_lines_only(
    opensearch_client, unique_index, worker, env, bundle, posts, tmp_path
):
    """Issue #17: one bad line used to refuse all 68 posts of a file. Now the CLI names both lines, sends the other
    66, the worker writes every one of them, and the command exits 1 saying that lines were skipped."""
    sent = posts[:68]
    lines = [json.dumps(p.to_json()).encode("utf-8") for p in sent]
    lines[16] = json.dumps({**sent[16].to_json(), "id": ""}).encode("utf-8")  # line 17
    lines[41] = b'{"id": "\xff' + lines[41][len(b'{"id": "') :]  # line 42: a byte that is not UTF-8, column 9
    source = tmp_path / "posts.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    worker.start()
    out = _cli(env, "--input", str(source), "--index", unique_index, "--batch-size", "10")
    assert out.returncode == 1, out.stderr[-2000:]
    assert (
        f"read 66 posts from {source} (jsonl), skipped 2 lines:\n"
        "  line 17: empty id\n"
        "  line 42: not UTF-8 (byte 0xff at column 9)\n"
    ) in out.stdout
    assert f"66 posts written to {unique_index} with model {bundle.version}, 0 parked" in out.stdout
    assert out.stderr.strip().endswith(
        f"Error: 2 lines of {source} skipped (listed above) and not indexed; the other 66 posts were written. "
        "Fix those records and index them again (writing a post twice is harmless)"
    ), out.stderr[-2000:]
    expected = {p.id for n, p in enumerate(sent) if n not in (16, 41)}
    assert set(all_docs(opensearch_client, unique_index)) == expected and len(expected) == 66
    assert count(opensearch_client, unique_index, bundle.version) == 66


def test_with_no_worker_the_cli_says_the_posts_are_queued_and_follows_the_job_later(
    opensearch_client, unique_index, worker, env, bundle, posts, tmp_path
):
    sent = posts[:40]
    source = _jsonl(tmp_path / "posts.jsonl", sent)
    waited = _cli(env, "--input", str(source), "--index", unique_index, "--batch-size", "10", "--timeout", "3")
    assert waited.returncode == 1
    assert "0 posts written" in waited.stdout
    assert "40 of 40 posts not done after 3 s (40 still queued on the broker, 0 neither queued nor done)" in (
        waited.stderr
    )
    assert "visibility timeout (10 s)" in waited.stderr and "backfill" not in waited.stderr
    job_id = re.search(r"--job ([0-9a-f]+)", waited.stderr).group(1)
    assert f"job {job_id}: enqueued 40 posts" in waited.stdout

    worker.start()
    followed = _cli(env, "--index", unique_index, "--job", job_id, "--timeout", str(STEP_S))
    assert followed.returncode == 0, followed.stderr[-2000:]
    assert f"40 posts written to {unique_index} with model {bundle.version}, 0 parked" in followed.stdout
    assert count(opensearch_client, unique_index, bundle.version) == 40


def test_a_worker_killed_whole_hands_its_batches_back_after_the_visibility_timeout(
    opensearch_client, unique_index, worker, env, bundle, posts, tmp_path
):
    """Killed while it runs its 5th batch (held there, so the kill never races it): that batch is unacknowledged
    in Redis, the other 35 are queued, and the visibility timeout (10 s) hands it to the next worker."""
    from semdup.ingest.backlog import queued_tasks
    from semdup.ingest.celery_app import app
    from semdup.ingest.jobs import enqueue_posts, wait_for
    from semdup.ingest.ledger import task_id
    from semdup.ingest.outcomes import job_counts

    sent = posts[:2000]
    create(opensearch_client, unique_index, bundle)
    job = enqueue_posts(opensearch_client, unique_index, sent, bundle.version, batch_size=50, progress=False)
    held, signal = held_worker(env, tmp_path, "task", at=5)
    try:
        held.start()
        wait_until(signal.exists, "the worker to start its 5th batch", STEP_S, every=0.1)
        held.kill()
    finally:
        held.stop()
    assert json.loads(signal.read_text())["task_id"] == task_id(job.id, "4")
    unacked = {t.task_id for t in queued_tasks(app) or [] if t.unacked and t.job == job.id}
    assert unacked == {task_id(job.id, "4")}  # its batch is held unacknowledged in Redis: still queued, not lost
    assert job_counts(opensearch_client, job.id).written == 200  # the four batches before it
    assert _queued(job) == {p.id for p in sent[200:]}  # every other post: nothing lost
    worker.start()
    sweep = 600.0  # on, but too slow to matter: the visibility timeout brings the batch back
    done = wait_for(opensearch_client, job, timeout=STEP_S, interval=0.5, progress=False, sweep_after=sweep)
    assert done.finished and (done.written, done.parked) == (len(sent), 0)
    assert done.waiting.resent_batches == 0
    assert count(opensearch_client, unique_index, bundle.version) == len(sent)


def test_a_worker_killed_between_taking_a_batch_and_recording_it_unacknowledged_loses_nothing(
    opensearch_client, unique_index, worker, env, bundle, posts, tmp_path
):
    """The gap of issue #17: kombu's BRPOP took the 2nd batch off the queue, the worker dies before its HSET into
    ``unacked``. Redis holds it nowhere and no visibility timeout brings it back; the job's ledger does: the
    sweeper sends it again once it has been neither done nor queued for its bound (5 s here)."""
    from semdup.ingest.backlog import queued_task_ids
    from semdup.ingest.celery_app import app
    from semdup.ingest.jobs import enqueue_posts, wait_for
    from semdup.ingest.ledger import done_batches, ledger_entries, task_id

    sent = posts[:300]
    create(opensearch_client, unique_index, bundle)
    job = enqueue_posts(opensearch_client, unique_index, sent, bundle.version, batch_size=50, progress=False)
    held, signal = held_worker(env, tmp_path, "delivery", at=2)
    try:
        held.start()
        wait_until(signal.exists, "the worker to take its 2nd batch", STEP_S, every=0.1)
        lost = json.loads(signal.read_text())["task_id"]
        assert lost == task_id(job.id, "1")
        assert lost not in (queued_task_ids(app) or {})
        assert (job.id, "1") not in done_batches(opensearch_client, [job.id])
        held.kill()
    finally:
        held.stop()
    on_broker = queued_task_ids(app)
    assert on_broker is not None and lost not in on_broker  # gone from Redis for good
    assert set(on_broker) == {task_id(job.id, str(k)) for k in range(2, 6)}
    worker.start()
    done = wait_for(
        opensearch_client, job, timeout=STEP_S, interval=0.5, progress=False, sweep_after=5
    )
    assert done.finished and (done.written, done.parked) == (len(sent), 0)
    assert done.waiting.resent_batches == 1
    assert count(opensearch_client, unique_index, bundle.version) == len(sent)
    assert done_batches(opensearch_client, [job.id]) == {(job.id, str(k)) for k in range(6)}  # one outcome each
    assert ledger_entries(opensearch_client, jobs=[job.id]) == {}  # a finished job's ledger is deleted


def test_a_wait_says_that_opensearch_is_unreachable_while_it_is(
    opensearch_client, opensearch_url, unique_index, worker, env, bundle, posts, tmp_path
):
    """``--job`` through a proxy cut mid-wait: the CLI (no terminal: log lines) says what it waits on, then goes on."""
    from semdup.ingest.jobs import enqueue_posts

    sent = posts[:40]
    create(opensearch_client, unique_index, bundle)
    job = enqueue_posts(opensearch_client, unique_index, sent, bundle.version, batch_size=10, progress=False)
    proxy = TcpProxy(opensearch_url)
    proxy.up()
    out, err = tmp_path / "cli.out", tmp_path / "cli.err"
    cmd = [sys.executable, "-m", "semdup", "index-posts", "--index", unique_index, "--job", job.id]
    cli_env = {**env, "SEMDUP_OPENSEARCH_URL": proxy.url}
    proc = None
    try:
        with out.open("w") as o, err.open("w") as e:
            proc = subprocess.Popen([*cmd, "--timeout", str(STEP_S * 2)], env=cli_env, stdout=o, stderr=e)

        def said(text: str, where: Path) -> bool:
            assert proc.poll() is None, f"the CLI exited with {proc.returncode}: {err.read_text()[-3000:]}"
            return text in where.read_text()

        wait_until(lambda: said(f"job {job.id}: waiting for 40 of 40 posts", out), "the wait", STEP_S, every=0.2)
        proxy.down()
        wait_until(lambda: said("OpenSearch unreachable for", err), "the outage line", STEP_S, every=0.2)
        proxy.up()
        # no worker runs yet, so the recovery line can only say 0 of 40; the worker starts once it is said
        wait_until(lambda: said("nothing holds it up now", err), "the recovery line", STEP_S, every=0.2)
        worker.start()
        assert proc.wait(timeout=STEP_S * 2) == 0, err.read_text()[-2000:]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        proxy.close()
    said = err.read_text()
    assert f"job {job.id}: 0 of 40 posts done; OpenSearch unreachable for" in said
    assert "40 posts held on the broker, the workers retry them" in said
    assert f"job {job.id}: 0 of 40 posts done; nothing holds it up now" in said
    assert f"40 posts written to {unique_index}" in out.read_text()
