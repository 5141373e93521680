"""The indexer on RabbitMQ (the README's other broker): a real node, OpenSearch and `semdup worker` processes.

A worker SIGKILLed whole while it runs a batch (held there by ``held_worker.py``, so the kill never races it):
RabbitMQ saw the worker's connection close and put the batch back at once (no visibility timeout), and the next
worker writes it; nothing is lost or counted twice. The queue cannot be read on RabbitMQ (``queued_tasks`` is
None), so the job is followed by its outcomes alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from indexer_stack import configure_celery, count, create, held_worker, wait_until, worker_env

from benchmarks.local_worker import LocalWorker

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

STEP_S = 60.0


@pytest.fixture(scope="module")
def amqp_app(rabbitmq_url: str, redis_url: str) -> Iterator[Any]:
    """The indexer's Celery app on RabbitMQ for this module; back on the session's Redis afterwards."""
    from semdup.ingest.celery_app import configure_app

    yield configure_app(rabbitmq_url, visibility_timeout=10)
    configure_celery(redis_url)


def test_a_worker_killed_whole_on_rabbitmq_has_its_batch_handed_back_and_written(
    opensearch_client, opensearch_url, rabbitmq_url, amqp_app, unique_index, bundle_dir, bundle, travel_posts,
    tmp_path,
):  # fmt: skip
    from semdup.ingest.backlog import queued_tasks
    from semdup.ingest.jobs import enqueue_posts, wait_for
    from semdup.ingest.ledger import task_id
    from semdup.ingest.outcomes import job_counts

    env = worker_env(opensearch_url, rabbitmq_url, bundle_dir)
    sent = travel_posts[:400]
    create(opensearch_client, unique_index, bundle)
    job = enqueue_posts(opensearch_client, unique_index, sent, bundle.version, batch_size=50, progress=False)
    held, signal = held_worker(env, tmp_path, "task", at=3)
    try:
        held.start()
        wait_until(signal.exists, "the worker to start its 3rd batch", STEP_S, every=0.1)
        held.kill()
    finally:
        held.stop()
    killed = json.loads(signal.read_text())["task_id"]
    assert killed == task_id(job.id, "2")
    assert queued_tasks(amqp_app) is None  # RabbitMQ cannot be read without taking the messages
    assert job_counts(opensearch_client, job.id).written == 100  # the two batches before it
    worker = LocalWorker(env, tmp_path / "worker.log")
    try:
        worker.start()
        sweep = 600.0  # on, but it only ever sends batches the producer never published
        done = wait_for(opensearch_client, job, timeout=STEP_S, interval=0.5, progress=False, sweep_after=sweep)
    finally:
        worker.stop()
    assert done.finished and (done.written, done.parked) == (len(sent), 0)
    assert done.waiting.resent_batches == 0
    assert f"index_posts[{killed}] received" in worker.text()  # the broker handed the killed batch back
    assert count(opensearch_client, unique_index, bundle.version) == len(sent)
