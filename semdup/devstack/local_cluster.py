"""A local OpenSearch cluster of several nodes on 127.0.0.1: what a site runs in production, on one machine.

Each node is a :class:`~semdup.devstack.local_opensearch.LocalOpenSearch` with its own state folder (config, data,
logs), its own HTTP and transport ports, a small heap; they find each other by ``discovery.seed_hosts`` (every
member's transport address) and elect the first cluster manager among ``cluster.initial_cluster_manager_nodes``
(all of them). Every node holds data and may be elected. Unlike the single node, the cluster keeps OpenSearch's
default of one replica per index::

    cluster = LocalCluster(nodes=3, heap="512m")    # <home>/state/opensearch-cluster, ports 9200+/9300+ if free
    url = cluster.start()                           # all nodes at once; waits for 3 nodes and yellow or green
    cluster.kill(2)                                 # SIGKILL the third node, as a crash would
    cluster.start_node(2)                           # the same data folder and ports; waits until it has joined
    cluster.stop()

The plan (cluster name, each node's name and ports) is written to ``<state>/cluster.json`` on the first start and
read on every later one, so a node killed and started again comes back on its own data and ports, and the
others' seed hosts still point at it. ``semdup opensearch start|stop|status|kill --nodes N`` runs the same code.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.devstack.local_opensearch import ClusterPeers, LocalOpenSearch, _state_name, cluster_health
from semdup.devstack.local_process import choose_port, file_lock, semdup_home
from semdup.devstack.opensearch_distribution import default_version

__all__ = ["LocalCluster", "NodePlan", "default_cluster_dir", "DEFAULT_CLUSTER_HEAP"]

logger = logging.getLogger(__name__)

_PLAN = "cluster.json"
DEFAULT_CLUSTER_HEAP = "512m"  # three nodes on a 2-core machine other work shares
_HTTP_FROM, _TRANSPORT_FROM = 9200, 9300


@dataclass(frozen=True)
class NodePlan:
    """One member: its name and ports, fixed on the cluster's first start."""

    name: str
    http_port: int
    transport_port: int


def default_cluster_dir(version: str | None = None, home: Path | None = None) -> Path:
    """``<home>/state/opensearch-cluster`` (``opensearch-<version>-cluster`` for another version than 2.19.1)."""
    return (home or semdup_home()) / "state" / f"{_state_name(version or default_version())}-cluster"


class LocalCluster:
    """``nodes`` embedded OpenSearch nodes forming one cluster: start, stop, SIGKILL and restart a member.

    Args:
        nodes: how many members (2 or more; a single node is :class:`LocalOpenSearch`). Ignored once the plan
            exists: the cluster keeps the members it was made with.
        version, cache_dir, run_as, maven_repo: as for :class:`LocalOpenSearch` (``cache_dir`` names the
            installation too: ``ml_cache_dir()`` gives every member ml-commons).
        state_dir: the cluster's folder: ``cluster.json`` and one folder per node (default:
            :func:`default_cluster_dir` under ``cache_dir``).
        heap: each node's JVM heap (default :data:`DEFAULT_CLUSTER_HEAP`).
        ports: the first node's HTTP port; the others take the next ones (None: 9200+ where free, else any free
            port; transport ports likewise from 9300; 0: any free ports, HTTP and transport).
    """

    def __init__(
        self,
        nodes: int = 3,
        version: str | None = None,
        cache_dir: Path | str | None = None,
        state_dir: Path | str | None = None,
        heap: str | None = None,
        run_as: str | None = None,
        maven_repo: Path | str | None = None,
        ports: int | None = None,
    ) -> None:
        if nodes < 2:
            raise ConfigError(
                f"a local cluster has 2 or more nodes, got {nodes}; one node is `semdup opensearch start`"
            )
        self.version = version or default_version()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        home = self.cache_dir or semdup_home()
        self.state_dir = (Path(state_dir).expanduser() if state_dir else default_cluster_dir(self.version, home))
        self.state_dir = self.state_dir.absolute()
        self.heap = heap or DEFAULT_CLUSTER_HEAP
        self.run_as, self.maven_repo, self.first_port = run_as, maven_repo, ports
        self.size = nodes
        plan = self._read_plan()
        if plan is not None:
            self.size = len(plan)

    def __repr__(self) -> str:
        return f"LocalCluster(nodes={self.size}, state_dir='{self.state_dir}')"

    @property
    def plan_file(self) -> Path:
        return self.state_dir / _PLAN

    @property
    def name(self) -> str:
        return f"semdup-local-{self.size}"

    def _read_plan(self) -> list[NodePlan] | None:
        try:
            data = json.loads(self.plan_file.read_text(encoding="utf-8"))
            return [NodePlan(**n) for n in data["nodes"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{self.plan_file} is unreadable ({exc}); delete {self.state_dir} to start afresh"
            ) from exc

    def _make_plan(self) -> list[NodePlan]:
        """Free HTTP and transport ports for every node, written to ``cluster.json`` before any node starts."""
        taken: set[int] = set()

        def pick(requested: int | None, preferred: int) -> int:
            for _ in range(50):
                port = choose_port(requested, preferred)  # preferred 0: any free port
                if port not in taken:
                    taken.add(port)
                    return port
                requested, preferred = None, preferred + 1 if preferred else 0
            raise ConfigError("no free port for the local cluster")

        anywhere = self.first_port == 0  # tests: never the ports a developer's own cluster would take
        plan = []
        for i in range(self.size):
            http = pick(self.first_port + i if self.first_port else None, 0 if anywhere else _HTTP_FROM + i)
            transport = pick(None, 0 if anywhere else _TRANSPORT_FROM + i)
            plan.append(NodePlan(f"semdup-node-{i + 1}", http, transport))
        self.state_dir.mkdir(parents=True, exist_ok=True)
        body = {"version": self.version, "heap": self.heap, "nodes": [asdict(n) for n in plan]}
        self.plan_file.write_text(json.dumps(body, indent=2), encoding="utf-8")
        return plan

    def plan(self) -> list[NodePlan]:
        """The members, made (ports chosen, ``cluster.json`` written) on the first call."""
        with file_lock(self.state_dir / ".lock"):
            return self._read_plan() or self._make_plan()

    def node(self, i: int) -> LocalOpenSearch:
        """Member ``i`` (0-based) as a :class:`LocalOpenSearch` on its own folder and ports."""
        plan = self.plan()
        if not 0 <= i < len(plan):
            raise ConfigError(f"the cluster has nodes 0-{len(plan) - 1}, not {i}")
        peers = ClusterPeers(
            self.name, tuple(f"127.0.0.1:{n.transport_port}" for n in plan), tuple(n.name for n in plan)
        )
        me = plan[i]
        return LocalOpenSearch(
            version=self.version,
            cache_dir=self.cache_dir,
            state_dir=self.state_dir / me.name,
            port=me.http_port,
            heap=self.heap,
            run_as=self.run_as,
            maven_repo=self.maven_repo,
            node_name=me.name,
            transport_port=me.transport_port,
            peers=peers,
        )

    @property
    def nodes(self) -> list[LocalOpenSearch]:
        return [self.node(i) for i in range(self.size)]

    @property
    def urls(self) -> list[str]:
        """Every member's HTTP URL (running or not)."""
        return [f"http://127.0.0.1:{n.http_port}" for n in self.plan()]

    @property
    def url(self) -> str | None:
        """The first running member's URL, None when none runs."""
        return next((node.url for node in self.nodes if node.url), None)

    def start(self, timeout: float = 300.0) -> str:
        """Start every member that is not running (all at once: none is healthy before enough have joined), then
        wait until all have joined and health is yellow or green. Returns the first member's URL.

        Raises:
            OpenSearchUnavailable: a member exited or the cluster did not form within ``timeout`` seconds (the
                message names the member and quotes its log).
        """
        nodes = self.nodes
        if self.state_dir.stat().st_uid == os.geteuid():  # a member may run as another account (we are root)
            self.state_dir.chmod(self.state_dir.stat().st_mode | 0o011)  # let it enter, not list
        nodes[0].ensure_installed()  # once, before the members race to assemble it
        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
            futures = [pool.submit(node.start, timeout) for node in nodes]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise failed[0]
        left = max(5.0, timeout - (time.monotonic() - began))
        self.wait_for(nodes=self.size, timeout=left)
        took = time.monotonic() - began
        logger.info("local cluster of %d nodes healthy at %s after %.1fs", self.size, self.urls, took)
        return self.urls[0]

    def start_node(self, i: int, timeout: float = 300.0) -> str:
        """Start member ``i`` again (after :meth:`kill` or :meth:`stop_node`) on its data folder and ports; returns
        once it has joined (every member is in the cluster)."""
        url = self.node(i).start(timeout)
        self.wait_for(nodes=self.size, timeout=timeout)
        return url

    def kill(self, i: int) -> int | None:
        """SIGKILL member ``i`` (see :meth:`LocalOpenSearch.kill`); the pid killed, None when it was not running."""
        if self._read_plan() is None:
            return None
        return self.node(i).kill()

    def stop_node(self, i: int, timeout: float = 60.0) -> bool:
        """Stop member ``i`` gracefully (SIGTERM, then SIGKILL after ``timeout``)."""
        return self.node(i).stop(timeout)

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop every member (all at once); False when none was running."""
        if self._read_plan() is None:  # never started: nothing to stop (and no plan to make)
            return False
        with ThreadPoolExecutor(max_workers=self.size) as pool:
            stopped = list(pool.map(lambda node: node.stop(timeout), self.nodes))
        return any(stopped)

    def health(self, timeout: float = 5.0, **waits: Any) -> dict[str, Any]:
        """``GET _cluster/health`` from the first running member (``wait_for``, ``nodes``: see
        :func:`~semdup.devstack.local_opensearch.cluster_health`)."""
        url = self.url
        if url is None:
            raise OpenSearchUnavailable(f"no member of the local cluster in {self.state_dir} is running")
        return cluster_health(url, timeout=timeout, **waits)

    def wait_for(self, status: str = "yellow", nodes: int | None = None, timeout: float = 120.0) -> dict[str, Any]:
        """Wait until health is ``status`` or better with ``nodes`` members joined; the health body.

        Raises:
            OpenSearchUnavailable: not reached within ``timeout`` seconds (the message holds the last health).
        """
        deadline = time.monotonic() + timeout
        health: dict[str, Any] = {}
        while True:
            left = deadline - time.monotonic()
            try:
                health = self.health(timeout=max(2.0, min(30.0, left)), wait_for=status, nodes=nodes)
                if not health.get("timed_out", True) and health.get("status") in _AT_LEAST[status]:
                    return health
            except OpenSearchUnavailable as exc:
                health = {"error": str(exc)}
            if time.monotonic() >= deadline:
                raise OpenSearchUnavailable(
                    f"the local cluster in {self.state_dir} was not {status} with {nodes or 'any'} nodes within "
                    f"{timeout:.0f}s; last health: {json.dumps(health)[:500]}"
                )
            time.sleep(0.5)

    def status(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """Each member's status (see :meth:`LocalOpenSearch.status`; None for one not running) and the cluster's
        health; None when no member runs."""
        if self._read_plan() is None:
            return None
        members = [node.status(timeout) for node in self.nodes]
        if not any(members):
            return None
        try:
            health = self.health(timeout)
        except OpenSearchUnavailable as exc:
            health = {"status": f"unreachable ({exc})"}
        plan = self.plan()
        return {
            "state_dir": str(self.state_dir),
            "health": health.get("status"),
            "nodes_joined": health.get("number_of_nodes"),
            "nodes": [
                {"name": p.name, "http_port": p.http_port, "transport_port": p.transport_port, **(m or {})}
                | ({} if m else {"health": "not running"})
                for p, m in zip(plan, members, strict=True)
            ],
        }


_AT_LEAST = {"yellow": ("yellow", "green"), "green": ("green",), "red": ("red", "yellow", "green")}
