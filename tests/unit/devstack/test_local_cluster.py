"""The local cluster's plan and each member's configuration, with no JVM started: the ports are chosen once and
kept (a member killed and started again must come back on its own), and every member finds the others.

The real cluster (three JVMs, a node SIGKILLed and started again) runs in tests/integration/test_multi_node.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from semdup.core.errors import ConfigError
from semdup.devstack.local_cluster import LocalCluster, default_cluster_dir
from semdup.devstack.local_opensearch import LocalOpenSearch
from semdup.devstack.opensearch_distribution import DEFAULT_VERSION, Installation


def test_the_plan_gives_each_member_its_own_ports_and_is_kept(tmp_path: Path) -> None:
    cluster = LocalCluster(3, state_dir=tmp_path / "c")
    plan = cluster.plan()
    ports = [n.http_port for n in plan] + [n.transport_port for n in plan]
    assert len(set(ports)) == 6 and [n.name for n in plan] == ["semdup-node-1", "semdup-node-2", "semdup-node-3"]
    assert json.loads((tmp_path / "c" / "cluster.json").read_text())["nodes"][2]["http_port"] == plan[2].http_port
    again = LocalCluster(5, state_dir=tmp_path / "c")  # the plan wins over a later --nodes
    assert again.size == 3 and again.plan() == plan
    assert cluster.urls == [f"http://127.0.0.1:{n.http_port}" for n in plan]


def test_a_member_knows_every_peer_and_its_own_folder(tmp_path: Path) -> None:
    cluster = LocalCluster(3, state_dir=tmp_path / "c", heap="640m")
    plan = cluster.plan()
    node = cluster.node(1)
    assert node.state_dir == tmp_path / "c" / "semdup-node-2" and node.port == plan[1].http_port
    assert node.heap == "640m" and node.transport_port == plan[1].transport_port
    assert node.peers is not None
    assert node.peers.seed_hosts == tuple(f"127.0.0.1:{n.transport_port}" for n in plan)
    assert node.peers.initial_managers == tuple(n.name for n in plan)
    with pytest.raises(ConfigError, match="nodes 0-2, not 3"):
        cluster.node(3)


def test_nothing_is_made_by_asking_about_a_cluster_never_started(tmp_path: Path) -> None:
    cluster = LocalCluster(3, state_dir=tmp_path / "c")
    assert cluster.status() is None and cluster.stop() is False and cluster.kill(0) is None
    assert not (tmp_path / "c").exists()


def test_one_node_is_not_a_cluster() -> None:
    with pytest.raises(ConfigError, match="2 or more nodes"):
        LocalCluster(1)


def test_default_folders(tmp_path: Path) -> None:
    assert default_cluster_dir(DEFAULT_VERSION, tmp_path) == tmp_path / "state" / "opensearch-cluster"
    assert default_cluster_dir("3.6.0", tmp_path) == tmp_path / "state" / "opensearch-3.6.0-cluster"


def _fake_install(root: Path) -> Installation:
    home = root / "opensearch-2.19.1"
    (home / "config").mkdir(parents=True)
    (home / "config" / "jvm.options").write_text("-Xms1g\n-Xmx1g\n", encoding="utf-8")
    (home / "config" / "log4j2.properties").write_text("", encoding="utf-8")
    return Installation(DEFAULT_VERSION, home, (), False)


def _yml(node: LocalOpenSearch, inst: Installation) -> dict[str, object]:
    node._prepare(inst, node.port or 9200, None)
    lines = (node.state_dir / "config" / "opensearch.yml").read_text().splitlines()[1:]
    return {k: json.loads(v) for k, v in (line.split(": ", 1) for line in lines)}


def test_a_member_is_configured_for_discovery_and_the_single_node_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import semdup.devstack.local_opensearch as local

    monkeypatch.setattr(local, "java_home", lambda version: tmp_path / "jdk")
    inst = _fake_install(tmp_path / "dist")
    cluster = LocalCluster(3, state_dir=tmp_path / "c")
    plan = cluster.plan()
    member = _yml(cluster.node(2), inst)
    assert member["discovery.seed_hosts"] == [f"127.0.0.1:{n.transport_port}" for n in plan]
    assert member["cluster.initial_cluster_manager_nodes"] == [n.name for n in plan]
    assert (member["node.name"], member["transport.port"]) == ("semdup-node-3", plan[2].transport_port)
    assert member["cluster.name"] == "semdup-local-3" and "discovery.type" not in member
    single = _yml(LocalOpenSearch(state_dir=tmp_path / "one", port=9299), inst)
    assert single["discovery.type"] == "single-node" and "discovery.seed_hosts" not in single
    assert single["transport.port"] == "9300-9399"


def test_ports_zero_takes_any_free_ports_never_the_usual_ones(tmp_path: Path) -> None:
    plan = LocalCluster(3, state_dir=tmp_path / "c", ports=0).plan()
    ports = [n.http_port for n in plan] + [n.transport_port for n in plan]
    assert len(set(ports)) == 6 and not set(ports) & {9200, 9201, 9202, 9300, 9301, 9302}
