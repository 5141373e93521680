"""Waiting for an index job in the CLI (``index-posts``, ``backfill``, ``--job``): what the wait prints while it
lasts and when it ends.

The library (:func:`semdup.ingest.jobs.follow`, with the sweeper on) returns each look's progress and what holds
the job up (:class:`semdup.ingest.waiting.WaitState`), then how the wait ended (:class:`semdup.ingest.jobs.
JobResult`); this module only prints them: in the progress bar on a terminal, as log lines otherwise
(:class:`WaitReport`), and the result with what to do (:func:`finish_job`).
"""

from __future__ import annotations

import logging
from typing import Any

import click

__all__ = ["WaitReport", "wait_job", "finish_job", "show_parked", "sweep_after"]

logger = logging.getLogger(__name__)


def show_parked(records: Any, index: str, limit: int = 20) -> None:
    """Print parked ``records`` (the first ``limit``), and how to list them all."""
    for n, rec in enumerate(records):
        if n >= limit:
            click.echo(f"... more: semdup index-posts --index {index} --list-parked")
            break
        click.echo(f"  parked {rec.post_id} ({rec.task}): {rec.error[:150]}")


def sweep_after() -> float:
    """The sweeper's bound (``worker.sweep_after``, seconds)."""
    from semdup.cli.edge import settings

    return settings().worker.sweep_after


class WaitReport:
    """What a wait prints besides the bar: the job's pending posts at the first look; then, where no bar shows
    (output not a terminal), what holds the job up as a log line when it changes and every ``every`` seconds
    while it lasts, and one when it clears (on a terminal the bar shows it)."""

    def __init__(self, tty: bool, every: float = 60.0) -> None:
        self.tty, self.every, self.key, self.at, self.started = tty, every, None, 0.0, False

    def __call__(self, progress: Any) -> None:
        import time

        if not self.started:
            self.started = True
            click.echo(
                f"job {progress.job.id}: waiting for {progress.pending} of {progress.total} posts to be written or "
                "parked (Ctrl-C ends the wait, not the job)"
            )
        if self.tty:
            return
        w = progress.waiting
        text = progress.describe_wait()
        key = None if text is None else (w.opensearch_down_s is not None, w.broker_down_s is not None,
                                         w.missing_posts > 0, w.resent_batches)  # fmt: skip
        now = time.monotonic()
        if key is None:
            if self.key is not None:
                logger.warning("job %s: %d of %d posts done; nothing holds it up now", progress.job.id,
                               progress.done, progress.total)  # fmt: skip
            self.key = None
            return
        if key != self.key or now - self.at >= self.every:
            logger.warning("job %s: %d of %d posts done; %s", progress.job.id, progress.done, progress.total, text)
            self.key, self.at = key, now


def wait_job(client: Any, job: Any, *, timeout: float, label: str) -> Any:
    """Follow ``job`` with the sweeper on (:func:`semdup.ingest.jobs.follow`); say what holds it up (in the bar on a
    terminal, else in the log). Returns how the wait ended."""
    import sys

    from semdup.ingest.jobs import follow

    report = WaitReport(tty=sys.stderr.isatty())
    return follow(client, job, timeout=timeout, label=label, sweep_after=sweep_after(), on_progress=report)


def finish_job(result: Any, *, timeout: float, follow: str, again: str) -> None:
    """Print how a job's wait ended; exit 1 ("Error: ...") when any post is parked or not done, saying what to do."""
    from semdup.cli.edge import settings

    done = result.progress
    job = done.job
    gone = f", {done.skipped} gone before the backfill reached them" if done.skipped else ""
    click.echo(
        f"{done.written} posts written to {job.index} with model {job.model_version}, {done.parked} parked{gone}"
    )
    if done.parked:
        show_parked(result.parked, job.index)
    if result.census is not None:
        found = result.census  # two reads: a message in flight at one is seen at the other
        if found.queued is None:
            where = "the broker cannot tell how many of them are still queued"
        else:
            where = f"{found.queued} still queued on the broker, {found.missing} neither queued nor done"
        advice = (
            "Queued posts are written as soon as a worker takes them: keep a worker running (`semdup worker`); a "
            f"batch whose worker was killed is handed out again after the visibility timeout "
            f"({settings().worker.visibility_timeout} s), and one retried while OpenSearch is unreachable is parked "
            f"after the retry budget. Follow the job with `{follow} --job {job.id}`"
        )
        if found.missing:
            advice += (
                f"; it sends again the batches that stay neither queued nor done for {sweep_after():.0f} s "
                f"(SEMDUP_SWEEP_AFTER), or {again} (writes are idempotent)"
            )
        raise click.ClickException(
            f"{done.pending} of {job.total} posts not done after {timeout:.0f} s ({where}). {advice}"
        )
    if done.parked:
        raise click.ClickException(
            f"{done.parked} posts parked (above); fix what parked them, then "
            f"`semdup index-posts --index {job.index} --replay-parked`"
        )
