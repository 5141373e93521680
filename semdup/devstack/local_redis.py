"""The embedded local Redis broker: Debian's ``redis-server`` on 127.0.0.1, started detached by us.

Same pattern as :mod:`semdup.devstack.local_opensearch`::

    broker = LocalRedis()
    url = broker.start()        # redis://127.0.0.1:6379/0 (another free port if 6379 is taken)
    broker.stop()

Persistence is append-only (``appendonly yes``, fsync every second), so a broker stopped and
started again still holds the Celery tasks that were queued; a clean stop (SIGTERM) flushes the
log first, so nothing is lost then. RDB snapshots are off: the append-only file is the copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from semdup.core.errors import BrokerUnavailable, ConfigError
from semdup.devstack.local_process import (
    ServiceRecord,
    choose_port,
    file_lock,
    pid_runs,
    read_record,
    remove_record,
    semdup_home,
    spawn_detached,
    tail,
    terminate,
    write_record,
)

__all__ = ["LocalRedis", "running_url", "default_state_dir"]

logger = logging.getLogger(__name__)

_PROGRAM = "redis-server"
_STATE_FILE = "redis.json"


def default_state_dir() -> Path:
    return semdup_home() / "state" / "redis"


def _live_record(state_dir: Path) -> ServiceRecord | None:
    record = read_record(state_dir / _STATE_FILE)
    if record is not None and pid_runs(record.pid, _PROGRAM):
        return record
    return None


def running_url(state_dir: Path | None = None) -> str | None:
    """``redis://127.0.0.1:PORT/0`` of the embedded broker recorded in ``state_dir`` if alive, else None."""
    record = _live_record(state_dir or default_state_dir())
    return record.url if record else None


def _ping(port: int, timeout: float) -> dict[str, Any]:
    """PING and read the persistence section; raises BrokerUnavailable when Redis does not answer."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
        persistence = client.info("persistence")
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"no Redis answering PING at 127.0.0.1:{port} ({exc})") from exc
    finally:
        client.close()
    return persistence


class LocalRedis:
    """One embedded Redis: start, stop, status.

    Args:
        state_dir: append-only file, log and state record (default ``<semdup home>/state/redis``).
        port: TCP port; None tries 6379, then any free port.
        binary: the server program (default ``redis-server`` on PATH).
    """

    def __init__(
        self, state_dir: Path | str | None = None, port: int | None = None, binary: str | None = None
    ) -> None:
        self.state_dir = (Path(state_dir).expanduser() if state_dir else default_state_dir()).absolute()
        self.port = port
        self.binary = binary or "redis-server"

    def __repr__(self) -> str:
        return f"LocalRedis(state_dir='{self.state_dir}', url={self.url!r})"

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.state_dir / "redis.log"

    @property
    def url(self) -> str | None:
        """The broker URL while it runs, else None."""
        return running_url(self.state_dir)

    def ensure_installed(self) -> Path:
        """Path of the ``redis-server`` program; a clear error when it is missing."""
        found = shutil.which(self.binary)
        if found is None:
            raise ConfigError(
                f"{self.binary} not found on PATH; expected Redis 6+ for the local broker. "
                "Install it: apt-get install redis-server (or set SEMDUP_BROKER_URL to a running broker)"
            )
        return Path(found)

    def start(self, timeout: float = 30.0) -> str:
        """Start Redis detached (or find it running) and return its URL once it answers PING."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            record = _live_record(self.state_dir)
            if record is not None:
                return record.url
            binary = self.ensure_installed()
            port = choose_port(self.port, 6379)
            url = f"redis://127.0.0.1:{port}/0"
            argv = [
                str(binary),
                "--bind", "127.0.0.1",
                "--port", str(port),
                "--dir", str(self.state_dir),
                "--daemonize", "no",
                "--appendonly", "yes",
                "--appendfsync", "everysec",
                "--save", "",
                "--logfile", str(self.log_file),
                "--pidfile", str(self.state_dir / "redis.pid"),
            ]  # fmt: skip
            proc = spawn_detached(argv, cwd=self.state_dir, env=os.environ, log_path=self.state_dir / "console.log")
            write_record(
                self.state_file,
                ServiceRecord(proc.pid, url, port, _PROGRAM, time.time(), str(self.log_file), {"appendonly": True}),
            )
            deadline = time.monotonic() + timeout
            while True:
                code = proc.poll()
                if code is not None:
                    remove_record(self.state_file)
                    raise BrokerUnavailable(
                        f"redis-server exited with code {code} while starting; see {self.log_file}. "
                        f"Last lines:\n{tail(self.log_file) or tail(self.state_dir / 'console.log')}"
                    )
                try:
                    _ping(port, timeout=1.0)
                    break
                except BrokerUnavailable:
                    if time.monotonic() > deadline:
                        terminate(proc.pid, _PROGRAM, timeout=5)
                        remove_record(self.state_file)
                        raise BrokerUnavailable(
                            f"redis-server on port {port} did not answer PING within {timeout:.0f}s; "
                            f"see {self.log_file}"
                        ) from None
                    time.sleep(0.1)
            proc.returncode = 0  # detached on purpose: tell Popen not to warn that it still runs
            logger.info("started Redis pid %d at %s", proc.pid, url)
            return url

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop Redis (SIGTERM makes it flush the append-only file), SIGKILL after ``timeout``."""
        with file_lock(self.state_dir / ".lock"):
            record = read_record(self.state_file)
            if record is None or not pid_runs(record.pid, _PROGRAM):
                remove_record(self.state_file)
                return False
            killed = terminate(record.pid, _PROGRAM, timeout)
            remove_record(self.state_file)
            logger.info("stopped Redis pid %d%s", record.pid, " (SIGKILL)" if killed else "")
            return True

    def status(self, timeout: float = 3.0) -> dict[str, Any] | None:
        """URL, pid, PING result and append-only state; None when not running."""
        record = _live_record(self.state_dir)
        if record is None:
            return None
        info: dict[str, Any] = {"url": record.url, "pid": record.pid, "state_dir": str(self.state_dir)}
        info["log"] = record.log
        try:
            persistence = _ping(record.port, timeout)
            info["ping"] = True
            info["aof_enabled"] = bool(persistence.get("aof_enabled"))
        except BrokerUnavailable as exc:
            info["ping"] = False
            info["error"] = str(exc)
        return info
