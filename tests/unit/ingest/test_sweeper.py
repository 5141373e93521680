"""The sweeper's rules without a broker or a cluster (issue #17): what counts as missing, when a batch is sent
again, and what is left alone (a message in flight, a batch on an unreadable broker); a sweeper of several jobs
(``semdup serve``'s, ``semdup watch``'s) forgets the finished ones, and its thread sweeps until stopped."""

from __future__ import annotations

from typing import Any

import pytest

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.ingest import ledger, sweeper
from semdup.ingest.ledger import LedgerEntry, SentMark, task_id
from semdup.ingest.outcomes import Job
from semdup.ingest.sweeper import DEFAULT_SWEEP_AFTER, Sweeper
from semdup.ingest.waiting import WaitState, format_duration

JOB = Job("j1", "travel", "bow-cnn-0123456789ab", total=40)


class FakeApp:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send_task(self, name: str, **kw: Any) -> None:
        self.sent.append({"name": name, **kw})


class World:
    """The ledger (job j1: 4 batches of 10), the done set, the broker's task ids and a clock, all settable by a
    test; ``reads`` counts the broker's reads and ``forgotten`` the jobs whose ledger was deleted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entries = {("j1", str(k)): LedgerEntry(k, 10) for k in range(4)}
        self.done: set[str] = set()  # batch keys of j1
        self.broker: dict[str, bool] | None = {task_id("j1", str(k)): False for k in range(4)}
        self.broker_error: Exception | None = None
        self.rabbit_down = False  # an unreadable broker (RabbitMQ) that does not answer either
        self.opensearch_error: Exception | None = None
        self.mark: SentMark | None = SentMark(4, 0.0)
        self.now = 1000.0
        self.reads = 0
        self.forgotten: list[str] = []
        self.other_done: set[tuple[str, str]] = set()  # done batches of jobs other than j1
        monkeypatch.setattr(ledger, "done_batches", lambda c, jobs: self._os(self._done(jobs)))
        monkeypatch.setattr(ledger, "ledger_entries", lambda c, jobs=(), indices=(): self._os(dict(self.entries)))
        monkeypatch.setattr(
            ledger, "sent_marks", lambda c, jobs: self._os({} if self.mark is None else {"j1": self.mark})
        )
        monkeypatch.setattr(
            ledger, "read_calls", lambda c, keys: [(k, "semdup.indexer.index_posts", ["travel", [k[1]]]) for k in keys]
        )
        monkeypatch.setattr(ledger, "forget_batches", lambda c, job: self.forgotten.append(job))
        monkeypatch.setattr(sweeper, "queued_task_ids", self._broker)
        monkeypatch.setattr(sweeper, "check_broker", self._answer)

    def _done(self, jobs: Any) -> set[tuple[str, str]]:
        return {("j1", k) for k in self.done} | {k for k in self.entries if k[0] != "j1" and k in self.other_done}


    def _os(self, value: Any) -> Any:
        if self.opensearch_error is not None:
            raise self.opensearch_error
        return value

    def _answer(self, app: Any) -> None:
        if self.rabbit_down:
            raise BrokerUnavailable("connection refused")

    def _broker(self, app: Any) -> dict[str, bool] | None:
        self.reads += 1
        if self.broker_error is not None:
            raise self.broker_error
        return None if self.broker is None else dict(self.broker)

    def take(self, key: str) -> None:
        """A worker's BRPOP: the message leaves the queue; no HSET follows (the worker died, or not yet)."""
        assert self.broker is not None
        del self.broker[task_id("j1", key)]

    def sweeper(self, after: float = 60.0, **scope: Any) -> tuple[Sweeper, FakeApp]:
        app = FakeApp()
        scope = scope or {"jobs": [JOB.id]}
        return Sweeper(None, app, after, clock=lambda: self.now, **scope), app  # type: ignore[arg-type]


def test_a_batch_in_flight_at_one_sweep_is_neither_reported_nor_sent(monkeypatch) -> None:
    world = World(monkeypatch)
    s, app = world.sweeper()
    world.take("1")  # between BRPOP and HSET at this read
    first = s.sweep()
    assert first.missing == () and first.resent == () and first.queued == 3 and first.queued_posts == 30
    world.broker[task_id("j1", "1")] = True  # the HSET came: unacknowledged, held by the worker
    world.now += 61
    second = s.sweep()
    assert second.missing == () and app.sent == [] and second.queued == 4


def test_a_batch_missing_past_the_bound_is_sent_again_once_with_its_own_task_id(monkeypatch) -> None:
    world = World(monkeypatch)
    s, app = world.sweeper(after=60)
    world.done = {"0"}
    world.take("0")
    world.take("2")  # lost: its worker died between BRPOP and HSET
    assert s.sweep().missing == ()  # seen once: could be in flight
    world.now += 30
    confirmed = s.sweep()
    assert confirmed.missing == ("j1-2",) and confirmed.missing_posts == 10 and confirmed.missing_for_s == 30
    assert app.sent == []  # not yet past the bound
    world.now += 30
    sent = s.sweep()
    assert sent.resent == ("j1-2",) and sent.missing == ()
    assert app.sent == [
        {
            "name": "semdup.indexer.index_posts",
            "args": ["travel", ["2"]],
            "kwargs": {"job": "j1", "batch": "2"},
            "task_id": "j1-2",
        }
    ]
    world.broker[task_id("j1", "2")] = False  # the copy is queued now
    world.now += 120
    assert s.sweep().resent == () and len(app.sent) == 1 and s.resent_total == 1


def test_nothing_is_sent_while_the_broker_or_the_cluster_does_not_answer(monkeypatch) -> None:
    world = World(monkeypatch)
    s, app = world.sweeper(after=10)
    world.take("3")
    s.sweep()
    world.now += 100
    world.broker_error = BrokerUnavailable("connection refused")
    down = s.sweep()
    assert down.broker_error and down.queued is None and down.resent == () and app.sent == []
    world.broker_error = None
    world.opensearch_error = OpenSearchUnavailable("cut")
    cut = s.sweep()
    assert cut.opensearch_error and cut.queued_posts == 30 and cut.resent == () and app.sent == []
    world.opensearch_error = None
    assert s.sweep().resent == ("j1-3",)  # missing all along, so sent at the first sweep that can tell


def test_on_rabbitmq_only_batches_the_producer_never_published_are_sent_again(monkeypatch) -> None:
    world = World(monkeypatch)
    world.broker = None  # RabbitMQ: the queue cannot be read
    world.mark = SentMark(2, 0.0)  # the producer died after publishing batches 0 and 1
    world.done = {"0"}
    s, app = world.sweeper(after=10)
    first = s.sweep()
    assert first.queued is None and first.queued_posts is None
    world.now += 10
    assert s.sweep().resent == ("j1-2", "j1-3")  # "1" is on the broker (published, confirmed): left to it
    world.now += 100
    assert s.sweep().resent == () and [m["task_id"] for m in app.sent] == ["j1-2", "j1-3"]
    world.rabbit_down = True  # stopped: said so, and nothing decided meanwhile
    world.now += 100
    down = s.sweep()
    assert down.broker_error == "connection refused" and down.resent == ()
    world.rabbit_down = False
    world.mark = None  # a job recorded before the ledger: nothing to go by, nothing sent
    s2, app2 = world.sweeper(after=1)
    s2.sweep()
    world.now += 5
    assert s2.sweep().resent == () and app2.sent == []


def test_a_sweeper_of_indices_sweeps_every_open_job_and_forgets_the_finished_ones(monkeypatch) -> None:
    """``semdup serve``'s sweeper: the unfinished jobs of its indices (HTTP requests, others' jobs), one read of
    each store per sweep; nothing open, nothing read on the broker."""
    world = World(monkeypatch)
    world.entries |= {("j2", "0"): LedgerEntry(0, 5), ("j3", "0"): LedgerEntry(0, 7), ("j3", "1"): LedgerEntry(1, 7)}
    world.other_done = {("j2", "0")}  # j2 (one batch) is finished; j3's two batches are not
    world.broker |= {task_id("j3", "1"): False}  # j3's batch 0 was lost between BRPOP and HSET
    s, app = world.sweeper(after=10, indices=["travel"])
    first = s.sweep()
    assert first.finished == ("j2",) and world.forgotten == ["j2"] and first.batches == 7 and first.queued == 5
    world.now += 10
    world.entries.pop(("j2", "0"))  # deleted with its job's ledger
    again = s.sweep()
    assert again.resent == ("j3-0",) and app.sent[0]["task_id"] == "j3-0" and again.finished == ()
    world.done = {"0", "1", "2", "3"}
    world.other_done = {("j3", "0"), ("j3", "1")}
    assert s.sweep().finished == ("j1", "j3")
    world.entries.clear()
    reads = world.reads
    idle = s.sweep()
    assert (idle.batches, idle.queued, world.reads) == (0, None, reads)  # nothing open: the broker is not read
    with pytest.raises(ValueError, match="either jobs or the unfinished jobs of indices"):
        Sweeper(None, app, DEFAULT_SWEEP_AFTER, jobs=["j1"], indices=["travel"])  # type: ignore[arg-type]


def test_the_sweeping_thread_sweeps_every_interval_until_stopped(monkeypatch) -> None:
    import threading

    world = World(monkeypatch)
    s, _ = world.sweeper(after=4, indices=["travel"])  # every_s = 1
    swept = threading.Event()
    real = s.sweep
    monkeypatch.setattr(s, "sweep", lambda: (swept.set(), real())[1])
    loop = sweeper.SweepLoop(s)
    loop.start()
    try:
        assert swept.wait(5), "the thread did not sweep within 5 s"
    finally:
        loop.stop()
    reads = world.reads
    swept.clear()
    assert not swept.wait(1.5) and world.reads == reads  # stopped: no sweep after stop()


def test_the_sweep_bound_comes_from_the_environment_with_a_bound_above_a_task() -> None:
    from semdup.apps.settings import load_settings

    default = load_settings(env={}).worker.sweep_after
    assert default == DEFAULT_SWEEP_AFTER == 300
    assert Sweeper(None, FakeApp(), default, jobs=["j"]).every_s == 30  # type: ignore[arg-type]
    eight = load_settings(env={"SEMDUP_SWEEP_AFTER": "8"}).worker.sweep_after
    assert Sweeper(None, FakeApp(), eight, jobs=["j"]).every_s == 2  # type: ignore[arg-type]
    for bad in ("soon", "0", "-5"):
        with pytest.raises(ConfigError, match="SEMDUP_SWEEP_AFTER must be seconds > 0"):
            load_settings(env={"SEMDUP_SWEEP_AFTER": bad})
    with pytest.raises(ValueError, match="bound must be seconds > 0"):
        Sweeper(None, FakeApp(), 0, jobs=["j"])  # type: ignore[arg-type]


def test_the_wait_state_says_what_holds_a_job_up() -> None:
    assert WaitState().describe(808) is None
    cut = WaitState(opensearch_down_s=384, queued_posts=808)
    assert (
        cut.describe(808) == "OpenSearch unreachable for 6 min; 808 posts held on the broker, the workers retry them"
    )
    rabbit = WaitState(opensearch_down_s=30, broker_down_s=None)
    assert rabbit.describe(12) == "OpenSearch unreachable for 30 s; 12 posts not done, the workers retry them"
    lost = WaitState(missing_posts=50, missing_for_s=130, resent_batches=1, sweep_after_s=300)
    assert lost.describe(50) == (
        "50 posts neither done nor queued for 2 min (a worker killed while taking them?); sent again after 5 min; "
        "1 batches sent again so far"
    )
    assert WaitState(broker_down_s=61).describe(7) == "broker unreachable for 61 s; 7 posts not done"
    assert [format_duration(s) for s in (0, 119, 120, 3599, 3900)] == ["0 s", "119 s", "2 min", "59 min", "1 h 5 min"]
