"""A throwaway local RabbitMQ broker: Debian's ``rabbitmq-server`` on 127.0.0.1, in a folder of its own.

For tests and fault benchmarks that run the indexer on RabbitMQ, as :mod:`semdup.devstack.local_redis` does with
Redis::

    broker = LocalRabbitMQ(state_dir=Path(tempfile.mkdtemp()))
    url = broker.start()        # amqp://guest:guest@127.0.0.1:<free port>//
    broker.stop()               # SIGTERM: RabbitMQ stops cleanly, durable queues and persistent messages kept
    broker.start()              # the same node, the same port, the same queued messages

Everything the node writes stays in ``state_dir``: its Erlang cookie (``HOME``), Mnesia database, logs,
config (``rabbitmq.conf``: the AMQP listener on 127.0.0.1 only, ``consumer_timeout``) and an empty plugin list
(starts in seconds). It gets its own ``epmd`` (Erlang's port mapper) on a free port, started and stopped here,
so no daemon outlives it and two nodes never share one; its node name is derived from the folder, and its ports
are kept there, so a restart is the same node with the same URL. The server script is run directly (not
Debian's ``/usr/sbin`` wrapper, which switches to the ``rabbitmq`` account when run as root), so it runs the same
as root here and as a normal user elsewhere. The guest account may log in from 127.0.0.1, which is all this
node listens on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from semdup.core.errors import BrokerUnavailable, ConfigError
from semdup.devstack.local_process import (
    ServiceRecord,
    any_free_port,
    file_lock,
    pid_runs,
    port_is_free,
    read_record,
    remove_record,
    spawn_detached,
    tail,
    terminate,
    write_record,
)

__all__ = ["LocalRabbitMQ", "CONSUMER_TIMEOUT_MS"]

logger = logging.getLogger(__name__)

_STATE_FILE = "rabbitmq.json"
_PORTS_FILE = "ports.json"
_SERVER_DIRS = ("/usr/lib/rabbitmq/bin",)
# RabbitMQ's default (30 min): longer than a message can stay unacknowledged in a live semdup worker (a task of at
# most 120 s plus a retry countdown of at most 75 s; semdup.ingest.celery_app), written out so it is seen.
CONSUMER_TIMEOUT_MS = 1_800_000


def _group_alive(pgid: int) -> bool:
    """Whether any live process is in process group ``pgid`` (the server script and its Erlang VM)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


class LocalRabbitMQ:
    """One throwaway RabbitMQ node: start, stop, status.

    Args:
        state_dir: the node's folder (Mnesia, logs, config, cookie, state record); a temporary one in tests.
        port: AMQP port; None keeps the one recorded in ``state_dir``, else any free port.
        server: the ``rabbitmq-server`` script (default: on PATH, else Debian's ``/usr/lib/rabbitmq/bin``).
    """

    def __init__(self, state_dir: Path | str, port: int | None = None, server: str | None = None) -> None:
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.port = port
        self.server = server
        digest = hashlib.sha256(str(self.state_dir).encode()).hexdigest()[:8]
        self.node = f"semdup-{digest}@localhost"

    def __repr__(self) -> str:
        return f"LocalRabbitMQ(state_dir='{self.state_dir}', url={self.url!r})"

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "log"

    @property
    def url(self) -> str | None:
        """The broker URL while it runs, else None."""
        record = read_record(self.state_file)
        return record.url if record is not None and pid_runs(record.pid) else None

    def ensure_installed(self) -> tuple[Path, Path]:
        """Paths of ``rabbitmq-server`` and ``epmd``; a clear error when they are missing."""
        server = shutil.which(self.server or "rabbitmq-server", path=os.pathsep.join([*_SERVER_DIRS, os.defpath]))
        epmd = shutil.which("epmd", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/bin"]))
        if server is None or epmd is None:
            raise ConfigError(
                "rabbitmq-server (and Erlang's epmd) not found; expected RabbitMQ 3.x for the local AMQP broker. "
                "Install it: apt-get install rabbitmq-server (or set SEMDUP_BROKER_URL to a running broker)"
            )
        return Path(server), Path(epmd)

    def _ports(self) -> dict[str, int]:
        """The node's AMQP, distribution and epmd ports: those recorded in the folder if still free, else new."""
        path = self.state_dir / _PORTS_FILE
        try:
            ports = {k: int(v) for k, v in json.loads(path.read_text()).items()}
        except (OSError, ValueError, AttributeError):
            ports = {}
        if self.port is not None:
            ports["amqp"] = self.port
        for name in ("amqp", "dist", "epmd"):
            if name not in ports or not port_is_free(ports[name]):
                if name == "amqp" and self.port is not None:
                    raise ConfigError(f"port {self.port} on 127.0.0.1 is in use; pick another or leave it out")
                ports[name] = any_free_port()
        path.write_text(json.dumps(ports))
        return ports

    def _env(self, ports: dict[str, int]) -> dict[str, str]:
        conf = self.state_dir / "rabbitmq.conf"
        conf.write_text(
            f"listeners.tcp.default = 127.0.0.1:{ports['amqp']}\n"
            f"consumer_timeout = {CONSUMER_TIMEOUT_MS}\n"
            "loopback_users.guest = true\n"
        )
        plugins = self.state_dir / "enabled_plugins"
        plugins.write_text("[].\n")
        return {
            **os.environ,
            "HOME": str(self.state_dir),  # the Erlang cookie is written here
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(ports["amqp"]),
            "RABBITMQ_DIST_PORT": str(ports["dist"]),
            "ERL_EPMD_PORT": str(ports["epmd"]),
            "RABBITMQ_CONFIG_FILE": str(conf),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_MNESIA_BASE": str(self.state_dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.log_dir),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(self.state_dir / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(self.state_dir / "rabbitmq.pid"),
        }

    def start(self, timeout: float = 60.0) -> str:
        """Start the node detached (or find it running) and return its URL once it answers an AMQP handshake.

        Raises:
            BrokerUnavailable: the node exited or did not answer within ``timeout`` (with its log's tail).
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            record = read_record(self.state_file)
            if record is not None and pid_runs(record.pid):
                return record.url
            server, epmd = self.ensure_installed()
            ports = self._ports()
            env = self._env(ports)
            url = f"amqp://guest:guest@127.0.0.1:{ports['amqp']}//"
            epmd_proc = spawn_detached(
                [str(epmd), "-port", str(ports["epmd"])],
                cwd=self.state_dir,
                env=env,
                log_path=self.state_dir / "epmd.log",
            )
            epmd_proc.returncode = 0  # detached on purpose
            proc = spawn_detached([str(server)], cwd=self.state_dir, env=env, log_path=self.state_dir / "console.log")
            write_record(
                self.state_file,
                ServiceRecord(
                    proc.pid,
                    url,
                    ports["amqp"],
                    "rabbitmq",
                    time.time(),
                    str(self.log_dir),
                    {"epmd_pid": epmd_proc.pid, "node": self.node},
                ),  # fmt: skip
            )
            deadline = time.monotonic() + timeout
            while True:
                code = proc.poll()
                if code is not None:
                    self._stop_record()
                    raise BrokerUnavailable(
                        f"rabbitmq-server exited with code {code} while starting; see {self.log_dir}. Last lines:\n"
                        f"{tail(self.state_dir / 'console.log')}"
                    )
                if _handshake(ports["amqp"], timeout=2.0):
                    break
                if time.monotonic() > deadline:
                    self._stop_record()
                    raise BrokerUnavailable(
                        f"RabbitMQ on port {ports['amqp']} did not answer within {timeout:.0f} s; see {self.log_dir}"
                    )
                time.sleep(0.3)
            proc.returncode = 0  # detached on purpose: tell Popen not to warn that it still runs
            logger.info("started RabbitMQ %s (pid %d) at %s", self.node, proc.pid, url.replace("guest:guest@", ""))
            return url

    def _stop_record(self, timeout: float = 60.0) -> bool:
        """SIGTERM the node's process group (RabbitMQ stops cleanly), SIGKILL after ``timeout``; then its epmd."""
        record = read_record(self.state_file)
        if record is None:
            return False
        killed = False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _group_alive(record.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(record.pid):
            logger.warning("RabbitMQ %s did not stop within %.0f s of SIGTERM; sending SIGKILL", self.node, timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(record.pid, signal.SIGKILL)
            killed = True
            while _group_alive(record.pid):
                time.sleep(0.1)
        pid_runs(record.pid)  # reaps the server script when this process started it
        epmd_pid = int(record.extra.get("epmd_pid", 0))
        if epmd_pid:
            terminate(epmd_pid, "epmd", timeout=10)
        remove_record(self.state_file)
        return killed

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the node (queued persistent messages stay in ``state_dir`` for the next start); False if none ran."""
        with file_lock(self.state_dir / ".lock"):
            record = read_record(self.state_file)
            if record is None:
                return False
            killed = self._stop_record(timeout)
            logger.info("stopped RabbitMQ %s%s", self.node, " (SIGKILL)" if killed else "")
            return True

    def status(self) -> dict[str, Any] | None:
        """URL, pid and whether it answers an AMQP handshake; None when not running."""
        record = read_record(self.state_file)
        if record is None or not pid_runs(record.pid):
            return None
        return {
            "url": record.url,
            "pid": record.pid,
            "node": self.node,
            "state_dir": str(self.state_dir),
            "answers": _handshake(record.port, timeout=2.0),
        }


def _handshake(port: int, timeout: float) -> bool:
    """Whether an AMQP connection to 127.0.0.1:``port`` as guest opens (the node is up and its vhost ready)."""
    import amqp

    conn = amqp.Connection(host=f"127.0.0.1:{port}", userid="guest", password="guest", connect_timeout=timeout)
    try:
        conn.connect()
    except Exception:  # refused, reset, or an AMQP error while the node boots
        with contextlib.suppress(Exception):
            conn.collect()
        return False
    with contextlib.suppress(Exception):
        conn.close()
    return True
