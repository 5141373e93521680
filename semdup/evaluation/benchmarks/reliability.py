"""The fault run of issue #13, replayed: real Travel posts through a real worker, with faults injected; nothing lost.

Each scenario sends ``--posts`` Travel posts (default 1,000) as one index job in batches of ``--batch-size``
(default 50) into a fresh index, through the real parts: a ``semdup worker`` subprocess (:class:`LocalWorker`),
its own Redis broker (:class:`LocalRedis`, a temporary folder and free port, append-only as in production), and
the OpenSearch of ``$SEMDUP_OPENSEARCH_URL`` reached by the worker only through a TCP proxy this script cuts
(:class:`TcpProxy`). Scenarios:

* ``no fault``: the reference row;
* ``worker SIGKILL``: the whole worker (main process and pool) is SIGKILLed mid-batch, then a new one started;
* ``Redis stopped``: the broker is stopped for ``--redis-down`` seconds (15), then started again;
* ``OpenSearch cut``: the worker's path to OpenSearch is cut for longer than the retry budget (twice
  ``--budget`` plus 10 s), then restored;
* ``bad id``: one post of one batch has a 600-byte id (OpenSearch refuses an ``_id`` over 512 bytes);
* ``write-blocked``: the index has ``index.blocks.write`` set for the whole job.

Each scenario waits until its job is finished (by its tasks' outcomes) or ``--settle`` seconds have passed, then
counts every sent post from the sources themselves: **written** (in the index with the bundle's model),
**parked** (in ``semdup-parked``), **queued** (in a task message on the broker: queue or unacknowledged), and
**lost**: none of those. Lost must read 0 everywhere (the script exits 1 otherwise). The job's own counts are
printed beside them, and for the worker kill and the OpenSearch cut the same census is taken during the fault.

Example::

    export SEMDUP_OPENSEARCH_URL=$(semdup opensearch start)
    python -m semdup.evaluation.benchmarks.reliability --bundle artifacts/bundles/bow-cnn-travel
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semdup.core.posts import Post

logger = logging.getLogger(__name__)

_SCENARIOS = ("no fault", "worker SIGKILL", "Redis stopped", "OpenSearch cut", "bad id", "write-blocked")


@dataclass
class Census:
    """Every sent post, by where it is found."""

    sent: int
    written: int
    parked: int
    queued: int
    lost: int

    def cells(self) -> str:
        return f"{self.sent:>6}{self.written:>9}{self.parked:>8}{self.queued:>8}{self.lost:>6}"


@dataclass
class Row:
    scenario: str
    census: Census
    job: str  # the job's own counts: written/parked of total
    seconds: float
    during: Census | None = None
    note: str = ""


class Stack:
    """The client, the worker's proxy to OpenSearch, the broker, the worker, and the bundle under test."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from semdup.bundle.bundle import Bundle
        from semdup.core.clients import connect
        from semdup.core.settings import OpenSearchSettings
        from semdup.devstack.local_process import any_free_port
        from semdup.devstack.local_redis import LocalRedis
        from semdup.devstack.local_worker import LocalWorker
        from semdup.devstack.tcp_proxy import TcpProxy
        from semdup.indexer.celery_app import configure_app

        self.args, self.workdir = args, workdir
        settings = OpenSearchSettings.from_env()
        self.client = connect(settings)
        self.bundle = Bundle.load(args.bundle)
        self.redis = LocalRedis(state_dir=workdir / "redis", port=any_free_port())
        self.redis_url = self.redis.start()
        self.proxy = TcpProxy(settings.url)
        self.proxy.up()
        self.app = configure_app(self.redis_url, visibility_timeout=args.visibility_timeout)
        env = {
            **os.environ,
            "SEMDUP_OPENSEARCH_URL": self.proxy.url,
            "SEMDUP_BROKER_URL": self.redis_url,
            "SEMDUP_BUNDLE": str(args.bundle),
            "SEMDUP_VISIBILITY_TIMEOUT": str(args.visibility_timeout),
            "SEMDUP_RETRY_BUDGET": str(args.budget),
            "OMP_NUM_THREADS": "1",
        }
        self.worker = LocalWorker(env, workdir / "worker.log")
        self.indices: list[str] = []

    def close(self) -> None:
        from semdup.indexer.outcomes import JOBS_INDEX
        from semdup.indexer.parking import PARKED_INDEX

        self.worker.stop()
        self.proxy.close()
        self.redis.stop()
        if self.indices:
            query = {"query": {"terms": {"index": self.indices}}}
            for store in (PARKED_INDEX, JOBS_INDEX):
                self.client.delete_by_query(index=store, body=query, ignore_unavailable=True, refresh=True)
            self.client.indices.delete(index=",".join(self.indices), ignore_unavailable=True)

    def fresh_index(self, scenario: str) -> str:
        from semdup.indexer.lexical_index import create_index

        index = f"semdup-reliability-{scenario.split()[0].lower().replace('-', '')}-{uuid.uuid4().hex[:6]}"
        create_index(self.client, index, dimension=self.bundle.dimension)
        self.indices.append(index)
        return index

    def census(self, index: str, sent: set[str], *, broker: bool = True) -> Census:
        from opensearchpy.helpers import scan

        from semdup.indexer.backlog import queued_post_ids
        from semdup.indexer.parking import iter_parked

        self.client.indices.refresh(index=index)
        query = {"query": {"term": {"semdup.model": self.bundle.version}}, "_source": False}
        written = {h["_id"] for h in scan(self.client, index=index, query=query)} & sent
        parked = {r.post_id for r in iter_parked(self.client, index)} & sent
        queued = (queued_post_ids(self.app, index=index) or set()) & sent if broker else set()
        lost = sent - written - parked - queued
        return Census(len(sent), len(written), len(parked), len(queued), len(lost))

    def written(self, job: Any) -> int:
        from semdup.indexer.outcomes import job_counts

        return job_counts(self.client, job.id).written


def _wait(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.1)


def run_scenario(stack: Stack, scenario: str, posts: list[Post]) -> Row:
    """One scenario on a fresh index: enqueue, inject the fault, let it settle, count."""
    from semdup.indexer.backlog import queued_tasks
    from semdup.indexer.jobs import enqueue_posts, wait_for

    args = stack.args
    index = stack.fresh_index(scenario)
    if scenario == "bad id":
        bad = posts[len(posts) // 3]
        posts = [*posts]
        posts[len(posts) // 3] = Post("x" * 600, bad.title, bad.body)
    sent = {p.id for p in posts}
    during: Census | None = None
    note = ""
    if scenario == "write-blocked":
        stack.client.indices.put_settings(index=index, body={"index.blocks.write": True})
    if not stack.worker.running:
        stack.worker.start()
    t0 = time.monotonic()
    job = enqueue_posts(stack.client, index, posts, stack.bundle.version, batch_size=args.batch_size, progress=False)
    share = len(posts) // 5
    if scenario == "worker SIGKILL":
        for _ in range(5):  # SIGKILL it while it holds a batch, not in the instant between two
            least = stack.written(job) + share
            _wait(lambda n=least: stack.written(job) >= n, "posts before the kill", 300)
            stack.worker.kill()
            held = [t for t in queued_tasks(stack.app) or [] if t.unacked and t.job == job.id]
            if held:
                note = f"killed holding {sum(len(t.post_ids()) for t in held)} posts unacknowledged"
                break
            stack.worker.start()
        during = stack.census(index, sent) if not stack.worker.running else None
        if not stack.worker.running:
            stack.worker.start()
    elif scenario == "Redis stopped":
        _wait(lambda: stack.written(job) >= share, "posts before the stop", 300)
        stack.redis.stop()
        time.sleep(args.redis_down)
        stack.redis.start()
        note = f"Redis down {args.redis_down:.0f} s"
    elif scenario == "OpenSearch cut":
        _wait(lambda: stack.written(job) >= share, "posts before the cut", 300)
        stack.proxy.down()
        down = 2 * args.budget + 10
        time.sleep(down)
        during = stack.census(index, sent)
        stack.proxy.up()
        note = f"cut {down:.0f} s (retry budget {args.budget:.0f} s)"
    done = wait_for(stack.client, job, timeout=args.settle, interval=0.5, progress=False)
    seconds = time.monotonic() - t0
    if scenario == "write-blocked":
        stack.client.indices.put_settings(index=index, body={"index.blocks.write": False})
    census = stack.census(index, sent)
    counts = f"{done.written}/{done.parked} of {done.total}" + ("" if done.finished else " (not finished)")
    return Row(scenario, census, counts, seconds, during, note)


def _print(rows: list[Row]) -> None:
    head = f"{'scenario':<16}{'sent':>6}{'written':>9}{'parked':>8}{'queued':>8}{'lost':>6}"
    print(f"{head}   job's own count (written/parked)   settled   during the fault (sent written parked queued lost)")
    for r in rows:
        during = r.during.cells() if r.during else ""
        print(f"{r.scenario:<16}{r.census.cells()}   {r.job:<34} {r.seconds:6.1f} s {during}  {r.note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory or .tar.gz")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=1000, help="posts per scenario (the first N of the dump)")
    parser.add_argument("--batch-size", type=int, default=50, help="posts per task")
    parser.add_argument("--budget", type=float, default=20.0, help="the worker's retry budget, seconds")
    parser.add_argument(
        "--visibility-timeout", type=int, default=60, help="seconds before a dead worker's batch is handed out again"
    )
    parser.add_argument("--redis-down", type=float, default=15.0, help="seconds Redis is stopped")
    parser.add_argument("--settle", type=float, default=600.0, help="seconds a scenario may take to finish")
    parser.add_argument("--only", action="append", choices=_SCENARIOS, help="run only these scenarios")
    args = parser.parse_args(argv)

    from semdup.data.paths import travel_dir
    from semdup.data.stackexchange import load_stackexchange_dump
    from semdup.evaluation.benchmarks.indexing import _hardware, _versions

    posts = list(load_stackexchange_dump(args.data or travel_dir()).posts.values())[: args.posts]
    workdir = Path(tempfile.mkdtemp(prefix="semdup-reliability-"))
    stack = Stack(args, workdir)
    rows: list[Row] = []
    try:
        for scenario in args.only or _SCENARIOS:
            rows.append(run_scenario(stack, scenario, posts))
            logger.info("%s: %s", scenario, rows[-1])
    finally:
        stack.close()
        if rows and all(r.census.lost == 0 and (r.during is None or r.during.lost == 0) for r in rows):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"worker log and Redis state kept in {workdir}", file=sys.stderr)

    module = __spec__.name if __spec__ else __name__
    print(f"command:   python -m {module} {shlex.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()}")
    print(f"versions:  {_versions()}; OpenSearch {stack.client.info()['version']['number']}")
    print(
        f"setup:     {len(posts)} Travel posts per scenario in batches of {args.batch_size}; bundle "
        f"{stack.bundle.version}; one `semdup worker -c 1`; its own Redis; retry budget {args.budget:.0f} s; "
        f"visibility timeout {args.visibility_timeout} s"
    )
    _print(rows)
    lost = sum(r.census.lost + (r.during.lost if r.during else 0) for r in rows)
    print(f"lost: {lost} ({'OK' if lost == 0 else 'FAIL'})")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    from semdup.evaluation.benchmarks import run_main

    run_main(main)
