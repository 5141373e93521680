"""The FLAG_DUPLICATES task's decisions without a broker or a cluster: flag, retry, give up, refuse another model."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from celery.exceptions import Reject, Retry
from celery_retries import Sent, run_as_worker

from semdup.alerts import tasks
from semdup.alerts.settings import AlertSettings
from semdup.alerts.store import Flag
from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.core.posts import Post
from semdup.core.task_names import FLAG_DUPLICATES
from semdup.indexer.retry import RetryPolicy
from semdup.indexer.runtime import WorkerRuntime
from semdup.ingest.celery_app import app

POLICY = RetryPolicy(budget_s=10, first_s=2, cap_s=4)


def task() -> Any:
    """The registered task (its waits: the worker app's annotations when it was finalized, else the defaults)."""
    return app.tasks[FLAG_DUPLICATES]


def RUN(monkeypatch, *args: Any, retries: int = 0, sent: Sent | None = None) -> Any:
    """The task as a worker runs it (Celery's autoretry included), as its ``retries``-th retry."""
    return run_as_worker(monkeypatch, task(), *args, retries=retries, sent=sent)


@pytest.fixture
def worker(monkeypatch) -> dict[str, Any]:
    """A runtime on bundle ``m-1``; reading posts, flagging and deleting flags record their calls."""
    seen: dict[str, Any] = {"flagged": [], "deleted": [], "error": None, "missing": []}
    rt = WorkerRuntime(bundle=SimpleNamespace(version="m-1"), client=object(), retry=POLICY)
    monkeypatch.setattr(tasks, "runtime", lambda: rt)
    monkeypatch.setattr(tasks, "process_reranker", lambda rt, index: ("rr", SimpleNamespace(flag_k=3)))

    def read_posts(client, index, ids, *, to_encode=False):
        return [Post(i, "t") for i in ids if i not in seen["missing"]], [i for i in ids if i in seen["missing"]]

    def flag(rr, client, index, posts, k):
        if seen["error"] is not None:
            raise seen["error"]
        seen["flagged"].append(([p.id for p in posts], k))
        return [Flag(index, p.id, "c", 0.9, 0.8, "m-1", "t") for p in posts]

    monkeypatch.setattr(tasks, "read_posts", read_posts)
    monkeypatch.setattr(tasks, "flag_duplicates", flag)
    monkeypatch.setattr(tasks, "delete_flags", lambda client, index, ids: seen["deleted"].append(ids))
    return seen


def test_the_task_is_registered_on_the_indexer_app_under_the_shared_name() -> None:
    assert FLAG_DUPLICATES in app.tasks
    task = app.tasks[FLAG_DUPLICATES]
    assert task.acks_late and task.reject_on_worker_lost


def test_posts_are_read_again_and_flagged_and_deleted_ones_lose_their_flags(worker, monkeypatch) -> None:
    worker["missing"] = ["2"]
    done = RUN(monkeypatch, "travel", ["1", "2", "1"], "m-1")
    assert done == {"posts": 1, "flagged": 1, "missing": 1, "failed": 0}
    assert worker["flagged"] == [(["1"], 3)] and worker["deleted"] == [["2"]]


def test_a_transient_error_is_retried_within_the_budget(worker, monkeypatch) -> None:
    worker["error"] = OpenSearchUnavailable("connection refused")
    sent = Sent()
    with pytest.raises(Retry):
        RUN(monkeypatch, "travel", ["1"], "m-1", retries=1, sent=sent)
    assert sent.countdowns == [min(task().retry_backoff_max, 2 * task().retry_backoff)]  # Celery's retry_backoff
    with pytest.raises(Reject) as caught:  # a retry that cannot be sent hands the message back
        RUN(monkeypatch, "travel", ["1"], "m-1", sent=Sent(fails=True))
    assert caught.value.requeue is True


def test_a_spent_budget_or_a_permanent_error_is_logged_and_acknowledged(worker, caplog, monkeypatch) -> None:
    worker["error"] = OpenSearchUnavailable("connection refused")
    sent = Sent()
    assert RUN(monkeypatch, "travel", ["1", "2"], "m-1", retries=POLICY.max_retries, sent=sent)["failed"] == 2
    assert sent.countdowns == []
    worker["error"] = ConfigError("bundle m-1 has no duplicate threshold")
    assert RUN(monkeypatch, "travel", ["1"], "m-1", sent=sent)["failed"] == 1 and sent.countdowns == []
    assert "failed for good" in caplog.text and "ids: 1" in caplog.text


def test_posts_written_by_another_model_are_not_flagged(worker, caplog, monkeypatch) -> None:
    assert RUN(monkeypatch, "travel", ["1"], "m-0")["failed"] == 1
    assert worker["flagged"] == [] and "sent for model m-0 but this worker runs bundle m-1" in caplog.text


def test_a_worker_without_its_runtime_keeps_the_task(monkeypatch) -> None:
    def broken() -> WorkerRuntime:
        raise ConfigError("no model bundle for the worker")

    monkeypatch.setattr(tasks, "runtime", broken)
    sent = Sent()
    with pytest.raises(Retry):
        RUN(monkeypatch, "travel", ["1"], "m-1", sent=sent)
    assert sent.countdowns == [task().retry_backoff_max]  # the longest wait, from the first retry on


def test_one_reranker_per_process_rebuilt_only_for_another_bundle(monkeypatch, tmp_path) -> None:
    built: list[Any] = []

    class FakeReranker:
        def __init__(self, bundle, client, index, settings, calibration) -> None:
            built.append((bundle.version, index, calibration))
            self.threshold = 0.5

    monkeypatch.setattr(tasks, "Reranker", FakeReranker)
    monkeypatch.setattr(tasks, "_cached", None)
    b1 = SimpleNamespace(version="m-1", path=tmp_path / "b1")
    rt = WorkerRuntime(bundle=b1, client=object(), retry=POLICY, alerts=AlertSettings(flag_k=4))  # the root's settings
    first, settings = tasks.process_reranker(rt, "travel")
    assert tasks.process_reranker(rt, "other")[0] is first and settings.flag_k == 4
    rt2 = WorkerRuntime(bundle=SimpleNamespace(version="m-2", path=tmp_path / "b2"), client=object(), retry=POLICY)
    assert tasks.process_reranker(rt2, "travel")[0] is not first
    assert built == [("m-1", "travel", None), ("m-2", "travel", None)]  # no calibration file beside them


def test_a_rewritten_calibration_file_rebuilds_the_reranker_at_the_next_task(monkeypatch, tmp_path) -> None:
    """`semdup calibrate` rewrites <bundle>.calibration.json: the next task flags with its threshold, no restart."""
    from semdup.reranker.calibration import Calibration, save_calibration

    built: list[Any] = []

    class FakeReranker:
        def __init__(self, bundle, client, index, settings, calibration) -> None:
            built.append(None if calibration is None else calibration.threshold)
            self.threshold = None if calibration is None else calibration.threshold

    monkeypatch.setattr(tasks, "Reranker", FakeReranker)
    monkeypatch.setattr(tasks, "_cached", None)
    monkeypatch.delenv("SEMDUP_CALIBRATION", raising=False)
    bundle = SimpleNamespace(version="m-1", path=tmp_path / "b1")
    rt = WorkerRuntime(bundle=bundle, client=object(), retry=POLICY)
    cal_file = tmp_path / "b1.calibration.json"
    assert tasks.process_reranker(rt, "travel")[0].threshold is None  # no file yet
    save_calibration(cal_file, "m-1", Calibration(a=1.0, b=0.0, threshold=0.7))
    first = tasks.process_reranker(rt, "travel")[0]
    assert first.threshold == 0.7
    assert tasks.process_reranker(rt, "travel")[0] is first  # unchanged file: the same reranker
    save_calibration(cal_file, "m-1", Calibration(a=1.0, b=0.0, threshold=0.9))
    assert tasks.process_reranker(rt, "travel")[0].threshold == 0.9
    cal_file.unlink()
    assert tasks.process_reranker(rt, "travel")[0].threshold is None  # removed: back to the bundle's
    assert built == [None, 0.7, 0.9, None]


def test_the_worker_flags_with_the_k_the_calibration_was_chosen_with_unless_flag_k_is_set(
    monkeypatch, tmp_path
) -> None:
    """A threshold chosen for the top 1 candidate means nothing at the top 10: the calibration's k is the worker's,
    SEMDUP_FLAG_K (the operator's explicit word) wins, and a calibration that records none leaves 10."""
    from semdup.reranker.calibration import Calibration, save_calibration

    class FakeReranker:
        def __init__(self, bundle, client, index, settings, calibration) -> None:
            self.threshold = None if calibration is None else calibration.threshold

    monkeypatch.setattr(tasks, "Reranker", FakeReranker)
    bundle = SimpleNamespace(version="m-1", path=tmp_path / "b1")
    cal_file = tmp_path / "b1.calibration.json"

    def k_of(alerts: AlertSettings | None) -> int:
        monkeypatch.setattr(tasks, "_cached", None)
        rt = WorkerRuntime(bundle=bundle, client=object(), retry=POLICY, alerts=alerts)
        return tasks.process_reranker(rt, "travel")[1].flag_k

    assert k_of(None) == 10 and k_of(AlertSettings()) == 10  # no calibration at all
    save_calibration(cal_file, "m-1", Calibration(a=1.0, b=0.0, threshold=0.7, k=1))
    assert k_of(AlertSettings()) == 1
    assert k_of(AlertSettings(flag_k=5)) == 5
    # the file is rewritten without a k (`semdup calibrate`): the same process goes back to 10 at its next task
    monkeypatch.setattr(tasks, "_cached", None)
    rt = WorkerRuntime(bundle=bundle, client=object(), retry=POLICY, alerts=AlertSettings())
    assert tasks.process_reranker(rt, "travel")[1].flag_k == 1
    save_calibration(cal_file, "m-1", Calibration(a=1.0, b=0.0, threshold=0.8))
    assert tasks.process_reranker(rt, "travel")[1].flag_k == 10
