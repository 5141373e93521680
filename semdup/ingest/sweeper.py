"""The sweeper: a job's batches that are neither done nor queued for longer than a bound are sent again.

Every batch of a job is in the ledger (:mod:`semdup.ingest.ledger`) before it is published. At each sweep the
sweeper reads, in this order, the ledger (the batches of its jobs still recorded: a finished job's records are
deleted), the broker (one atomic read of the queue and ``unacked``, :func:`semdup.ingest.backlog.queued_task_ids`),
then the batches with an outcome (done). A recorded batch in neither the broker nor the done set is *missing*.
Reading the broker before the done set matters: a task records its outcome before it acknowledges its message, so
a batch that leaves the broker between the two reads is seen done. A batch recorded after the ledger was read is
not looked at until the next sweep. A batch missing at every sweep for ``after_s`` seconds (the sweeper's bound,
``worker.sweep_after``) is sent again, from its ledger record, with the same task id and batch key: its outcome is
recorded once, however many copies run (tasks are idempotent, so a copy costs only its work). A job whose every
recorded batch is done is finished: its ledger records are deleted and it leaves the sweep.

What the bound must exceed: the longest a live batch can be in neither place. On Redis that is the gap between
a worker's BRPOP and its HSET into ``unacked`` (:mod:`semdup.ingest.backlog`): microseconds, or, while kombu
holds a BRPOP reply unread because the worker has no prefetch credit, as long as the worker's running task
(at most :data:`~semdup.ingest.celery_app.TASK_SOFT_TIME_LIMIT`, 120 s, plus recording its outcome); and the
producer's gap between a chunk's ledger records and its publishing (one chunk of :data:`~semdup.ingest.ledger.
CHUNK` messages). The default, 300 s, equals the visibility timeout: a batch whose worker died, in whichever
way, is running again within about five minutes. A shorter bound only costs duplicate work.

With RabbitMQ the queue cannot be read (the broker gives counts, not contents). The sweeper then sends again
only batches the producer never published: past the job's ``sent`` mark (the producer died mid-enqueue) and
missing for ``after_s``. That is safe because RabbitMQ has no gap to sweep: the broker tracks every delivery
itself, a message is either ready or held unacknowledged by a live channel, and a channel that closes (a whole
worker SIGKILLed) has its messages requeued at once; publisher confirms (``celery_app``) mean a published batch
is on the broker. Re-sending every batch not done in time there would instead double a slow job's queue.

Where it runs:

* in :func:`semdup.ingest.jobs.poll`, on the job it waits for (so in ``index-posts``, ``backfill`` and ``--job``
  waits): the waiting process already reads the job's outcomes every second, so one more read every ``every_s``
  costs little;
* in ``semdup watch``, on every unfinished job of the watched index, once a round;
* in ``semdup serve`` (:class:`SweepLoop`, a thread of each service process), on every unfinished job of the
  indices it serves, every ``every_s``: the jobs of ``POST /v1/posts``, ``/sync`` and ``/delete``, which nobody
  waits on, and any other job of those indices (a ``--no-wait`` job, one whose producer died).

Not a periodic Celery task: that needs a beat process deployed and kept single, and the workers are what dies.
Several sweepers on one job (two service processes, a CLI wait beside the service) cost reads, never a batch
counted twice: a batch sent again by both is one task id and one outcome record.

Example::

    sweeper = Sweeper(client, app, load_settings().worker.sweep_after, jobs=[job.id])  # the bound: at the edge
    found = sweeper.sweep()       # Sweep(batches=32, done=20, queued=12, missing=(), resent=(), ...)
    loop = SweepLoop(Sweeper(client, app, 300.0, indices=["travel"]))             # semdup serve's
    loop.start(); ...; loop.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from celery import Celery

from semdup.core.errors import BrokerUnavailable, OpenSearchUnavailable
from semdup.ingest import ledger
from semdup.ingest.backlog import check_broker, queued_task_ids
from semdup.ingest.ledger import Key, task_id
from semdup.opensearch_io.boundary import OpenSearch

__all__ = ["DEFAULT_SWEEP_AFTER", "Sweep", "Sweeper", "SweepLoop"]

logger = logging.getLogger(__name__)

DEFAULT_SWEEP_AFTER = 300.0  # seconds; see the module doc for what it must exceed


@dataclass(frozen=True)
class Sweep:
    """What one sweep found. ``queued``/``queued_posts``: batches and posts with a message on the broker (None:
    the broker cannot be read, or did not answer); ``missing``: batches (task ids, ``<job>-<batch>``) neither done
    nor queued at this sweep and the one before (so not a message caught in flight); ``resent``: batches this sweep
    sent again; ``finished``: jobs found finished, whose ledger records this sweep deleted."""

    batches: int = 0
    done: int = 0
    queued: int | None = None
    queued_posts: int | None = None
    missing: tuple[str, ...] = ()
    missing_posts: int = 0
    missing_for_s: float = 0.0
    resent: tuple[str, ...] = ()
    finished: tuple[str, ...] = ()
    broker_error: str | None = None
    opensearch_error: str | None = None


@dataclass
class _Known:
    entries: dict[Key, ledger.LedgerEntry] = field(default_factory=dict)
    done: set[Key] = field(default_factory=set)


def _order(key: Key) -> tuple[str, int]:
    return key[0], int(key[1]) if key[1].isdigit() else -1


class Sweeper:
    """Sweeps a set of jobs (module doc): ``jobs`` by id, or every unfinished job of ``indices``. Keeps, between
    sweeps, since when each batch has been missing.

    Args:
        client: the OpenSearch client (ledger and outcomes).
        app: the indexer's Celery app, pointed at the jobs' broker.
        after_s: the bound, seconds a batch may be neither done nor queued (``worker.sweep_after``); a waiting
            process sweeps every :attr:`every_s`, a quarter of it between 1 and 30 s.
        jobs: the ids of the jobs to sweep.
        indices: or the indices whose unfinished jobs to sweep.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        client: OpenSearch,
        app: Celery,
        after_s: float,
        *,
        jobs: Sequence[str] = (),
        indices: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if bool(jobs) == bool(indices):
            raise ValueError("a sweeper sweeps either jobs or the unfinished jobs of indices: give one of the two")
        if not after_s > 0:
            raise ValueError(f"a sweeper's bound must be seconds > 0, got {after_s!r}")
        self.client, self.app, self.after_s, self.clock = client, app, after_s, clock
        self.jobs, self.indices = tuple(jobs), tuple(indices)
        self._since: dict[Key, float] = {}
        self._known = _Known()
        self._resent_unread: set[Key] = set()  # RabbitMQ: sent again once, then trusted to the broker
        self._ledger_read = False  # whether the ledger was read once (until then, queued posts are unknown)
        self.resent_total = 0

    @property
    def every_s(self) -> float:
        """How often a waiting process sweeps: a quarter of the bound, between 1 and 30 s."""
        return min(30.0, max(1.0, self.after_s / 4))

    def _broker(self) -> tuple[dict[str, bool] | None, str | None]:
        """The broker's task ids (None: it cannot be read), or the error it gave; an unreadable broker (RabbitMQ)
        is still asked whether it answers, so an outage of it is reported too."""
        try:
            ids = queued_task_ids(self.app)
            if ids is None:
                check_broker(self.app)
            return ids, None
        except BrokerUnavailable as exc:
            return None, str(exc)

    def _candidates(self, queued_ids: dict[str, bool] | None) -> set[Key]:
        """Batches neither done nor (as far as the broker can tell) queued."""
        open_ = set(self._known.entries) - self._known.done
        if queued_ids is not None:
            return {k for k in open_ if task_id(*k) not in queued_ids}
        marks = ledger.sent_marks(self.client, sorted({job for job, _ in open_}))
        return {
            k
            for k in open_
            if k[0] in marks and self._known.entries[k].seq >= marks[k[0]].sent and k not in self._resent_unread
        }

    def sweep(self) -> Sweep:
        """Read the ledger, then the broker, then the done batches; send again what has been missing for
        ``after_s``; forget the jobs found finished. Never raises for an unreachable broker or cluster: the
        returned :class:`Sweep` says so."""
        now = self.clock()
        try:
            entries = ledger.ledger_entries(self.client, jobs=self.jobs, indices=self.indices)
        except OpenSearchUnavailable as exc:
            queued_ids, broker_error = self._broker()
            return self._report(queued_ids, broker_error=broker_error, opensearch_error=str(exc))
        if not entries:  # nothing open: the broker is not read
            self._known, self._since = _Known(), {}
            return self._report(None)
        queued_ids, broker_error = self._broker()
        try:
            self._known = _Known(entries, ledger.done_batches(self.client, sorted({job for job, _ in entries})))
            self._ledger_read = True
            candidates = None if broker_error else self._candidates(queued_ids)
        except OpenSearchUnavailable as exc:
            return self._report(queued_ids, broker_error=broker_error, opensearch_error=str(exc))
        finished = self._forget_finished()
        if candidates is None:  # the broker did not answer: nothing can be told missing
            return self._report(None, broker_error=broker_error, finished=finished)
        self._since = {k: self._since.get(k, now) for k in candidates}
        due = sorted((k for k, t in self._since.items() if now - t >= self.after_s), key=_order)
        resent: tuple[Key, ...] = ()
        if due:
            try:
                resent = self._send_again(due)
            except (OpenSearchUnavailable, BrokerUnavailable) as exc:
                logger.warning("could not send %d missing batches again yet: %s", len(due), exc)
        for k in resent:
            self._since[k] = now
        confirmed = sorted((k for k, t in self._since.items() if t < now and k not in resent), key=_order)
        return self._report(
            queued_ids,
            missing=confirmed,
            missing_for_s=max((now - self._since[k] for k in confirmed), default=0.0),
            resent=resent,
            finished=finished,
        )

    def forget(self, job: str) -> None:
        """Delete the ledger records of ``job``, finished (its outcomes stay)."""
        try:
            ledger.forget_batches(self.client, job)
        except OpenSearchUnavailable as exc:  # harmless: records of a finished job are only read, never sent
            logger.warning("job %s finished but its ledger records stay in the jobs index for now: %s", job, exc)

    def _forget_finished(self) -> tuple[str, ...]:
        """Forget the jobs whose every recorded batch is done."""
        open_jobs = {job for job, _ in set(self._known.entries) - self._known.done}
        finished = sorted({job for job, _ in self._known.entries} - open_jobs)
        for job in finished:
            self.forget(job)
        return tuple(finished)

    def _send_again(self, keys: list[Key]) -> tuple[Key, ...]:
        sent = []
        for key, name, args in ledger.read_calls(self.client, keys):
            job, batch = key
            ledger.TaskCall(name, args, job, batch).send(self.app)
            sent.append(key)
        if sent:
            self._resent_unread.update(sent)
            self.resent_total += len(sent)
            posts = sum(self._known.entries[k].size for k in sent if k in self._known.entries)
            logger.warning(
                "%d batches (%d posts) were neither done nor queued for %.0f s (a worker killed while taking them, "
                "or a producer that died before sending them); sent again: %s",
                len(sent),
                posts,
                self.after_s,
                ",".join(task_id(*k) for k in sent)[:500],
            )
        return tuple(sent)

    def _report(
        self,
        queued_ids: dict[str, bool] | None,
        *,
        missing: Sequence[Key] = (),
        missing_for_s: float = 0.0,
        resent: Sequence[Key] = (),
        finished: tuple[str, ...] = (),
        broker_error: str | None = None,
        opensearch_error: str | None = None,
    ) -> Sweep:
        entries = self._known.entries
        queued = queued_posts = None
        if queued_ids is not None and broker_error is None and self._ledger_read:
            keys = [k for k in entries if task_id(*k) in queued_ids]
            queued, queued_posts = len(keys), sum(entries[k].size for k in keys)
        return Sweep(
            batches=len(entries),
            done=len(self._known.done & set(entries)),
            queued=queued,
            queued_posts=queued_posts,
            missing=tuple(task_id(*k) for k in missing),
            missing_posts=sum(entries[k].size for k in missing if k in entries),
            missing_for_s=missing_for_s,
            resent=tuple(task_id(*k) for k in resent),
            finished=finished,
            broker_error=broker_error,
            opensearch_error=opensearch_error,
        )


class SweepLoop:
    """A sweeper run every ``sweeper.every_s`` in a daemon thread until :meth:`stop` (``semdup serve``'s, on the
    indices it serves). A sweep that fails for another cause than an outage is logged, and the next one runs."""

    def __init__(self, sweeper: Sweeper) -> None:
        self.sweeper = sweeper
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="semdup-sweeper", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.sweeper.every_s):
            try:
                found = self.sweeper.sweep()
            except Exception:  # a bug or an answer it could not read: say so, and keep sweeping
                logger.exception("a sweep of the unfinished jobs of %s failed", ", ".join(self.sweeper.indices))
                continue
            if found.opensearch_error or found.broker_error:
                logger.warning("sweep: %s", found.opensearch_error or found.broker_error)
