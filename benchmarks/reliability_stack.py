"""The real parts the reliability benchmark injects faults into: one broker (Redis or RabbitMQ), one worker, a proxy.

:class:`Stack` starts a throwaway broker of the asked kind (:class:`~semdup.devstack.local_redis.LocalRedis` or
:class:`~benchmarks.local_rabbitmq.LocalRabbitMQ`, a temporary folder and free ports, persistent as in
production), a ``semdup worker`` subprocess (:class:`~benchmarks.local_worker.LocalWorker`) whose only path to
OpenSearch is a TCP proxy the benchmark cuts (:class:`~benchmarks.tcp_proxy.TcpProxy`), and two clients: a
direct one that counts (:meth:`Stack.census`), and one through the same proxy that waits on the job, so the wait
sees an OpenSearch cut as a user's ``semdup index-posts`` would, and says so (:class:`StatusLog`).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Census", "Stack", "StatusLog", "BROKERS"]

BROKERS = ("redis", "rabbitmq")


@dataclass
class Census:
    """Every sent post, by where it is found; ``queued`` None where the broker cannot be read (RabbitMQ), and then
    ``lost`` is only known once nothing should be queued any more (``final``)."""

    sent: int
    written: int
    parked: int
    queued: int | None
    lost: int | None

    def cells(self) -> str:
        q = "n/a" if self.queued is None else str(self.queued)
        lost = "n/a" if self.lost is None else str(self.lost)
        return f"{self.sent:>6}{self.written:>9}{self.parked:>8}{q:>8}{lost:>6}"


class StatusLog:
    """What the wait said while it waited (``JobProgress.describe_wait``): when it changes, and every ``every`` s."""

    def __init__(self, every: float = 60.0) -> None:
        self.every, self.lines, self._key, self._at, self._t0 = every, [], None, 0.0, time.monotonic()

    def __call__(self, progress: Any) -> None:
        text = progress.describe_wait()
        now = time.monotonic()
        key = None if text is None else text.split(" for ")[0]
        if text is not None and (key != self._key or now - self._at >= self.every):
            self.lines.append(f"t={now - self._t0:5.0f} s: {progress.done} of {progress.total} done; {text}")
            self._at = now
        self._key = key


class Stack:
    """The clients, the worker's proxy to OpenSearch, the broker of ``kind``, the worker, and the bundle under test."""

    def __init__(self, args: argparse.Namespace, workdir: Path, kind: str) -> None:
        from benchmarks.local_worker import LocalWorker
        from benchmarks.tcp_proxy import TcpProxy
        from semdup.apps.settings import load_settings
        from semdup.bundle.bundle import Bundle
        from semdup.core.settings import OpenSearchSettings
        from semdup.devstack.local_process import any_free_port
        from semdup.ingest.celery_app import configure_app
        from semdup.opensearch_io.clients import connect

        if kind not in BROKERS:
            raise ValueError(f"broker must be one of {', '.join(BROKERS)}, got {kind!r}")
        self.args, self.workdir, self.kind = args, workdir, kind
        settings = load_settings().opensearch_settings()
        self.client = connect(settings)
        self.bundle = Bundle.load(args.bundle)
        if kind == "redis":
            from semdup.devstack.local_redis import LocalRedis

            self.broker: Any = LocalRedis(state_dir=workdir / f"{kind}-broker", port=any_free_port())
        else:
            from benchmarks.local_rabbitmq import LocalRabbitMQ

            self.broker = LocalRabbitMQ(state_dir=workdir / f"{kind}-broker")
        self.broker_url = self.broker.start()
        self.proxy = TcpProxy(settings.url)
        self.proxy.up()
        self.waiter = connect(OpenSearchSettings(url=self.proxy.url))  # waits as a user would, through the cut
        self.app = configure_app(self.broker_url, visibility_timeout=args.visibility_timeout)
        env = {
            **os.environ,
            "SEMDUP_OPENSEARCH_URL": self.proxy.url,
            "SEMDUP_BROKER_URL": self.broker_url,
            "SEMDUP_BUNDLE": str(args.bundle),
            "SEMDUP_VISIBILITY_TIMEOUT": str(args.visibility_timeout),
            "SEMDUP_RETRY_BUDGET": str(args.budget),
            "OMP_NUM_THREADS": "1",
        }
        self.worker = LocalWorker(env, workdir / f"worker-{kind}.log")
        self.indices: list[str] = []

    @property
    def name(self) -> str:
        return "Redis" if self.kind == "redis" else "RabbitMQ"

    def version(self) -> str:
        """The broker server's version, as it reports it."""
        with self.app.connection_for_read() as conn:
            if self.kind == "redis":
                return str(conn.default_channel.client.info("server")["redis_version"])
            conn.connect()
            return str(conn.connection.server_properties.get("version", "?"))

    def close(self) -> None:
        from semdup.ingest.outcomes import JOBS_INDEX
        from semdup.ingest.parking import PARKED_INDEX

        self.worker.stop()
        self.proxy.close()
        self.broker.stop()
        if self.indices:
            query = {"query": {"terms": {"index": self.indices}}}
            for store in (PARKED_INDEX, JOBS_INDEX):
                self.client.delete_by_query(index=store, body=query, ignore_unavailable=True, refresh=True)
            self.client.indices.delete(index=",".join(self.indices), ignore_unavailable=True)

    def fresh_index(self, scenario: str) -> str:
        from semdup.ingest.lexical_index import create_index

        stem = scenario.split()[0].lower().replace("-", "")
        index = f"semdup-reliability-{self.kind}-{stem}-{uuid.uuid4().hex[:6]}"
        create_index(self.client, index, dimension=self.bundle.dimension)
        self.indices.append(index)
        return index

    def census(self, index: str, sent: set[str], *, final: bool) -> Census:
        """Count every sent post where it is found; ``final``: the job settled, so nothing may be queued."""
        from opensearchpy.helpers import scan

        from semdup.ingest.backlog import queued_post_ids
        from semdup.ingest.parking import iter_parked

        self.client.indices.refresh(index=index)
        query = {"query": {"term": {"semdup.model": self.bundle.version}}, "_source": False}
        written = {h["_id"] for h in scan(self.client, index=index, query=query)} & sent
        parked = {r.post_id for r in iter_parked(self.client, index)} & sent
        ids = queued_post_ids(self.app, index=index)
        queued = None if ids is None else ids & sent
        if queued is None and not final:
            return Census(len(sent), len(written), len(parked), None, None)
        lost = sent - written - parked - (queued or set())
        return Census(len(sent), len(written), len(parked), None if queued is None else len(queued), len(lost))

    def ready_messages(self) -> int | None:
        """Messages ready on the indexer's queue (RabbitMQ's own count; None on Redis, whose census reads them)."""
        if self.kind == "redis":
            return None
        from semdup.ingest.celery_app import QUEUE

        with self.app.connection_for_read() as conn:
            return int(conn.default_channel.queue_declare(QUEUE, passive=True).message_count)

    def stop_broker(self) -> None:
        self.broker.stop()

    def start_broker(self) -> None:
        url = self.broker.start()
        if url != self.broker_url:
            raise RuntimeError(f"the {self.name} broker came back at another URL ({url}); the worker cannot follow")

    def written(self, job: Any) -> int:
        from semdup.ingest.outcomes import job_counts

        return job_counts(self.client, job.id).written


def wait_until(predicate: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.1)
