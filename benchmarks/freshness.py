"""Freshness of a companion: the lag from a site's write to a searchable, current semdup vector, with a real Celery
worker, on this machine, in one run (not a test).

A site's index (plain opensearch-py, ``Title`` / ``Body`` / ``Tags`` / ``CreationDate``, behind an alias) of
``--posts`` Travel posts is connected with ``enable_index`` and its companion filled by one real ``semdup worker``
(``LocalWorker``, concurrency 1) through ``enqueue_sync``. Then, in each mode, the site writes ``--writes`` posts at a
steady ``--rate`` (every other one a new post through the alias, the others a partial update of an existing post's
``Title``), and nothing else:

* called: right after each write the site sends ``sync_posts`` with the post's id as a job of one batch, through the
  HTTP ingest's own publishing app and ``submit`` (what ``POST /v1/posts/sync`` does, ledger included, without the
  HTTP hop);
* watch: nobody calls semdup; ``reconcile.watch`` runs every ``--interval`` seconds in this process (what
  ``semdup watch --interval`` runs) and finds the new and edited posts by content hash.

For each write, the lag is the time from the site's write returning to the first search on the companion alias
whose hit for that id carries the new text's content hash (polled every ``--poll`` seconds: a search, so only a
document the companion has refreshed counts; the companion refreshes every second). It prints p50 / p95 / max per
mode, and the writes still not current ``--timeout`` seconds after the last one.

The tasks go through a private Redis database of the broker (``--broker-db``), so a worker of someone else's on the
same broker never takes them and this worker never takes theirs; the queue there is emptied first.

Example::

    python -m benchmarks.freshness --bundle artifacts/demo/default-minilm-travel
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from benchmarks.indexing import _hardware, _versions
from benchmarks.report import format_table, summary
from benchmarks.site_index import make_site_index, site_doc, site_posts

logger = logging.getLogger(__name__)


def private_broker(url: str, db: int) -> str:
    """``url`` with Redis database ``db`` (``redis://h:6379/0`` -> ``redis://h:6379/9``); other brokers as given."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


@dataclass
class Tracker:
    """Writes not yet current in the companion, and the lags of those that became current."""

    pending: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> (write time, new content hash)
    lags: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, doc_id: str, at: float, content: str) -> None:
        with self.lock:
            self.pending[doc_id] = (at, content)

    def seen(self, hashes: dict[str, str], now: float) -> None:
        """Record the lag of each pending id whose companion hash is now the new one."""
        with self.lock:
            for doc_id, h in hashes.items():
                want = self.pending.get(doc_id)
                if want is not None and h == want[1]:
                    self.lags.append(now - want[0])
                    del self.pending[doc_id]


def poll(client: Any, companion: str, tracker: Tracker, stop: threading.Event, every: float) -> None:
    """Search the companion for the pending ids every ``every`` seconds until ``stop``."""
    while not stop.is_set():
        with tracker.lock:
            ids = list(tracker.pending)
        if ids:
            body = {
                "query": {"ids": {"values": ids}},
                "size": len(ids),
                "_source": False,
                "docvalue_fields": ["semdup.content_hash"],
            }
            resp = client.search(index=companion, body=body, request_timeout=30)
            now = time.monotonic()
            got = {
                h["_id"]: (h.get("fields") or {}).get("semdup.content_hash", [None])[0] for h in resp["hits"]["hits"]
            }
            tracker.seen(got, now)
        stop.wait(every)


class _Stopped(Exception):
    pass


def run_watch(
    client: Any, index: str, version: str, interval: float, stop: threading.Event, rounds: list[Any]
) -> None:
    """``reconcile.watch`` every ``interval`` seconds until ``stop`` (its sleep raises then); each round's job is
    appended to ``rounds``."""
    from semdup.ingest.reconcile import watch

    def sleep(seconds: float) -> None:
        if stop.wait(seconds):
            raise _Stopped

    try:
        watch(client, index, version, interval=interval, on_round=rounds.append, sleep=sleep)
    except _Stopped:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--bundle", required=True, help="model bundle directory (the worker loads it too)")
    parser.add_argument("--data", default=None, help="Stack Exchange dump folder (default: the Travel dump)")
    parser.add_argument("--posts", type=int, default=200, help="posts in the site's index before the writes")
    parser.add_argument("--writes", type=int, default=30, help="writes per mode (new posts and edits, alternating)")
    parser.add_argument("--rate", type=float, default=1.0, help="site writes per second")
    parser.add_argument("--interval", type=float, default=5.0, help="the watch mode's --interval, seconds")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between the companion searches")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait after the last write")
    parser.add_argument("--broker-db", type=int, default=9, help="Redis database of the private queue")
    parser.add_argument("--modes", default="called,watch", help="comma-separated: called, watch")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"called", "watch"}:
        parser.error(f"unknown mode in {args.modes!r}; known: called, watch")

    from benchmarks.local_worker import LocalWorker
    from semdup.apps.settings import load_settings
    from semdup.bundle.bundle import Bundle
    from semdup.core.task_names import SYNC_POSTS
    from semdup.index_format.companion import source_post
    from semdup.index_format.documents import content_hash
    from semdup.ingest.celery_app import QUEUE, configure_app, producer_app
    from semdup.ingest.jobs import batches, submit, wait_for
    from semdup.ingest.reconcile import enqueue_sync
    from semdup.opensearch_io.clients import connect
    from semdup.site_index.enable import enable_index

    every = site_posts(args.data)
    posts = every[: args.posts]
    fresh = iter(every[args.posts :])  # new posts the site writes
    edits = iter(posts)  # existing posts the site edits, each once
    bundle = Bundle.load(args.bundle)
    settings = load_settings().opensearch_settings()
    client = connect(settings)
    broker = private_broker(load_settings().broker_settings().url, args.broker_db)
    app = configure_app(broker)
    sender = producer_app(broker)
    with app.connection_for_write() as conn:  # what an interrupted run left in the private queue
        conn.default_channel.client.delete(QUEUE, "unacked", "unacked_index")
    stem = f"semdup-bench-freshness-{os.getpid()}"
    alias, concrete = f"{stem}-site", f"{stem}-site-v1"
    workdir = Path(tempfile.mkdtemp(prefix="semdup-freshness-"))
    env = {
        **os.environ,
        "SEMDUP_OPENSEARCH_URL": settings.url,
        "SEMDUP_BROKER_URL": broker,
        "SEMDUP_BUNDLE": str(args.bundle),
        "OMP_NUM_THREADS": "1",
    }
    worker = LocalWorker(env, workdir / "worker.log")
    results: dict[str, tuple[list[float], int]] = {}
    load_before = os.getloadavg()
    try:
        make_site_index(client, concrete, posts)
        client.indices.put_alias(index=concrete, name=alias, body={"is_write_index": True})
        enabled = enable_index(
            client, alias, version=bundle.version, dimension=bundle.dimension, title_field="Title", body_field="Body"
        )
        t0 = time.monotonic()
        worker.start()
        started_s = time.monotonic() - t0
        t0 = time.monotonic()
        done = wait_for(
            client, enqueue_sync(client, alias, bundle.version, progress=False), timeout=600, progress=False
        )
        if not done.finished:
            raise RuntimeError(f"the companion was not filled in 600 s: {done}")
        fill_s = time.monotonic() - t0

        def write(mode: str, n: int) -> tuple[str, dict[str, Any]]:
            """One site write: a new post (even n) or a partial update of a post's Title (odd n)."""
            if n % 2 == 0:
                p = next(fresh)
                doc = site_doc(p, n)
                client.index(index=alias, id=p.id, body=doc)
                return p.id, doc
            p = next(edits)
            doc = {**site_doc(p, n), "Title": f"Edited ({mode} {n}): {p.title}"}
            client.update(index=concrete, id=p.id, body={"doc": {"Title": doc["Title"]}})
            return p.id, doc

        for mode in modes:
            tracker, stop = Tracker(), threading.Event()
            poller = threading.Thread(target=poll, args=(client, enabled.companion, tracker, stop, args.poll))
            poller.start()
            rounds: list[Any] = []
            watcher = None
            if mode == "watch":
                watcher = threading.Thread(
                    target=run_watch, args=(client, alias, bundle.version, args.interval, stop, rounds)
                )
                watcher.start()
            start = time.monotonic()
            for n in range(args.writes):
                time.sleep(max(0.0, start + n / args.rate - time.monotonic()))
                doc_id, doc = write(mode, n)
                at = time.monotonic()
                post = source_post(doc_id, doc, enabled.source)
                tracker.add(doc_id, at, content_hash(post["title"], post["body"]))
                if mode == "called":  # what POST /v1/posts/sync does, through the same way in
                    calls = list(batches(SYNC_POSTS, alias, [doc_id], [bundle.version]))
                    submit(client, alias, bundle.version, calls, app=sender)
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                with tracker.lock:
                    if not tracker.pending:
                        break
                time.sleep(0.2)
            stop.set()
            poller.join()
            if watcher is not None:
                watcher.join()
            results[mode] = (list(tracker.lags), len(tracker.pending))
            print(
                f"{mode}: {len(tracker.lags)} current, {len(tracker.pending)} not; {len(rounds)} watch rounds",
                file=sys.stderr,
            )
    finally:
        worker.stop()
        client.indices.delete(index=f"{stem}-*", ignore_unavailable=True, request_timeout=60)
        with app.connection_for_write() as conn:
            conn.default_channel.client.delete(QUEUE, "unacked", "unacked_index")
    load_after = os.getloadavg()

    module = __spec__.name if __spec__ else __name__
    print(f"command:   python -m {module} {' '.join(argv if argv is not None else sys.argv[1:])}")
    print(f"hardware:  {_hardware()} (shared with other work)")
    print(f"load avg:  {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min)")
    print(f"versions:  {_versions()}; OpenSearch {client.info()['version']['number']}")
    print(f"bundle:    {bundle.version} (dimension {bundle.dimension}); 1 worker, concurrency 1, OMP_NUM_THREADS 1")
    print(
        f"site:      {len(posts)} posts; companion filled by the worker in {fill_s:.0f} s (worker ready in "
        f"{started_s:.0f} s); {args.writes} writes per mode at {args.rate:g}/s (new posts and Title edits "
        f"alternating); companion polled by search every {args.poll:g} s; watch interval {args.interval:g} s"
    )
    print()
    labels = {"called": "site calls semdup (sync_posts)", "watch": f"reconcile.watch --interval {args.interval:g}"}
    rows = []
    for mode, (lags, missing) in results.items():
        s = summary(lags)
        rows.append([labels[mode], s["n"], missing, f"{s['p50']:.2f}", f"{s['p95']:.2f}", f"{s['max']:.2f}"])
    print(format_table(["mode", "current", "not after timeout", "p50 s", "p95 s", "max s"], rows))
    return 0


if __name__ == "__main__":
    from benchmarks import run_main

    run_main(main)
