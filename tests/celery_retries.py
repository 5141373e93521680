"""Running a real Celery task's body as a worker would, without a broker: Celery's autoretry wraps it, and the
retries it sends are recorded instead of published (unit tests of the tasks' retry decisions)."""

from __future__ import annotations

from typing import Any

import pytest


class Sent:
    """Where a task's retries go instead of the broker: their countdowns, or the error a broker that cannot take
    them raises (``fails``)."""

    def __init__(self, fails: bool = False) -> None:
        self.fails, self.countdowns = fails, []

    def signature(self, request: Any, args: Any, kwargs: Any, countdown: float | None = None, **_: Any) -> Any:
        def apply_async() -> None:
            if self.fails:
                raise ConnectionError("broker down")
            self.countdowns.append(countdown)

        return type("Signature", (), {"apply_async": staticmethod(apply_async)})()


def run_as_worker(
    monkeypatch: pytest.MonkeyPatch, task: Any, *args: Any, retries: int = 0, sent: Sent | None = None, **kwargs: Any
) -> Any:
    """``task(*args, **kwargs)`` as its ``retries``-th retry in a worker: what it returns, or what it raises
    (``Retry`` once a retry is sent to ``sent``, ``Reject`` when it cannot be)."""
    monkeypatch.setattr(task, "signature_from_request", (sent or Sent()).signature)
    task.push_request(id="task-1", retries=retries, called_directly=False, is_eager=False)
    try:
        return task.run(*args, **kwargs)
    finally:
        task.pop_request()
