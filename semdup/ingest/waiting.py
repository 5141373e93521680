"""What a wait for an index job sees: how far the job is (:class:`JobProgress`), and what holds it up
(:class:`WaitState`: OpenSearch or the broker unreachable, posts held on the broker, batches sent again).

:func:`semdup.ingest.jobs.poll` yields these; the CLI prints :meth:`WaitState.describe` (in the progress bar on a
terminal, as a log line every so often otherwise), so an outage is never silent::

    OpenSearch unreachable for 2 min; 808 posts held on the broker, the workers retry them
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semdup.ingest.outcomes import Job

__all__ = ["JobProgress", "WaitState", "format_duration"]


def format_duration(seconds: float) -> str:
    """``45 s``, ``6 min``, ``1 h 5 min``: durations as a person reads them in a status line."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass(frozen=True)
class WaitState:
    """What the library knows, at one look, about why a job is not finished yet (None: not the case or unknown).

    Attributes:
        opensearch_down_s: seconds OpenSearch has not answered, counted from the first failed look of this wait.
        opensearch_error: the last error it gave.
        broker_down_s: seconds the broker has not answered the sweeper.
        queued_posts: posts of the job held in task messages on the broker, as of the last sweep (Redis only).
        missing_posts: posts of batches neither done nor queued at two sweeps in a row.
        missing_for_s: how long the oldest of those has been missing.
        resent_batches: batches the sweeper sent again during this wait.
        sweep_after_s: the sweeper's bound (None: no sweeper).
    """

    opensearch_down_s: float | None = None
    opensearch_error: str | None = None
    broker_down_s: float | None = None
    queued_posts: int | None = None
    missing_posts: int = 0
    missing_for_s: float = 0.0
    resent_batches: int = 0
    sweep_after_s: float | None = None

    def describe(self, pending: int) -> str | None:
        """One line on what the wait is held up by, or None when nothing is wrong (the workers are working)."""
        parts = []
        held = (
            f"{self.queued_posts} posts held on the broker"
            if self.queued_posts is not None
            else f"{pending} posts not done"
        )
        if self.opensearch_down_s is not None:
            parts.append(
                f"OpenSearch unreachable for {format_duration(self.opensearch_down_s)}; {held}, the workers retry them"
            )
        if self.broker_down_s is not None:
            parts.append(f"broker unreachable for {format_duration(self.broker_down_s)}; {pending} posts not done")
        if self.missing_posts:
            then = (
                f"sent again after {format_duration(self.sweep_after_s)}"
                if self.sweep_after_s is not None
                else "send them again"
            )
            parts.append(
                f"{self.missing_posts} posts neither done nor queued for {format_duration(self.missing_for_s)} "
                f"(a worker killed while taking them?); {then}"
            )
        if self.resent_batches:
            parts.append(f"{self.resent_batches} batches sent again so far")
        return "; ".join(parts) or None


@dataclass(frozen=True)
class JobProgress:
    """How far a job is, by its finished tasks: of ``job.total`` posts, ``written``, ``parked``, and ``skipped``
    (a backfill's posts deleted before it reached them); the rest are ``pending``. ``waiting`` says what holds
    the rest up, as far as the library knows."""

    job: Job
    written: int = 0
    parked: int = 0
    skipped: int = 0
    waiting: WaitState = field(default_factory=WaitState)

    @property
    def total(self) -> int:
        return self.job.total

    @property
    def done(self) -> int:
        return self.written + self.parked + self.skipped

    @property
    def pending(self) -> int:
        return max(0, self.total - self.done)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def describe_wait(self) -> str | None:
        """:meth:`WaitState.describe` for this job's pending posts (None once finished or when nothing is wrong)."""
        return None if self.finished else self.waiting.describe(self.pending)
