"""Failed keys cost time: a fixed window per address, blocks that double, counts shared by processes, bounded rows.

The clock is passed in (``now=``), so no test sleeps; the cross-process test runs real spawned processes on one
SQLite file, as `semdup serve`'s uvicorn workers do.
"""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from semdup.service.auth_throttle import (
    _PRUNE_EVERY,
    MAX_BLOCK_S,
    FailureThrottle,
    Throttled,
    client_address,
    retry_after,
)


def test_the_limit_th_failure_in_a_window_starts_a_block_and_blocks_in_a_row_double() -> None:
    t = FailureThrottle(None, limit=3, window=60, block=10)
    assert [t.fail("a", now=100), t.fail("a", now=101)] == [0.0, 0.0]
    assert t.blocked("a", now=101) == 0.0
    assert t.fail("a", now=102) == 10.0  # the third
    assert t.blocked("a", now=105) == 7.0 and t.blocked("b", now=105) == 0.0  # other addresses are not touched
    assert t.blocked("a", now=112) == 0.0  # the block is over: the client may try again
    t.fail("a", now=113), t.fail("a", now=114)
    assert t.fail("a", now=115) == 20.0  # a second block right after the first lasts twice as long
    t.fail("a", now=140), t.fail("a", now=141)
    assert t.fail("a", now=142) == 40.0
    for at in range(1000, 1003):  # a window of quiet after the last block: back to the first length
        left = t.fail("a", now=at)
    assert left == 10.0


def test_a_repeated_wrong_key_blocks_itself_and_no_other_key_from_its_address() -> None:
    """A stale connector key (issue #45: every pipeline of a cluster calls from its node's address) repeats one
    wrong key: it is blocked, the address is not, so the node's other pipelines and clients keep being answered."""
    t = FailureThrottle(None, limit=3, window=60, block=10)
    lefts = [t.fail("node", "stale-key", now=100 + i) for i in range(3)]
    assert lefts == [0.0, 0.0, 10.0]  # the third repeat blocks that key
    assert t.blocked("node", "stale-key", now=105) == 7.0
    assert t.blocked("node", "right-key", now=105) == 0.0 and t.blocked("node", now=105) == 0.0
    assert t.blocked("elsewhere", "stale-key", now=105) == 0.0  # counted per address: not a key's global ban
    assert [t.fail("node", "stale-key", now=111 + i) for i in range(3)][-1] == 20.0  # in a row: twice as long
    assert t.blocked("node", "right-key", now=112) == 0.0  # the stale key counted once against the address


def test_different_wrong_keys_block_the_address_as_before() -> None:
    """A guesser's keys all differ: each is the first of its row, so each counts against the address."""
    t = FailureThrottle(None, limit=3, window=60, block=10)
    assert [t.fail("a", f"guess-{i}", now=100 + i) for i in range(3)] == [0.0, 0.0, 10.0]
    assert t.blocked("a", "the-right-key", now=105) == 7.0  # a right key too: no oracle during the block
    assert t.blocked("b", "the-right-key", now=105) == 0.0
    # repeating one guess does not buy more guesses: it counts once against the address per window
    u = FailureThrottle(None, limit=3, window=60, block=10)
    u.fail("a", "g1", now=0), u.fail("a", "g1", now=1)
    assert u.fail("a", "g2", now=2) == 0.0 and u.fail("a", "g3", now=3) == 10.0


def test_the_file_never_holds_a_key(tmp_path: Path) -> None:
    t = FailureThrottle(tmp_path / "t.sqlite3", limit=3)
    t.fail("node", "stale-key-4b1d-9a7e-0c3f5e2a")
    assert t.blocked("node", "stale-key-4b1d-9a7e-0c3f5e2a") == 0.0  # counted (one failure, no block yet)
    t.close()
    written = b"".join(f.read_bytes() for f in tmp_path.iterdir())  # the file and, where it is left, its WAL
    assert b"node key:sha256:" in written and b"stale-key-4b1d" not in written


def test_failures_spread_over_more_than_a_window_never_block() -> None:
    t = FailureThrottle(None, limit=3, window=60, block=10)
    assert all(t.fail("a", now=at) == 0.0 for at in (0, 30, 61, 90, 122, 150))  # two per window at most


def test_blocks_are_capped_at_an_hour_and_retry_after_is_whole_seconds() -> None:
    t = FailureThrottle(None, limit=1, window=60, block=1000)
    assert [t.fail("a", now=0), t.fail("a", now=1001), t.fail("a", now=3002)] == [1000.0, 2000.0, MAX_BLOCK_S]
    assert retry_after(0.2) == 1 and retry_after(29.01) == 30 and retry_after(30) == 30
    assert "retry after 30 s" in str(Throttled(29.5))


def test_ipv6_addresses_count_by_their_64_and_ipv4_alone() -> None:
    assert client_address("2001:db8:1:2:aaaa::1") == client_address("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_address("2001:db8:1:3::1") != client_address("2001:db8:1:2::1")
    assert client_address("::ffff:203.0.113.7") == "203.0.113.7" and client_address("203.0.113.7") == "203.0.113.7"
    assert client_address(None) == "unknown" and client_address("testclient") == "testclient"


def _fail_many(path: str, address: str, times: int) -> None:
    t = FailureThrottle(path, limit=1000, window=3600, block=10)
    for _ in range(times):
        t.fail(address, now=100.0)


def test_the_counts_are_shared_by_processes_through_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "auth-failures.sqlite3")
    ctx = multiprocessing.get_context("spawn")  # what uvicorn's workers are
    procs = [ctx.Process(target=_fail_many, args=(path, "203.0.113.7", 25)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    (count,) = sqlite3.connect(path).execute("SELECT count FROM failures WHERE addr = '203.0.113.7'").fetchone()
    assert count == 100  # none lost between the processes
    here = FailureThrottle(path, limit=101, window=3600, block=10)
    assert here.fail("203.0.113.7", now=101.0) == 10.0  # the 101st, made by a fifth process, starts the block


def test_the_table_stays_bounded_under_a_flood_of_addresses() -> None:
    t = FailureThrottle(None, limit=5, window=60, block=10, max_addresses=50)
    for i in range(_PRUNE_EVERY + 100):
        t.fail(f"10.0.{i // 256}.{i % 256}", now=1000.0 + i / 1000)
    (rows,) = t._conn().execute("SELECT COUNT(*) FROM failures").fetchone()
    assert rows <= 50 + 100
    t.fail("x", now=10_000.0)
    for i in range(_PRUNE_EVERY - 1):  # the next check removes what expired
        t.fail("x", now=10_000.0 + i)
    (rows,) = t._conn().execute("SELECT COUNT(*) FROM failures").fetchone()
    assert rows == 1


def test_an_unusable_file_counts_nothing_and_says_so_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    t = FailureThrottle(tmp_path / "no-such-folder" / "x.sqlite3", limit=1, window=60, block=10)
    with caplog.at_level(logging.WARNING):
        assert t.fail("a") == 0.0 and t.blocked("a") == 0.0 and t.fail("a") == 0.0
    warned = [r for r in caplog.records if "could not be used" in r.getMessage()]
    assert len(warned) == 1 and "SEMDUP_RUNTIME_DIR" in warned[0].getMessage()
    with pytest.raises(ValueError):
        FailureThrottle(None, limit=0)
