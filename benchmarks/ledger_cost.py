"""What the job ledger costs (issue #17): enqueue time against publishing alone, and bytes kept in ``semdup-jobs``.

Every batch of a job is recorded in ``semdup-jobs`` before it is published (:mod:`semdup.ingest.ledger`): one bulk
request per 100 batches, one update of the job record per 100 batches, and the batches' arguments kept in
``_source`` (an object with ``enabled: false``: nothing indexed). This sends the whole Travel dump (4,919 posts,
batches of 64) ``--runs`` times each way to a throwaway Redis: ``publish`` alone (what producers did before the
ledger) and ``ledger`` (records, publish, sent mark), alternating, the queue emptied after each; it prints the
median seconds of each and their ratio (the load average beside it: timings on a shared machine are noisy), and
the ledger's size on disk (one job's records copied into a scratch index with the jobs mapping, merged to one
segment) per post, beside the posts' JSON size. A finished job's records are deleted (only its outcomes stay).

Example::

    export SEMDUP_OPENSEARCH_URL=$(semdup opensearch start)
    python -m benchmarks.ledger_cost --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _ledger_bytes(client: Any, job_id: str) -> int:
    """Bytes on disk of one job's ledger records: copied alone into a scratch index with the jobs mapping, flushed
    and merged to one segment (the jobs index itself also holds other records and files still in use)."""
    from semdup.index_format.system_indices import JOBS
    from semdup.ingest.outcomes import JOBS_INDEX

    scratch = f"semdup-ledger-cost-{job_id}"
    client.indices.create(index=scratch, body=JOBS.body)
    try:
        client.indices.refresh(index=JOBS_INDEX)
        query = {"bool": {"filter": [{"term": {"job": job_id}}, {"term": {"kind": "batch"}}]}}
        body = {"source": {"index": JOBS_INDEX, "query": query}, "dest": {"index": scratch}}
        client.reindex(body=body, refresh=True, request_timeout=600)
        client.indices.flush(index=scratch)
        client.indices.forcemerge(index=scratch, max_num_segments=1, request_timeout=600)
        stats = client.indices.stats(index=scratch, metric="store")
        return int(stats["indices"][scratch]["primaries"]["store"]["size_in_bytes"])
    finally:
        client.indices.delete(index=scratch, ignore_unavailable=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--batch-size", type=int, default=64, help="posts per task")
    parser.add_argument("--runs", type=int, default=3, help="runs of each way")
    args = parser.parse_args(argv)

    from benchmarks.indexing import _hardware, _versions
    from semdup.apps.settings import load_settings
    from semdup.core.task_names import INDEX_POSTS
    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.devstack.local_process import any_free_port
    from semdup.devstack.local_redis import LocalRedis
    from semdup.ingest import ledger
    from semdup.ingest.celery_app import QUEUE, configure_app
    from semdup.ingest.ledger import TaskCall
    from semdup.ingest.outcomes import JOBS_INDEX, ensure_jobs_index, new_job, record_job
    from semdup.opensearch_io.bulk import chunked
    from semdup.opensearch_io.clients import connect

    posts = [p.to_json() for p in load_stackexchange_dump(args.data or travel_dir()).posts.values()]
    client = connect(load_settings().opensearch_settings())
    workdir = Path(tempfile.mkdtemp(prefix="semdup-ledger-cost-"))
    redis = LocalRedis(state_dir=workdir, port=any_free_port())
    app = configure_app(redis.start(), visibility_timeout=300)
    ensure_jobs_index(client)
    times: dict[str, list[float]] = {"publish": [], "ledger": []}
    size = 0
    try:

        def empty_queue() -> None:
            with app.connection_for_write() as conn:
                conn.default_channel.client.delete(QUEUE)

        for run in range(args.runs):
            for way in ("publish", "ledger"):
                job = new_job("ledger-cost", "v", total=len(posts))
                batches = chunked(posts, args.batch_size)
                calls = [TaskCall(INDEX_POSTS, ["ledger-cost", b, "v"], job.id) for b in batches]
                if way == "ledger":
                    record_job(client, job)
                t0 = time.perf_counter()
                if way == "publish":
                    for call in calls:
                        call.send(app)
                else:
                    ledger.publish(client, job, calls, app=app)
                times[way].append(time.perf_counter() - t0)
                if way == "ledger":
                    if run == 0:
                        size = _ledger_bytes(client, job.id)
                    ledger.forget_batches(client, job.id)
                    client.delete(index=JOBS_INDEX, id=f"job/{job.id}", refresh=True)
                empty_queue()
    finally:
        redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    text = sum(len(json.dumps(p)) for p in posts)
    publish, with_ledger = statistics.median(times["publish"]), statistics.median(times["ledger"])
    module = __spec__.name if __spec__ else __name__
    print(f"command:   python -m {module} {shlex.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()}; load average {os.getloadavg()[0]:.2f}")
    print(f"versions:  {_versions()}; OpenSearch {client.info()['version']['number']}")
    n_batches = -(-len(posts) // args.batch_size)
    print(f"setup:     {len(posts)} Travel posts in {n_batches} batches of {args.batch_size}; {args.runs} runs each")
    print(f"enqueue:   publish alone {publish:.2f} s, with the ledger {with_ledger:.2f} s (median; ratio "
          f"{with_ledger / publish:.2f}); runs {[round(t, 2) for t in times['publish']]} / "
          f"{[round(t, 2) for t in times['ledger']]}")  # fmt: skip
    print(f"ledger:    {size / 1e6:.2f} MB in {JOBS_INDEX} for this job ({size / len(posts):.0f} bytes per post); "
          f"the posts as JSON: {text / 1e6:.2f} MB ({text / len(posts):.0f} bytes per post)")  # fmt: skip
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
