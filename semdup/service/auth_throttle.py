"""Guessing costs time: per client address, a few wrong keys or logins per window, then 429 with Retry-After.

    throttle = FailureThrottle(Path(run_dir) / THROTTLE_FILE, limit=10, window=60, block=60)
    throttle.blocked("203.0.113.7", key)   # seconds the address (or this key from it) must still wait (0.0: go)
    throttle.fail("203.0.113.7", key)      # a wrong key: counted; seconds blocked from now on (0.0: not yet)

Rules:

- The failures of one address are counted over a fixed window of ``window`` seconds; the ``limit``-th starts a
  block of ``block`` seconds. A block that follows within a window of the previous one's end lasts twice as long,
  up to :data:`MAX_BLOCK_S`: a guesser gets ``limit`` tries per block, ever fewer per hour.
- **A wrong key sent again is one guess, not many.** Each wrong key is also counted on its own, per address (a
  row keyed by the address and a SHA-256 of the key, never the key): only its first failure in a window counts
  against the address; its repeats count against that key alone, which the same rules block. A stale key (a
  search pipeline's connector with an old credential, a page with an old key) so blocks itself and nobody
  else behind the same address (every pipeline of a cluster calls from its node's address), while a guesser,
  whose keys are all different, is counted exactly as before: ``limit`` different keys per block.
- A blocked address gets 429 on every request that presents a key, right or not: answering a right key during
  the block would tell the guesser which guess was right. A blocked key gets 429 only itself.
- Outside a block nothing is slowed: a right key costs one indexed read, and only failures are written.
- An address is an IPv4 address or the /64 of an IPv6 one (one host is commonly given a whole /64).
- Memory is bounded: rows expire ``window`` + :data:`MAX_BLOCK_S` seconds after their last failure, and past
  :data:`MAX_ADDRESSES` rows the oldest go first, so a flood from many addresses cannot grow the table; a failure
  is one or two small writes, so the throttle cannot become a way to make the service work hard.

Why SQLite in a folder: ``semdup serve`` runs several uvicorn worker processes, and the kernel spreads a guesser's
connections over them; counts kept in each process would give N workers N times the guesses. A small SQLite file
in a folder the service's processes share (``SEMDUP_RUNTIME_DIR``; by default a temporary folder that ``semdup
serve`` makes and removes) is shared between processes, transactional, and needs no other server. The counts never
go to OpenSearch: a guesser must not be able to make the cluster write, and a restart may forget them. Replicas
count apart (each has its own folder): N replicas allow N times the guesses, still bounded. Without a folder
(an app built in a test, or embedded) the counts live in this process (SQLite in memory).

If the file cannot be read or written (a full disk), the service answers as if nothing were counted and logs a
warning at most once a minute: an outage of the throttle must not lock every client out.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import math
import sqlite3
import threading
import time
from pathlib import Path

__all__ = [
    "FailureThrottle",
    "Throttled",
    "client_address",
    "key_row",
    "key_label",
    "retry_after",
    "THROTTLE_FILE",
    "MAX_BLOCK_S",
    "MAX_ADDRESSES",
]

logger = logging.getLogger(__name__)

THROTTLE_FILE = "auth-failures.sqlite3"
MAX_BLOCK_S = 3600.0
MAX_ADDRESSES = 100_000
_PRUNE_EVERY = 500  # failures between two checks of the table's size (per process)
_WARN_EVERY_S = 60.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS failures (addr TEXT PRIMARY KEY, count INTEGER NOT NULL, since REAL NOT NULL, "
    "blocked_until REAL NOT NULL, strikes INTEGER NOT NULL, last REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS failures_last ON failures (last)",
)


class Throttled(Exception):
    """Too many failures from this address: answer 429 with ``Retry-After`` (:func:`retry_after`)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(
            f"too many wrong keys or logins from this address; retry after {retry_after(seconds)} s with the right "
            "key"
        )


def retry_after(seconds: float) -> int:
    """The ``Retry-After`` value (whole seconds, at least 1) for a block of ``seconds`` left."""
    return max(1, math.ceil(seconds))


def client_address(host: str | None) -> str:
    """What failures are counted by: an IPv4 address, the /64 of an IPv6 address, else the text given."""
    if not host:
        return "unknown"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a name (a test client's), counted as it is
        return host[:255]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


def key_row(address: str, key: str) -> str:
    """The row one wrong ``key`` from ``address`` is counted in: the address and the first 24 hex digits of the
    key's SHA-256 (what the file and the logs may show; the key itself never)."""
    return f"{address} key:{key_label(key)}"


def key_label(key: str) -> str:
    """A wrong key as the file and the log name it: ``sha256:<24 hex digits>`` (an operator can compute the same
    from the key a connector was given, ``printf %s KEY | sha256sum``)."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:24]


class FailureThrottle:
    """The failure counts of one service (module docstring), in ``path`` (None: this process's memory).

    Args:
        path: the SQLite file the service's processes share, or None.
        limit: failures an address may make per window; the ``limit``-th starts a block.
        window: seconds over which failures are counted.
        block: seconds of the first block (doubling in a row, at most :data:`MAX_BLOCK_S`).
        max_addresses: rows kept at most.
    """

    def __init__(
        self,
        path: str | Path | None,
        *,
        limit: int = 10,
        window: float = 60.0,
        block: float = 60.0,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        if limit < 1 or window <= 0 or block <= 0 or max_addresses < 1:
            raise ValueError(
                f"limit >= 1, window > 0, block > 0 and max_addresses >= 1 are needed; got {limit}, {window}, "
                f"{block}, {max_addresses}"
            )
        self.path = None if path is None else str(path)
        self.limit, self.window, self.block, self.max_addresses = limit, float(window), float(block), max_addresses
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._fails = 0
        self._warned_at = -_WARN_EVERY_S

    def __repr__(self) -> str:
        return f"FailureThrottle(path={self.path!r}, limit={self.limit}, window={self.window}, block={self.block})"

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:  # opened in the process that uses it (uvicorn's workers are spawned after the parent)
            db = sqlite3.connect(self.path or ":memory:", timeout=5.0, isolation_level=None, check_same_thread=False)
            if self.path:
                db.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer
                db.execute("PRAGMA synchronous=NORMAL")  # counts may be lost with the machine, never corrupted
            for statement in _SCHEMA:
                db.execute(statement)
            self._db = db
        return self._db

    def _failed(self, exc: sqlite3.Error) -> float:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            logger.warning(
                "the failure counts in %s could not be used (%s: %s); wrong keys are not throttled until it "
                "works again: check the folder's space and permissions (SEMDUP_RUNTIME_DIR)",
                self.path or "memory",
                type(exc).__name__,
                exc,
            )
        return 0.0

    def blocked(self, address: str, key: str | None = None, now: float | None = None) -> float:
        """Seconds ``address`` (or ``key`` from it) must still wait before presenting a key again (0.0: it may)."""
        now = time.time() if now is None else now
        rows = (address,) if key is None else (address, key_row(address, key))
        try:
            with self._lock:
                (until,) = self._conn().execute(
                    f"SELECT MAX(blocked_until) FROM failures WHERE addr IN ({', '.join('?' * len(rows))})", rows
                ).fetchone()
        except sqlite3.Error as exc:
            return self._failed(exc)
        return max(0.0, until - now) if until else 0.0

    def fail(self, address: str, key: str | None = None, now: float | None = None) -> float:
        """Count one failure of ``address`` with the wrong ``key`` (module doc: a repeated key counts against
        itself); the seconds the address or that key is blocked from now on (0.0: not blocked)."""
        now = time.time() if now is None else now
        try:
            with self._lock:
                return self._count_failure(self._conn(), address, key, now)
        except sqlite3.Error as exc:
            return self._failed(exc)

    def _count_failure(self, db: sqlite3.Connection, address: str, key: str | None, now: float) -> float:
        db.execute("BEGIN IMMEDIATE")  # one writer at a time across the processes: no failure is lost
        try:
            if key is None:
                left, first = self._count(db, address, now)[0], False
            else:
                left, first = self._count(db, key_row(address, key), now)
                if first:  # a key not seen in this window: one more guess of the address
                    left = max(left, self._count(db, address, now)[0])
            self._fails += 1
            if self._fails % _PRUNE_EVERY == 1:
                self._prune(db, now)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return left

    def _count(self, db: sqlite3.Connection, row_id: str, now: float) -> tuple[float, bool]:
        """One failure on row ``row_id``: the seconds it is blocked from now on, and whether it is the first of its
        window (the row's count was zero)."""
        row = db.execute(
            "SELECT count, since, blocked_until, strikes FROM failures WHERE addr = ?", (row_id,)
        ).fetchone()
        count, since, until, strikes = row if row else (0, now, 0.0, 0)
        if now - since >= self.window:
            count, since = 0, now
        if until and now > until + self.window:  # quiet for a window since its last block: start over
            strikes = 0
        first = count == 0 and not (until and now < until + self.window)
        count += 1
        if count >= self.limit:
            strikes += 1
            until = now + min(self.block * 2 ** (strikes - 1), MAX_BLOCK_S)
            count, since = 0, now
        db.execute(
            "INSERT OR REPLACE INTO failures (addr, count, since, blocked_until, strikes, last) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (row_id, count, since, until, strikes, now),
        )
        return max(0.0, until - now), first

    def _prune(self, db: sqlite3.Connection, now: float) -> None:
        db.execute("DELETE FROM failures WHERE last < ?", (now - self.window - MAX_BLOCK_S,))
        (rows,) = db.execute("SELECT COUNT(*) FROM failures").fetchone()
        if rows > self.max_addresses:
            db.execute(
                "DELETE FROM failures WHERE addr IN (SELECT addr FROM failures ORDER BY last LIMIT ?)",
                (rows - self.max_addresses,),
            )

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
