"""The embedded local OpenSearch: one node on 127.0.0.1, built from Maven Central, no Docker.

Use it from Python or through ``semdup opensearch start|stop|status``::

    node = LocalOpenSearch()          # version, folders, heap from the environment or defaults
    url = node.start()                # unpacks once, starts detached, waits for health
    ...
    node.stop()

A node may also be one member of a local cluster (``peers``: the cluster's name, seed hosts and first
cluster-manager nodes; :class:`semdup.devstack.local_cluster.LocalCluster` builds them); such a node keeps the
cluster's default of one replica, and :meth:`LocalOpenSearch.kill` SIGKILLs it as a crash would.

The node runs in its own process session and outlives the command that started it; its pid and
URL live in ``<state dir>/node.json`` (pid also in ``opensearch.pid``), read by :func:`running_url`. Single node,
security off (the integ-test zip has no security plugin), new indices get 0 replicas (so health
is green), disk watermarks off (a full laptop disk must not turn indices read-only), heap 1g.

OpenSearch refuses to run as root. When we are root the node runs as an unprivileged account
(``$SEMDUP_OPENSEARCH_USER``, else ``semdup`` if that user exists, else ``nobody``) and its
config, data and logs folders are handed to that account.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import re
import shutil
import signal
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.devstack.java_runtime import java_range
from semdup.devstack.local_process import (
    RunAs,
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
from semdup.devstack.opensearch_distribution import (
    DEFAULT_VERSION,
    Installation,
    default_version,
    ensure_installed,
    java_home,
)

__all__ = [
    "LocalOpenSearch",
    "ClusterPeers",
    "running_url",
    "default_state_dir",
    "cluster_health",
    "own_opensearch",
]

logger = logging.getLogger(__name__)

_STATE_FILE = "node.json"
_CLUSTER = "semdup-local"
_HEAP = re.compile(r"^[1-9][0-9]*[mMgG]$")
# Index creation reads this from the cluster state, not opensearch.yml: it must be set through the API.
_SINGLE_NODE_SETTINGS = {"cluster.default_number_of_replicas": 0}


def default_state_dir(version: str | None = None) -> Path:
    """``<home>/state/opensearch`` for the default version, ``<home>/state/opensearch-<version>`` for others.

    One folder per version: a data folder written by 3.x cannot be opened by 2.x, and two versions run side by
    side (the 3.x test tier beside the 2.19 node others use).
    """
    return semdup_home() / "state" / _state_name(version or default_version())


def _state_name(version: str) -> str:
    return "opensearch" if version == DEFAULT_VERSION else f"opensearch-{version}"


def _live_record(state_dir: Path) -> ServiceRecord | None:
    record = read_record(state_dir / _STATE_FILE)
    if record is not None and pid_runs(record.pid, record.program):
        return record
    return None


def running_url(state_dir: Path | None = None) -> str | None:
    """URL of the embedded node recorded in ``state_dir`` if its process is alive and was healthy, else None."""
    record = _live_record(state_dir or default_state_dir())
    return record.url if record and record.extra.get("ready", True) else None


def cluster_health(
    url: str,
    timeout: float = 5.0,
    wait_for: str | None = None,
    nodes: int | None = None,
    context: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """``GET /_cluster/health`` with the standard library (no client needed during start-up); ``wait_for`` a status
    and/or ``nodes`` (that many nodes joined), for at most ``timeout`` seconds (the body says ``timed_out``);
    ``context``: the TLS context of a secured node (its CA, and the admin certificate that logs in)."""
    waits = ([f"wait_for_status={wait_for}"] if wait_for else []) + ([f"wait_for_nodes={nodes}"] if nodes else [])
    query = f"?{'&'.join(waits)}&timeout={max(1, int(timeout) - 1)}s" if waits else ""
    try:
        health_url = f"{url}/_cluster/health{query}"
        with urllib.request.urlopen(health_url, timeout=timeout, context=context) as resp:  # noqa: S310
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:  # 408 when wait_for_status times out: body still has the status
        try:
            return json.loads(exc.read().decode("utf-8"))
        except ValueError:
            raise OpenSearchUnavailable(f"{url}/_cluster/health answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OpenSearchUnavailable(f"no OpenSearch answering at {url} ({exc})") from exc


def _put_json(
    url: str, path: str, body: dict[str, Any], timeout: float = 10.0, context: ssl.SSLContext | None = None
) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}{path}",
        data=json.dumps(body).encode("utf-8"),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:  # noqa: S310
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise OpenSearchUnavailable(f"PUT {url}{path} failed: {exc}") from exc


@dataclass(frozen=True)
class ClusterPeers:
    """What one member of a local cluster needs to find the others: the cluster's name, every member's transport
    address (``discovery.seed_hosts``) and the names of the nodes that elect the first cluster manager
    (``cluster.initial_cluster_manager_nodes``; read only when the cluster forms for the first time)."""

    name: str
    seed_hosts: tuple[str, ...]
    initial_managers: tuple[str, ...]


def _default_run_as() -> str:
    env = os.environ.get("SEMDUP_OPENSEARCH_USER")
    if env:
        return env
    try:
        pwd.getpwnam("semdup")
        return "semdup"
    except KeyError:
        return "nobody"


def _check_reachable(path: Path, run_as: RunAs) -> None:
    """Fail early, with the fix, when ``run_as`` cannot enter one of ``path``'s parent folders."""
    for parent in [path, *path.parents]:
        st = parent.stat()
        if st.st_uid == run_as.uid:
            bits = 0o100
        elif st.st_gid == run_as.gid:
            bits = 0o010
        else:
            bits = 0o001
        if not st.st_mode & bits:
            raise ConfigError(
                f"OpenSearch runs as user {run_as.user!r} (it refuses root) but that user cannot enter {parent}; "
                f"expected every folder above {path} to be searchable. Use folders outside it "
                f"(SEMDUP_CACHE, --data) or run semdup as a normal user"
            )


def _hand_over(path: Path, run_as: RunAs) -> None:
    """Give a folder tree to the account the node runs as (only touches what is not already theirs)."""
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)]:
            if os.lstat(name).st_uid != run_as.uid:
                os.lchown(name, run_as.uid, run_as.gid)


class LocalOpenSearch:
    """One embedded OpenSearch node: install, start, stop, status.

    Args:
        version: OpenSearch version on Maven Central (default ``$SEMDUP_OPENSEARCH_VERSION`` or 2.19.1).
        cache_dir: where distributions are unpacked (default ``$SEMDUP_CACHE`` or ``~/.cache/semdup``).
        state_dir: config, data, logs and the state record of this node (default: :func:`default_state_dir`,
            ``<cache>/state/opensearch`` for 2.19.1, ``<cache>/state/opensearch-<version>`` for others).
        port: HTTP port; None tries 9200, then any free port.
        heap: JVM heap, e.g. ``"1g"`` or ``"512m"`` (default ``$SEMDUP_OPENSEARCH_HEAP`` or 1g).
        run_as: account to run as when we are root (default: see module docstring).
        maven_repo: local Maven repository (default ``$SEMDUP_MAVEN_REPO`` or ``~/.m2/repository``).
        node_name: the node's name (default ``semdup-local-1``).
        transport_port: the node's transport port (default: the first free one of 9300-9399).
        peers: the other members of a local cluster; None (the default) is a single node (``discovery.type:
            single-node``, new indices without replicas).

    A subclass changes the node through two hooks (the secured node, :mod:`semdup.devstack.secured_opensearch`):
    :meth:`node_settings`, merged over ``opensearch.yml``, and :attr:`http_context`, which makes the URL ``https``
    and is the TLS context of every request made here.
    """

    http_context: ssl.SSLContext | None = None

    def __init__(
        self,
        version: str | None = None,
        cache_dir: Path | str | None = None,
        state_dir: Path | str | None = None,
        port: int | None = None,
        heap: str | None = None,
        run_as: str | None = None,
        maven_repo: Path | str | None = None,
        node_name: str | None = None,
        transport_port: int | None = None,
        peers: ClusterPeers | None = None,
    ) -> None:
        self.version = version or default_version()
        java_range(self.version)  # a malformed or unsupported version fails here (it also names the state folder)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else semdup_home()
        default_state = self.cache_dir / "state" / _state_name(self.version)
        self.state_dir = (Path(state_dir).expanduser() if state_dir else default_state).absolute()
        self.port = port
        self.heap = heap or os.environ.get("SEMDUP_OPENSEARCH_HEAP", "1g")
        if not _HEAP.match(self.heap):
            raise ConfigError(f"heap must look like 512m or 1g, got {self.heap!r}")
        self.run_as_name = run_as
        self.maven_repo = Path(maven_repo).expanduser() if maven_repo else None
        self.node_name = node_name or "semdup-local-1"
        self.transport_port = transport_port
        self.peers = peers

    def __repr__(self) -> str:
        return f"LocalOpenSearch(version={self.version!r}, state_dir='{self.state_dir}', url={self.url!r})"

    @property
    def state_file(self) -> Path:
        return self.state_dir / _STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.peers.name if self.peers else _CLUSTER}.log"

    @property
    def url(self) -> str | None:
        """The node's URL while it runs, else None."""
        return running_url(self.state_dir)

    def ensure_installed(self) -> Installation:
        """Fetch and assemble the distribution once (see :mod:`semdup.devstack.opensearch_distribution`)."""
        return ensure_installed(self.version, self.cache_dir, self.maven_repo)

    def start(self, timeout: float = 180.0) -> str:
        """Start the node (or find it running) and return its URL once health is yellow or green.

        Raises:
            OpenSearchUnavailable: the node exited or did not answer in ``timeout`` seconds; the
                message names the log file and quotes its last lines.
            ConfigError: no Java, no Maven, a busy ``port``, or folders the node's account cannot use.
        """
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with file_lock(self.state_dir / ".lock"):
            record = _live_record(self.state_dir)
            if record is not None:
                running = record.extra.get("version")
                if running and running != self.version:
                    raise ConfigError(
                        f"OpenSearch {running} already runs from {self.state_dir} ({record.url}); stop it or give "
                        f"OpenSearch {self.version} another state folder (--data)"
                    )
                if not record.extra.get("ready", True):  # whoever started it gave up waiting: wait here
                    self._wait_healthy(
                        lambda: None if pid_runs(record.pid, record.program) else -1, record.url, timeout
                    )
                    write_record(self.state_file, replace(record, extra={**record.extra, "ready": True}))
                logger.info("OpenSearch already running at %s (pid %d)", record.url, record.pid)
                return record.url
            port = choose_port(self.port, 9200)  # cheap checks first: a busy port fails before any download
            run_as = RunAs.lookup(self.run_as_name or _default_run_as()) if os.geteuid() == 0 else None
            inst = self.ensure_installed()
            url = f"{'https' if self.http_context else 'http'}://127.0.0.1:{port}"
            env = self._prepare(inst, port, run_as)
            began = time.monotonic()
            proc = spawn_detached(
                [str(inst.home / "bin" / "opensearch")],
                cwd=self.state_dir,
                env=env,
                log_path=self.state_dir / "console.log",
                run_as=run_as,
            )
            # Both the start-up shell script and the java it execs carry the install folder on their
            # command line (script path, -Dopensearch.path.home), so the pid is recognised from the start.
            marker = str(inst.home)
            extra = {"version": inst.version, "heap": self.heap, "knn": inst.knn_installed, "home": str(inst.home)}
            extra["run_as"] = run_as.user if run_as else None
            record = ServiceRecord(
                proc.pid, url, port, marker, time.time(), str(self.log_file), extra | {"ready": False}
            )
            write_record(self.state_file, record)
            (self.state_dir / "opensearch.pid").write_text(f"{proc.pid}\n", encoding="ascii")  # for ops scripts
            logger.info("started OpenSearch %s pid %d on %s; waiting for health", inst.version, proc.pid, url)
            try:
                self._wait_healthy(proc.poll, url, timeout)
                if self.peers is None:  # a cluster's members keep its default of one replica
                    _put_json(
                        url, "/_cluster/settings", {"persistent": _SINGLE_NODE_SETTINGS}, context=self.http_context
                    )
            except OpenSearchUnavailable:
                terminate(proc.pid, marker, timeout=10)
                remove_record(self.state_file)
                raise
            write_record(self.state_file, replace(record, extra=extra | {"ready": True}))
            proc.returncode = 0  # detached on purpose: tell Popen not to warn that it still runs
            logger.info("OpenSearch healthy at %s after %.1fs", url, time.monotonic() - began)
            return url

    def _prepare(self, inst: Installation, port: int, run_as: RunAs | None) -> dict[str, str]:
        """Write this node's config folder and return the environment ``bin/opensearch`` needs."""
        conf, data, logs, tmp = (self.state_dir / name for name in ("config", "data", "logs", "tmp"))
        for folder in (data, logs, tmp):
            folder.mkdir(parents=True, exist_ok=True)
        if not (conf / "log4j2.properties").exists():
            shutil.copytree(inst.home / "config", conf, dirs_exist_ok=True)
        jvm = (inst.home / "config" / "jvm.options").read_text(encoding="utf-8")
        # The stock options hold paths relative to the install folder; point them at our state folder.
        jvm = jvm.replace("=logs/", f"={logs}/")
        jvm = jvm.replace("HeapDumpPath=data", f"HeapDumpPath={data}")
        jvm = jvm.replace("-javaagent:agent/", f"-javaagent:{inst.home}/agent/")  # 3.x: its security agent
        (conf / "jvm.options").write_text(jvm, encoding="utf-8")
        settings: dict[str, Any] = {
            "cluster.name": self.peers.name if self.peers else _CLUSTER,
            "node.name": self.node_name,
            "network.host": "127.0.0.1",
            "http.port": port,
            "transport.port": self.transport_port or "9300-9399",
            "path.data": str(data),
            "path.logs": str(logs),
            "cluster.routing.allocation.disk.threshold_enabled": False,
        }
        if self.peers is None:
            settings["discovery.type"] = "single-node"
        else:
            settings["discovery.seed_hosts"] = list(self.peers.seed_hosts)
            settings["cluster.initial_cluster_manager_nodes"] = list(self.peers.initial_managers)
        settings.update(self.node_settings())
        text = "# Written by semdup on every start; edits here are overwritten.\n"
        text += "".join(f"{key}: {json.dumps(value)}\n" for key, value in settings.items())
        (conf / "opensearch.yml").write_text(text, encoding="utf-8")
        if run_as is not None:
            if self.state_dir.stat().st_uid == os.geteuid():
                self.state_dir.chmod(self.state_dir.stat().st_mode | 0o011)  # let the node enter, not list
            _check_reachable(self.state_dir, run_as)
            _check_reachable(inst.home, run_as)
            for folder in (conf, data, logs, tmp):
                _hand_over(folder, run_as)
        java = str(java_home(inst.version))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENSEARCH_", "JAVA_TOOL_OPTIONS"))}
        env.update(
            OPENSEARCH_JAVA_HOME=java,
            JAVA_HOME=java,
            OPENSEARCH_PATH_CONF=str(conf),
            OPENSEARCH_TMPDIR=str(tmp),
            OPENSEARCH_JAVA_OPTS=f"-Xms{self.heap} -Xmx{self.heap}",
        )
        if run_as is not None:
            env.update(HOME=str(self.state_dir), USER=run_as.user, LOGNAME=run_as.user)
        return env

    def node_settings(self) -> dict[str, Any]:
        """Settings a subclass adds to (or changes in) ``opensearch.yml``; none here."""
        return {}

    def _wait_healthy(self, poll: Callable[[], int | None], url: str, timeout: float) -> None:
        """Wait for health yellow/green; ``poll`` returns the exit code once the process has died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = poll()
            if code is not None:
                raise OpenSearchUnavailable(
                    f"OpenSearch exited with code {code} while starting; see {self.log_file} and "
                    f"{self.state_dir / 'console.log'}. Last lines:\n{self._last_lines()}"
                )
            try:
                health = cluster_health(url, timeout=3.0, wait_for="yellow", context=self.http_context)
                if health.get("status") in ("yellow", "green"):
                    return
            except OpenSearchUnavailable:
                pass
            time.sleep(1.0)
        raise OpenSearchUnavailable(
            f"OpenSearch at {url} was not yellow or green within {timeout:.0f}s; see {self.log_file}. "
            f"Last lines:\n{self._last_lines()}"
        )

    def _last_lines(self) -> str:
        return tail(self.log_file, 15) or tail(self.state_dir / "console.log", 15)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the node: SIGTERM, wait ``timeout`` seconds, then SIGKILL. False when none was running."""
        with file_lock(self.state_dir / ".lock"):
            record = read_record(self.state_file)
            if record is None or not pid_runs(record.pid, record.program):
                remove_record(self.state_file)
                return False
            killed = terminate(record.pid, record.program, timeout)
            remove_record(self.state_file)
            remove_record(self.state_dir / "opensearch.pid")
            logger.info("stopped OpenSearch pid %d%s", record.pid, " (SIGKILL)" if killed else "")
            return True

    def kill(self, timeout: float = 30.0) -> int | None:
        """SIGKILL the node, as a crash or an out-of-memory kill would: no shutdown, its data folder as the kill
        left it (a later :meth:`start` opens it again, on the same ports). Returns the pid killed, None when none
        was running.

        Raises:
            OpenSearchUnavailable: the process still ran ``timeout`` seconds after the signal.
        """
        with file_lock(self.state_dir / ".lock"):
            record = read_record(self.state_file)
            if record is None or not pid_runs(record.pid, record.program):
                remove_record(self.state_file)
                return None
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while pid_runs(record.pid, record.program):
                if time.monotonic() > deadline:
                    raise OpenSearchUnavailable(f"OpenSearch pid {record.pid} still runs {timeout:.0f}s after SIGKILL")
                time.sleep(0.05)
            remove_record(self.state_file)
            remove_record(self.state_dir / "opensearch.pid")
            logger.info("killed OpenSearch %s pid %d (SIGKILL)", self.node_name, record.pid)
            return record.pid

    def status(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """What runs: URL, pid, health, version, plugins; None when no node is running."""
        record = _live_record(self.state_dir)
        if record is None:
            return None
        info: dict[str, Any] = {
            "url": record.url,
            "pid": record.pid,
            "version": record.extra.get("version"),
            "heap": record.extra.get("heap"),
            "run_as": record.extra.get("run_as"),
            "state_dir": str(self.state_dir),
            "log": record.log,
            "uptime_s": round(time.time() - record.started_at, 1),
        }
        try:
            info["health"] = cluster_health(record.url, timeout=timeout, context=self.http_context).get(
                "status", "unknown"
            )
            plugins_url = f"{record.url}/_cat/plugins?format=json"
            with urllib.request.urlopen(plugins_url, timeout=timeout, context=self.http_context) as resp:  # noqa: S310
                plugins = [row["component"] for row in json.loads(resp.read().decode("utf-8"))]
        except (OpenSearchUnavailable, urllib.error.URLError, OSError, ValueError, KeyError) as exc:
            info["health"] = f"unreachable ({exc})"
            plugins = []
        info["plugins"] = plugins
        info["knn"] = "opensearch-knn" in plugins
        info["knn_engines"] = ["lucene"] if info["knn"] else []
        return info


@contextlib.contextmanager
def own_opensearch(url: str | None = None, name: str = "run") -> Iterator[str]:
    """``url`` when given, else a node of this run's own (state under a ``semdup-<name>-`` temporary folder, a
    free port), stopped and removed afterwards: never the default node other work may be using. What the
    benchmarks and ``alerts_eval --own-node`` measure on."""
    if url:
        yield url
        return
    from semdup.devstack.local_process import any_free_port

    state = Path(tempfile.mkdtemp(prefix=f"semdup-{name}-"))
    node = LocalOpenSearch(state_dir=state, port=any_free_port())
    try:
        yield node.start(timeout=300)
    finally:
        node.stop()
        shutil.rmtree(state, ignore_errors=True)
