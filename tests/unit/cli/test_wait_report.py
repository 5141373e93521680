"""What a job wait prints where no progress bar shows (issue #17, item 5): never silent through an outage."""

from __future__ import annotations

import logging

from semdup.cli.job_wait import WaitReport
from semdup.ingest.outcomes import Job
from semdup.ingest.waiting import JobProgress, WaitState

JOB = Job("j1", "travel", "bow-cnn-0123456789ab", total=1000)


def _looks(report: WaitReport, states: list[tuple[int, WaitState]], clock: list[float], every: float) -> None:
    for written, state in states:
        report(JobProgress(JOB, written=written, waiting=state))
        clock[0] += every


def test_an_outage_is_logged_when_it_starts_every_minute_while_it_lasts_and_when_it_ends(
    monkeypatch, caplog, capsys
) -> None:
    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    down = [WaitState(opensearch_down_s=t, queued_posts=808) for t in range(0, 150, 10)]  # 2.5 min, a look per 10 s
    looks = [(192, WaitState())] + [(192, s) for s in down] + [(192, WaitState()), (1000, WaitState())]
    with caplog.at_level(logging.WARNING, logger="semdup.cli.job_wait"):
        _looks(WaitReport(tty=False), looks, clock, every=10.0)
    assert capsys.readouterr().out == (
        "job j1: waiting for 808 of 1000 posts to be written or parked (Ctrl-C ends the wait, not the job)\n"
    )
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "job j1: 192 of 1000 posts done; OpenSearch unreachable for 0 s; 808 posts held on the broker, "
        "the workers retry them",
        "job j1: 192 of 1000 posts done; OpenSearch unreachable for 60 s; 808 posts held on the broker, "
        "the workers retry them",
        "job j1: 192 of 1000 posts done; OpenSearch unreachable for 2 min; 808 posts held on the broker, "
        "the workers retry them",
        "job j1: 192 of 1000 posts done; nothing holds it up now",
    ]


def test_on_a_terminal_the_bar_says_it_and_nothing_is_logged(monkeypatch, caplog, capsys) -> None:
    clock = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="semdup.cli.job_wait"):
        _looks(WaitReport(tty=True), [(0, WaitState(opensearch_down_s=5, queued_posts=10))], clock, every=1.0)
    assert caplog.records == [] and "waiting for 1000 of 1000 posts" in capsys.readouterr().out
