"""No HTTP batch lost when a worker is killed (issue #35): posts arrive over ``POST /v1/posts`` of a real service app
(its lifespan running, so its sweeping thread too) while a real ``semdup worker`` is SIGKILLed mid-batch; a real
Redis broker and a real OpenSearch hold the rest.

Each request is one job, its batches in the ledger before they are published
(:func:`semdup.ingest.jobs.submit`), and the service sweeps the unfinished jobs of the index it serves
(:class:`semdup.ingest.sweeper.SweepLoop`):

* killed between kombu's BRPOP and its HSET into ``unacked`` (the gap of issue #17): the batch is on the broker
  nowhere and no visibility timeout brings it back; the service's sweeper sends it again from the ledger;
* killed while it runs a batch: the batch is held unacknowledged in Redis and comes back after the visibility
  timeout (10 s here); the sweeper sees it queued and sends nothing.

Either way every post of every request is written, each request's job counts all its posts once, and the finished
jobs' ledgers are deleted. The kills happen at exact points (``held_worker.py``), never by racing a worker.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from indexer_stack import count, create, held_worker, wait_until, worker_env
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.core.post_rules import post_problem
from semdup.core.posts import Post
from semdup.core.settings import BrokerSettings, OpenSearchSettings
from benchmarks.local_worker import LocalWorker
from semdup.ingest.backlog import queued_task_ids
from semdup.ingest.ledger import done_batches, ledger_entries
from semdup.ingest.outcomes import job_counts
from semdup.reranker import Reranker

pytestmark = [pytest.mark.opensearch, pytest.mark.broker, pytest.mark.slow]

KEY = "ingest-key-5d0e-7d2f0c9e4b1a"
SWEEP_AFTER_S = 10.0  # the service's bound (SEMDUP_SWEEP_AFTER): it sweeps every 2.5 s
STEP_S = 90.0  # the longest any single wait below may take
PER_REQUEST = 100  # posts per request: two batches (64 + 36)


def _send(http: TestClient, posts: list[Post]) -> dict[str, Any]:
    r = http.post("/v1/posts", json={"posts": [p.to_json() for p in posts]}, headers={"X-API-Key": KEY})
    assert r.status_code == 202, r.text
    assert (r.json()["enqueued"], r.json()["tasks"]) == (len(posts), 2)
    return r.json()


@pytest.mark.parametrize(
    ("hold", "at", "resent"),
    [
        ("delivery", 2, 1),  # the 2nd batch taken off the queue, never recorded unacknowledged: sent again
        ("task", 3, 0),  # the 3rd batch running: unacknowledged, back after the visibility timeout
    ],
)
def test_a_worker_killed_mid_batch_loses_no_batch_posted_over_http(
    hold: str,
    at: int,
    resent: int,
    opensearch_client: Any,
    opensearch_url: str,
    redis_url: str,
    unique_index: str,
    bundle: Any,
    bundle_dir: Path,
    celery_app: Any,
    travel_posts: list[Post],
    tmp_path: Path,
) -> None:
    posts = [p for p in travel_posts if post_problem(p) is None][: 5 * PER_REQUEST]  # what the endpoint takes
    create(opensearch_client, unique_index, bundle)
    settings = service_settings(
        {"bundle": str(bundle_dir), "index": unique_index, "api_keys": f"{KEY}:{unique_index}:ingest"},
        OpenSearchSettings(url=opensearch_url),
        broker=BrokerSettings(url=redis_url),
    )
    settings = settings.model_copy(update={"sweep_after": SWEEP_AFTER_S})
    env = worker_env(opensearch_url, redis_url, bundle_dir)
    held, signal = held_worker(env, tmp_path, hold, at=at)
    worker = LocalWorker(env, tmp_path / "worker.log")
    app = create_app(settings, reranker=Reranker(bundle, opensearch_client, unique_index))
    with TestClient(app) as http:  # the lifespan starts the service's sweeping thread
        try:
            jobs = [_send(http, posts[:PER_REQUEST]), _send(http, posts[PER_REQUEST : 2 * PER_REQUEST])]
            held.start()
            wait_until(signal.exists, f"the worker to hold at its {at}th {hold}", STEP_S, every=0.1)
            caught = json.loads(signal.read_text())["task_id"]
            job, batch = caught.rsplit("-", 1)
            # Checked at once, well within the sweeper's bound: it cannot have sent the batch again yet.
            on_broker = queued_task_ids(app.state.broker)
            assert on_broker is not None and (job, batch) not in done_batches(opensearch_client, [job])
            if hold == "delivery":  # off the queue, never recorded unacknowledged: only the job's ledger has it
                assert caught not in on_broker and (job, batch) in ledger_entries(opensearch_client, jobs=[job])
            else:  # running: held unacknowledged, so still queued
                assert on_broker.get(caught) is True
            jobs.append(_send(http, posts[2 * PER_REQUEST : 3 * PER_REQUEST]))  # posts arrive while it holds
            held.kill()
            jobs += [_send(http, posts[k * PER_REQUEST : (k + 1) * PER_REQUEST]) for k in (3, 4)]  # and after
            worker.start()
            wait_until(
                lambda: count(opensearch_client, unique_index, bundle.version) == len(posts),
                f"all {len(posts)} posts written",
                STEP_S,
            )
            ids = [j["job"] for j in jobs]
            wait_until(  # the sweeper deletes a finished job's ledger at its next look
                lambda: not ledger_entries(opensearch_client, jobs=ids), "the finished jobs' ledgers deleted", STEP_S
            )
        finally:
            held.stop()
            worker.stop()
        assert app.state.sweeps.sweeper.resent_total == resent
    for j in jobs:  # each request's job counts each of its posts once: nothing lost, nothing twice
        c = job_counts(opensearch_client, j["job"])
        assert (c.written, c.parked, c.skipped) == (PER_REQUEST, 0, 0), j
    assert len(done_batches(opensearch_client, [j["job"] for j in jobs])) == 2 * len(jobs)
    assert count(opensearch_client, unique_index, bundle.version) == len(posts)
