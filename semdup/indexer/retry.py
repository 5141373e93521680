"""How the worker's tasks retry: Celery's ``autoretry_for`` and ``retry_backoff``, bounded by a retry budget.

:class:`RetryingTask` is the tasks' base. Celery retries every error of :data:`TRANSIENT_ERRORS` (OpenSearch not
answering or overloaded, as :mod:`semdup.opensearch_io.boundary` decides; a task past its soft time limit; a batch for
another bundle; a batch kept queued, :class:`StillQueued`) with ``retry_backoff``: waits doubling from ``first_s``
up to ``cap_s`` seconds. ``retry_jitter`` is off: Celery's jitter is full jitter (a wait drawn from [0, countdown]),
which made the old "8 retries, up to 25 minutes" run out after 98 s in a fault run; without it the nominal waits are
the waits, so a batch is parked no sooner than ``budget_s`` seconds after its first failure (plus its own run
times). The batches of an outage are spread by when each first failed. ``max_retries`` is None: the task itself
parks a batch once :attr:`RetryPolicy.max_retries` retries are spent, and a batch that cannot even be parked is
kept queued and retried every ``cap_s`` seconds, never dropped (:mod:`semdup.indexer.tasks`).

``cap_s`` is bounded by the Redis visibility timeout: a retried task waits out its countdown in the worker
unacknowledged, and Redis hands a message unacknowledged for longer than the visibility timeout to another
consumer, which would run the batch twice. ``cap_s <= visibility_timeout / 5`` leaves room for the task itself
(``semdup.ingest.celery_app``). The worker's composition root puts the policy's waits on the tasks as Celery
task annotations (:func:`annotations`), read when the app is finalized.

Example::

    policy = RetryPolicy(budget_s=1800)
    policy.max_retries            # 34: 2+4+8+16+32 s, then 60 s waits, until 1,800 s have passed
    policy.delay(3)               # 16 s: Celery's retry_backoff wait before the 4th retry
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from celery import Task
from celery.exceptions import Reject, SoftTimeLimitExceeded

from semdup.core.errors import OpenSearchUnavailable, SemdupError

__all__ = [
    "RetryPolicy",
    "RetryingTask",
    "StillQueued",
    "OtherBundle",
    "TRANSIENT_ERRORS",
    "annotations",
    "DEFAULT_RETRY_BUDGET",
    "MAX_RETRY_WAIT",
]

logger = logging.getLogger(__name__)

DEFAULT_RETRY_BUDGET = 1800.0  # an OpenSearch outage shorter than 30 minutes is ridden out without parking
MAX_RETRY_WAIT = 60  # longest wait between two attempts, in seconds (less with a short visibility timeout)
FIRST_RETRY_WAIT = 2


class StillQueued(SemdupError):
    """A batch that could be neither written nor parked in this attempt (the worker cannot load its bundle or
    client, or the parked store does not answer): it stays queued and is tried again, writing first."""


class OtherBundle(SemdupError):
    """The batch was enqueued for another model than this worker's bundle. Transient: during a rolling upgrade
    (`semdup upgrade`) workers of both bundles share the queue, so the batch is sent back to it and a worker with its
    bundle takes it; past the retry budget (no such worker) it is parked with this reason, never dropped."""


# What Celery retries (autoretry_for). Which OpenSearch errors are transient is the boundary's one rule.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OpenSearchUnavailable,
    SoftTimeLimitExceeded,
    OtherBundle,
    StillQueued,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Retry budget and backoff of the worker's tasks (whole seconds: Celery's ``retry_backoff`` is an integer).

    Args:
        budget_s: seconds of retrying (at least) before a batch is parked; 0 parks at the first failure.
        first_s: the first wait, doubled at each retry (``retry_backoff``).
        cap_s: the longest wait (``retry_backoff_max``); also the wait between attempts once the budget is spent
            and parking fails.
    """

    budget_s: float = DEFAULT_RETRY_BUDGET
    first_s: int = FIRST_RETRY_WAIT
    cap_s: int = MAX_RETRY_WAIT

    def __post_init__(self) -> None:
        if self.budget_s < 0 or self.first_s < 1 or self.cap_s < self.first_s:
            raise ValueError(
                f"retry policy needs budget_s >= 0 and 1 <= first_s <= cap_s, got budget_s={self.budget_s}, "
                f"first_s={self.first_s}, cap_s={self.cap_s}"
            )

    def delay(self, retries: int) -> int:
        """The wait before retry number ``retries + 1``: Celery's ``retry_backoff`` without jitter."""
        return min(self.cap_s, self.first_s * 2 ** min(retries, 30))

    @property
    def max_retries(self) -> int:
        """Retries whose waits add up to ``budget_s`` (the budget is a floor, see the module doc)."""
        waited, n = 0.0, 0
        while waited < self.budget_s:
            waited += self.delay(n)
            n += 1
        return n

    @classmethod
    def within(cls, budget_s: float, visibility_timeout: float) -> RetryPolicy:
        """A policy of ``budget_s`` seconds (``worker.retry_budget``, checked with the worker section) whose waits
        fit ``visibility_timeout``."""
        cap = max(1, min(MAX_RETRY_WAIT, int(visibility_timeout) // 5))
        return cls(budget_s=budget_s, first_s=min(FIRST_RETRY_WAIT, cap), cap_s=cap)


def annotations(policy: RetryPolicy) -> dict[str, dict[str, Any]]:
    """The ``task_annotations`` that give every task of the worker's app the policy's waits (Celery reads them
    when the app is finalized, before it wraps each task with its autoretry)."""
    return {"*": {"retry_backoff": policy.first_s, "retry_backoff_max": policy.cap_s}}


class RetryingTask(Task):
    """The worker's task base: Celery retries :data:`TRANSIENT_ERRORS` with backoff, without jitter and without
    a limit (the task decides when the budget is spent), and a retry that cannot be sent hands the message back."""

    autoretry_for = TRANSIENT_ERRORS
    retry_backoff = FIRST_RETRY_WAIT
    retry_backoff_max = MAX_RETRY_WAIT
    retry_jitter = False
    max_retries = None

    def retry(self, *args: Any, exc: BaseException | None = None, countdown: float | None = None, **kw: Any) -> Any:
        """Celery's retry, logged. A batch kept queued (:class:`StillQueued`) waits the longest wait, whatever its
        count of retries: the backoff is for an outage that may end soon, not for a worker that cannot run it. When
        the retry message cannot be sent (the broker is down) Celery rejects the message for good
        (``Reject(requeue=False)``): here it is handed back to the broker instead."""
        if isinstance(exc, StillQueued):
            countdown = self.retry_backoff_max
        logger.warning(
            "task %s (%s): %s: %s; retry %d in %s s",
            self.request.id,
            self.name.rsplit(".", 1)[-1],
            type(exc).__name__,
            exc,
            int(self.request.retries or 0) + 1,
            countdown,
        )
        try:
            return super().retry(*args, exc=exc, countdown=countdown, **kw)
        except Reject as rejected:
            if rejected.requeue:
                raise
            logger.error("could not send a retry of task %s (%s); its message is requeued", self.request.id, rejected)
            raise Reject(rejected.reason, requeue=True) from rejected
