"""Plumbing shared by the embedded OpenSearch and Redis: home folder, free ports, detached processes.

Both local services run the same way: a server binary started in its own process session (so
it outlives the command that started it), a JSON state record beside its data (pid, URL, port),
and a stop that sends SIGTERM, waits, then SIGKILL. A record is trusted only while its pid is
alive *and* still runs the expected program, so a reused pid never passes for our server.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import pwd
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError
from semdup.core.model_files import cache_home

__all__ = [
    "ServiceRecord",
    "RunAs",
    "semdup_home",
    "read_record",
    "write_record",
    "remove_record",
    "pid_runs",
    "port_is_free",
    "choose_port",
    "any_free_port",
    "spawn_detached",
    "terminate",
    "file_lock",
    "tail",
]

logger = logging.getLogger(__name__)


def semdup_home() -> Path:
    """Folder holding downloads, unpacked servers and their state: :func:`semdup.core.model_files.cache_home`
    (``$SEMDUP_CACHE``, else ``~/.cache/semdup``, or ``/var/lib/semdup`` for root)."""
    return cache_home()


@dataclass(frozen=True)
class RunAs:
    """An unprivileged account a server is started as (only used when we are root)."""

    user: str
    uid: int
    gid: int

    @classmethod
    def lookup(cls, user: str) -> RunAs:
        try:
            entry = pwd.getpwnam(user)
        except KeyError as exc:
            raise ConfigError(
                f"user {user!r} does not exist; expected an unprivileged account to run the server as. "
                f"Create it (useradd --system {user}) or name another one"
            ) from exc
        return cls(user=user, uid=entry.pw_uid, gid=entry.pw_gid)


@dataclass(frozen=True)
class ServiceRecord:
    """What a started server leaves in its state folder: enough to find, check and stop it."""

    pid: int
    url: str
    port: int
    program: str  # a string that must appear in /proc/<pid>/cmdline
    started_at: float
    log: str
    extra: dict[str, Any] = field(default_factory=dict)


def read_record(path: Path) -> ServiceRecord | None:
    """Read a state record; a missing or unreadable one means "nothing recorded"."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return ServiceRecord(**data)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        logger.warning("ignoring unreadable state file %s (%s); delete it if no server runs", path, exc)
        return None


def write_record(path: Path, record: ServiceRecord) -> None:
    """Write the record atomically, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(asdict(record), indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def remove_record(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _reap(pid: int) -> None:
    # A server we started in this process becomes a zombie when it exits; collect it.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_runs(pid: int, program: str | None = None) -> bool:
    """True when ``pid`` is a live (non-zombie) process whose command line contains ``program``."""
    if pid <= 0:
        return False
    _reap(pid)
    proc = Path(f"/proc/{pid}")
    try:
        stat = (proc / "stat").read_text()
        state = stat.rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        if program is not None:
            return program in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return True
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except PermissionError:
        # /proc hidden (hidepid): fall back to a signal probe.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and we may bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(requested: int | None, preferred: int, host: str = "127.0.0.1") -> int:
    """The port to use: ``requested`` (must be free), else ``preferred`` if free, else any free port."""
    if requested is not None:
        if not 0 < requested < 65536:
            raise ConfigError(f"port must be between 1 and 65535, got {requested}")
        if not port_is_free(requested, host):
            raise ConfigError(f"port {requested} on {host} is in use; pick another with --port or leave it out")
        return requested
    if preferred > 0 and port_is_free(preferred, host):
        return preferred
    return any_free_port(host)


def any_free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free right now (tests use it to avoid racing each other for 9200)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def spawn_detached(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_path: Path,
    run_as: RunAs | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, stdout+stderr appended to ``log_path``, stdin closed.

    The child keeps running after we exit; the caller records its pid.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        kwargs: dict[str, Any] = {}
        if run_as is not None:
            kwargs.update(user=run_as.uid, group=run_as.gid, extra_groups=[])
        try:
            return subprocess.Popen(  # noqa: S603 - argv is built by us, never from user text
                list(argv),
                cwd=str(cwd),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                **kwargs,
            )
        except OSError as exc:
            raise ConfigError(f"could not start {argv[0]}: {exc}") from exc


def terminate(pid: int, program: str | None, timeout: float = 30.0) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL. Returns True if it had to kill."""
    if not pid_runs(pid, program):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_runs(pid, program):
            return False
        time.sleep(0.2)
    logger.warning("pid %d did not stop within %.0fs of SIGTERM; sending SIGKILL", pid, timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and pid_runs(pid, program):
        time.sleep(0.1)
    return True


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = 600.0) -> Iterator[None]:
    """An exclusive lock between processes (two test sessions installing or starting at once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(
                        f"waited {timeout:.0f}s for lock {path}; another semdup process holds it. "
                        "Wait for it to finish, or delete the lock file if none runs"
                    ) from None
                time.sleep(0.25)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def tail(path: Path, lines: int = 20) -> str:
    """Last lines of a log file, for error messages (empty when unreadable)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16_384))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
