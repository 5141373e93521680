"""The sweeper: a job's batches that are neither done nor queued for longer than a bound are sent again.

Every batch of a job is in the ledger (:mod:`semdup.indexer.ledger`) before it is published. At each sweep the
sweeper reads, in this order, the broker (one atomic read of the queue and ``unacked``,
:func:`semdup.indexer.backlog.queued_task_ids`), then the batches with an outcome (done), then the ledger. A
batch in neither the broker nor the done set is *missing*. Reading the broker first matters: a task records its
outcome before it acknowledges its message, so a batch that leaves the broker between the two reads is seen done.
A batch missing at every sweep for ``after_s`` seconds (:class:`SweepSettings`) is sent again, from its ledger
record, with the same task id and batch key: its outcome is recorded once, however many copies run (tasks are
idempotent, so a copy costs only its work).

What the bound must exceed: the longest a live batch can be in neither place. On Redis that is the gap between
a worker's BRPOP and its HSET into ``unacked`` (:mod:`semdup.indexer.backlog`): microseconds, or, while kombu
holds a BRPOP reply unread because the worker has no prefetch credit, as long as the worker's running task
(at most :data:`~semdup.indexer.celery_app.TASK_SOFT_TIME_LIMIT`, 120 s, plus recording its outcome); and the
producer's gap between a chunk's ledger records and its publishing (one chunk of :data:`~semdup.indexer.ledger.
CHUNK` messages). The default, 300 s, equals the visibility timeout: a batch whose worker died, in whichever
way, is running again within about five minutes. A shorter bound only costs duplicate work.

With RabbitMQ the queue cannot be read (the broker gives counts, not contents). The sweeper then sends again
only batches the producer never published: past the job's ``sent`` mark (the producer died mid-enqueue) and
missing for ``after_s``. That is safe because RabbitMQ has no gap to sweep: the broker tracks every delivery
itself, a message is either ready or held unacknowledged by a live channel, and a channel that closes (a whole
worker SIGKILLed) has its messages requeued at once; publisher confirms (``celery_app``) mean a published batch
is on the broker. Re-sending every batch not done in time there would instead double a slow job's queue.

The sweeper runs inside :func:`semdup.indexer.jobs.poll` (so in ``index-posts``, ``backfill`` and ``--job``
waits) and in ``semdup watch``: the process that waits already reads the job's outcomes every second, so one
more read every ``every_s`` costs little, and no extra process (a Celery beat) has to be deployed and kept
single. A job nobody waits on (``--no-wait``) is swept when someone follows it (``--job ID``).

Example::

    sweeper = Sweeper(client, app, job, load_settings().sweep_settings())   # semdup.apps.settings, at the edge
    found = sweeper.sweep()       # Sweep(batches=32, done=20, queued=12, missing=(), resent=(), ...)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from celery import Celery

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.opensearch import OpenSearch
from semdup.indexer import ledger
from semdup.indexer.backlog import check_broker, queued_task_ids
from semdup.indexer.outcomes import Job

__all__ = ["DEFAULT_SWEEP_AFTER", "SweepSettings", "Sweep", "Sweeper"]

logger = logging.getLogger(__name__)

DEFAULT_SWEEP_AFTER = 300.0  # seconds; see the module doc for what it must exceed


@dataclass(frozen=True)
class SweepSettings:
    """How long a batch may be neither done nor queued before it is sent again (``after_s``), and how often
    a waiting process looks (``every_s``: a quarter of the bound, between 1 and 30 s)."""

    after_s: float = DEFAULT_SWEEP_AFTER

    def __post_init__(self) -> None:
        if not self.after_s > 0:
            raise ConfigError(f"SEMDUP_SWEEP_AFTER must be seconds > 0, found {self.after_s!r}; e.g. 300")

    @property
    def every_s(self) -> float:
        return min(30.0, max(1.0, self.after_s / 4))


@dataclass(frozen=True)
class Sweep:
    """What one sweep found. ``queued``/``queued_posts``: batches and posts with a message on the broker (None:
    the broker cannot be read, or did not answer); ``missing``: batches neither done nor queued at this sweep
    and the one before (so not a message caught in flight); ``resent``: batches this sweep sent again."""

    batches: int = 0
    done: int = 0
    queued: int | None = None
    queued_posts: int | None = None
    missing: tuple[str, ...] = ()
    missing_posts: int = 0
    missing_for_s: float = 0.0
    resent: tuple[str, ...] = ()
    broker_error: str | None = None
    opensearch_error: str | None = None


@dataclass
class _Known:
    entries: dict[str, ledger.LedgerEntry] = field(default_factory=dict)
    done: set[str] = field(default_factory=set)


class Sweeper:
    """Sweeps one job (module doc). Keeps, between sweeps, since when each batch has been missing.

    Args:
        client: the OpenSearch client (ledger and outcomes).
        app: the indexer's Celery app, pointed at the job's broker.
        job: the job to sweep.
        settings: the bound and the cadence.
        clock: monotonic seconds (tests pass a fake one).
    """

    def __init__(
        self,
        client: OpenSearch,
        app: Celery,
        job: Job,
        settings: SweepSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.app, self.job, self.settings, self.clock = client, app, job, settings, clock
        self._since: dict[str, float] = {}
        self._known = _Known()
        self._resent_unread: set[str] = set()  # RabbitMQ: sent again once, then trusted to the broker
        self._ledger_read = False  # whether the ledger was read once (until then, queued posts are unknown)
        self.resent_total = 0

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

    def _candidates(self, queued_ids: dict[str, bool] | None) -> set[str]:
        """Batches neither done nor (as far as the broker can tell) queued."""
        open_ = set(self._known.entries) - self._known.done
        if queued_ids is not None:
            return {k for k in open_ if ledger.task_id(self.job.id, k) not in queued_ids}
        mark = ledger.sent_mark(self.client, self.job.id)
        if mark is None:
            return set()
        return {k for k in open_ if self._known.entries[k].seq >= mark.sent and k not in self._resent_unread}

    def sweep(self) -> Sweep:
        """Read the broker, then the done batches, then the ledger; send again what has been missing for
        ``after_s``. Never raises for an unreachable broker or cluster: the returned :class:`Sweep` says so."""
        now = self.clock()
        queued_ids, broker_error = self._broker()
        readable = broker_error is None and queued_ids is not None
        try:
            self._known.done = ledger.done_batches(self.client, self.job.id)
            self._known.entries = ledger.ledger_entries(self.client, self.job.id)
            self._ledger_read = True
            candidates = None if broker_error else self._candidates(queued_ids)
        except OpenSearchUnavailable as exc:
            return self._report(queued_ids if readable else None, broker_error=broker_error, opensearch_error=str(exc))
        if candidates is None:  # the broker did not answer: nothing can be told missing
            return self._report(None, broker_error=broker_error)
        self._since = {k: self._since.get(k, now) for k in candidates}
        due = sorted((k for k, t in self._since.items() if now - t >= self.settings.after_s), key=int)
        resent: tuple[str, ...] = ()
        if due:
            try:
                resent = self._send_again(due)
            except (OpenSearchUnavailable, BrokerUnavailable) as exc:
                logger.warning("job %s: could not send %d missing batches again yet: %s", self.job.id, len(due), exc)
        for k in resent:
            self._since[k] = now
        confirmed = tuple(sorted((k for k, t in self._since.items() if t < now and k not in resent), key=int))
        return self._report(
            queued_ids if readable else None,
            missing=confirmed,
            missing_for_s=max((now - self._since[k] for k in confirmed), default=0.0),
            resent=resent,
        )

    def _send_again(self, keys: list[str]) -> tuple[str, ...]:
        sent = []
        for key, name, args in ledger.read_calls(self.client, self.job.id, keys):
            try:
                self.app.send_task(
                    name,
                    args=args,
                    kwargs={"job": self.job.id, "batch": key},
                    task_id=ledger.task_id(self.job.id, key),
                )
            except Exception as exc:  # kombu raises transport-specific errors
                raise BrokerUnavailable(f"the broker refused a message ({type(exc).__name__}: {exc})") from exc
            sent.append(key)
        if sent:
            self._resent_unread.update(sent)
            self.resent_total += len(sent)
            posts = sum(self._known.entries[k].size for k in sent if k in self._known.entries)
            logger.warning(
                "job %s: %d batches (%d posts) were neither done nor queued for %.0f s (a worker killed while "
                "taking them, or a producer that died before sending them); sent again: %s",
                self.job.id,
                len(sent),
                posts,
                self.settings.after_s,
                ",".join(sent)[:500],
            )
        return tuple(sent)

    def _report(
        self,
        queued_ids: dict[str, bool] | None,
        *,
        missing: tuple[str, ...] = (),
        missing_for_s: float = 0.0,
        resent: tuple[str, ...] = (),
        broker_error: str | None = None,
        opensearch_error: str | None = None,
    ) -> Sweep:
        entries = self._known.entries
        queued = queued_posts = None
        if queued_ids is not None and self._ledger_read:
            keys = [k for k in entries if ledger.task_id(self.job.id, k) in queued_ids]
            queued, queued_posts = len(keys), sum(entries[k].size for k in keys)
        return Sweep(
            batches=len(entries),
            done=len(self._known.done),
            queued=queued,
            queued_posts=queued_posts,
            missing=missing,
            missing_posts=sum(entries[k].size for k in missing if k in entries),
            missing_for_s=missing_for_s,
            resent=resent,
            broker_error=broker_error,
            opensearch_error=opensearch_error,
        )
