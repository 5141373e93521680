"""How long an indexing task retries a cluster that does not answer, and the waits between its attempts.

Celery's own ``retry_backoff`` with ``retry_jitter`` draws each wait from [0, countdown] (full jitter), so eight
retries "up to 25 minutes" ran out after 98 s in a fault run. Here the nominal wait doubles from ``first_s`` up
to ``cap_s`` and jitter only *adds* up to a quarter, so the nominal sum is a floor: a batch gives up no sooner
than ``budget_s`` seconds after its first failure (plus its own run times). Giving up means parking the batch;
while even parking fails the batch is kept on the broker and retried every ``cap_s`` seconds, never dropped
(:mod:`semdup.indexer.tasks`).

``cap_s`` is bounded by the Redis visibility timeout: a retried task waits out its countdown in the worker
unacknowledged, and Redis hands a message unacknowledged for longer than the visibility timeout to another
consumer, which would run the batch twice. ``cap_s <= visibility_timeout / 5`` leaves room for the task itself
(``semdup.indexer.celery_app``).

Example::

    policy = RetryPolicy(budget_s=1800)
    policy.max_retries            # 34: 2+4+8+16+32 s, then 60 s waits, until 1,800 s have passed
    policy.countdown(3)           # 16 s to 20 s
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from semdup.core.errors import ConfigError

__all__ = ["RetryPolicy", "DEFAULT_RETRY_BUDGET", "MAX_RETRY_WAIT"]

DEFAULT_RETRY_BUDGET = 1800.0  # an OpenSearch outage shorter than 30 minutes is ridden out without parking
MAX_RETRY_WAIT = 60.0  # longest wait between two attempts (less with a short visibility timeout)
_JITTER = 0.25


@dataclass(frozen=True)
class RetryPolicy:
    """Retry budget and backoff of the indexing tasks.

    Args:
        budget_s: seconds of retrying (at least) before a batch is parked; 0 parks at the first failure.
        first_s: the first wait, doubled at each retry.
        cap_s: the longest wait; also the wait between attempts once the budget is spent and parking fails.
    """

    budget_s: float = DEFAULT_RETRY_BUDGET
    first_s: float = 2.0
    cap_s: float = MAX_RETRY_WAIT

    def __post_init__(self) -> None:
        if self.budget_s < 0 or self.first_s <= 0 or self.cap_s < self.first_s:
            raise ValueError(
                f"retry policy needs budget_s >= 0 and 0 < first_s <= cap_s, got budget_s={self.budget_s}, "
                f"first_s={self.first_s}, cap_s={self.cap_s}"
            )

    def delay(self, retries: int) -> float:
        """The nominal wait before retry number ``retries + 1`` (no jitter)."""
        return min(self.cap_s, self.first_s * 2 ** min(retries, 30))

    def countdown(self, retries: int, rand: Callable[[], float] = random.random) -> float:
        """The wait before the next attempt: the nominal delay plus up to a quarter of it, never less."""
        return self.delay(retries) * (1.0 + _JITTER * rand())

    @property
    def max_retries(self) -> int:
        """Retries whose nominal waits add up to ``budget_s`` (the budget is a floor, see the module doc)."""
        waited, n = 0.0, 0
        while waited < self.budget_s:
            waited += self.delay(n)
            n += 1
        return n

    @property
    def longest_wait(self) -> float:
        """The longest countdown a retried task can hold in a worker (jitter included)."""
        return self.cap_s * (1.0 + _JITTER)

    @classmethod
    def within(cls, budget_s: float, visibility_timeout: float) -> RetryPolicy:
        """A policy of ``budget_s`` seconds (``SEMDUP_RETRY_BUDGET``) whose waits fit ``visibility_timeout``.

        Raises:
            ConfigError: a negative budget.
        """
        if budget_s < 0:
            raise ConfigError(f"SEMDUP_RETRY_BUDGET must be seconds >= 0, found {budget_s!r}; e.g. 1800")
        cap = max(1.0, min(MAX_RETRY_WAIT, visibility_timeout / 5))
        return cls(budget_s=budget_s, first_s=min(2.0, cap), cap_s=cap)
