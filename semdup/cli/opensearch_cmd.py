"""``semdup opensearch start|stop|status|kill``: the embedded local OpenSearch node, or (``--nodes N``) a local
cluster of N nodes (:class:`semdup.devstack.local_cluster.LocalCluster`)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click

from semdup.devstack.local_cluster import LocalCluster
from semdup.devstack.local_opensearch import LocalOpenSearch
from semdup.devstack.opensearch_distribution import DEFAULT_VERSION

__all__ = ["opensearch"]

logger = logging.getLogger(__name__)

_data_option = click.option(
    "--data",
    "state_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State folder (config, data, logs, pid). Default: $SEMDUP_CACHE/state/opensearch "
    "(~/.cache/semdup/state/opensearch; /var/lib/semdup/state/opensearch for root); "
    "state/opensearch-VERSION for a --version other than 2.19.1.",
)
_version_option = click.option(
    "--version",
    "version",
    default=None,
    help="OpenSearch version (2.x or 3.x on Maven Central, e.g. 3.6.0); each has its own state folder. "
    "Default: $SEMDUP_OPENSEARCH_VERSION or 2.19.1.",
)


_ml_option = click.option(
    "--ml",
    is_flag=True,
    help="The node with ml-commons and neural-search (2.19.1; for `semdup pipeline`): a copy of its own with its "
    "own state folder ($SEMDUP_CACHE/neural-peer/state/opensearch), plugins from Maven Central on first start.",
)


_nodes_option = click.option(
    "--nodes",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="1: the single node. 2 or more: a local cluster of that many nodes, each on its own ports and data "
    "folder, in its own state folder ($SEMDUP_CACHE/state/opensearch-cluster, or --data).",
)


_secured_option = click.option(
    "--secured",
    is_flag=True,
    help="The node with the security plugin (2.19.1, ml-commons too): TLS on HTTP and transport with a CA it makes, "
    "the admin certificate the only login until you make users; its own state folder "
    "($SEMDUP_CACHE/secured/state/opensearch). docs/operations.md, 'Security plugin: users, roles and TLS'.",
)


def _node(
    version: str | None,
    state_dir: Path | None,
    ml: bool,
    nodes: int = 1,
    secured: bool = False,
    **options: object,
) -> LocalOpenSearch | LocalCluster:
    """The embedded node or cluster, or (``--ml``) the one with ml-commons, or (``--secured``) the one with the
    security plugin, installed on first use."""
    if secured:
        from semdup.devstack.secured_opensearch import SecuredOpenSearch

        if version not in (None, DEFAULT_VERSION):
            raise click.UsageError(f"--secured runs OpenSearch {DEFAULT_VERSION} (its plugins'), not {version}")
        if nodes > 1:
            raise click.UsageError("--secured runs one node; --nodes is for the plain local cluster")
        return SecuredOpenSearch(state_dir=state_dir, **options)  # type: ignore[arg-type]
    cache_dir = None
    if ml:
        from semdup.devstack.ml_plugins import ensure_ml_installed, ml_cache_dir

        if version not in (None, DEFAULT_VERSION):
            raise click.UsageError(f"--ml runs OpenSearch {DEFAULT_VERSION} (its plugins' version), not {version}")
        ensure_ml_installed()
        cache_dir = ml_cache_dir()
    if nodes > 1:
        port = options.pop("port", None)
        return LocalCluster(nodes, version, cache_dir, state_dir, ports=port, **options)  # type: ignore[arg-type]
    return LocalOpenSearch(
        version=version, cache_dir=cache_dir, state_dir=state_dir, **options  # type: ignore[arg-type]
    )


@click.group()
def opensearch() -> None:
    """Start, stop or check the embedded local OpenSearch (from Maven Central, no Docker).

    \b
    Example:
      export SEMDUP_OPENSEARCH_URL=$(semdup opensearch start)
      semdup opensearch status
      semdup opensearch stop
      semdup opensearch start --ml      # with ml-commons, for semdup pipeline
      semdup opensearch start --nodes 3 # a local cluster of three nodes (512m heap each)
      semdup opensearch kill --nodes 3 --node 2   # SIGKILL its third node; `start --nodes 3` brings it back
      semdup opensearch start --secured # with the security plugin: https, users, roles
    """


@opensearch.command()
@click.option("--port", type=int, default=None, help="HTTP port. Default: 9200 if free, else any free port.")
@_data_option
@click.option(
    "--heap",
    default=None,
    help="JVM heap, e.g. 512m or 1g. Default: $SEMDUP_OPENSEARCH_HEAP or 1g; 512m for each node of --nodes N.",
)
@_version_option
@_ml_option
@_nodes_option
@_secured_option
@click.option("--timeout", type=float, default=180.0, show_default=True, help="Seconds to wait for health.")
def start(
    port: int | None,
    state_dir: Path | None,
    heap: str | None,
    version: str | None,
    ml: bool,
    nodes: int,
    secured: bool,
    timeout: float,
) -> None:
    """Start the node detached (or find it running) and print its URL.

    The first start unpacks OpenSearch and installs the k-NN plugin (about a minute);
    later starts take about 25 s. The URL goes to stdout, everything else to stderr.
    Java is chosen for the version: 11-23 for 2.x, 21 or newer for 3.x (OPENSEARCH_JAVA_HOME,
    JAVA_HOME, java on PATH, then the JDKs under /usr/lib/jvm).

    \b
    Example:
      semdup opensearch start --port 9250 --heap 512m
      semdup opensearch start --version 3.6.0 --port 9236
      semdup opensearch start --nodes 3 --port 9250    # nodes on 9250, 9251, 9252
    """
    node = _node(version, state_dir, ml, nodes, secured, port=port, heap=heap)
    if isinstance(node, LocalCluster):
        url = node.start(timeout=max(timeout, 300.0))  # starts the members not running, e.g. one killed
        health = node.health()
        click.echo(
            f"OpenSearch cluster of {node.size} nodes at {', '.join(node.urls)}, health {health.get('status')}; "
            f"state {node.state_dir}",
            err=True,
        )
        click.echo(url)
        return
    running = node.url
    url = running or node.start(timeout=timeout)
    info = node.status() or {}
    verb = "already running" if running else "started"
    knn = "k-NN plugin: yes (lucene engine only)" if info.get("knn") else "k-NN plugin: no"
    click.echo(f"OpenSearch {verb} at {url}, health {info.get('health')}, {knn}; log {node.log_file}", err=True)
    certs = getattr(node, "certificates", None)
    if certs is not None:
        click.echo(f"CA (SEMDUP_OPENSEARCH_CA_CERTS): {certs.ca}; admin certificate: {certs.admin} "
                   f"(key {certs.admin_key})", err=True)  # fmt: skip
    click.echo(url)


@opensearch.command()
@_data_option
@_version_option
@_ml_option
@_nodes_option
@_secured_option
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait before SIGKILL.")
def stop(
    state_dir: Path | None, version: str | None, ml: bool, nodes: int, secured: bool, timeout: float
) -> None:
    """Stop the node (SIGTERM, then SIGKILL after --timeout).

    \b
    Example:
      semdup opensearch stop
      semdup opensearch stop --version 3.6.0
    """
    node = _node(version, state_dir, ml, nodes, secured)
    if node.stop(timeout=timeout):
        click.echo("stopped")
    else:
        click.echo("not running")


@opensearch.command()
@_data_option
@_version_option
@_ml_option
@_nodes_option
@_secured_option
@click.option("--json", "as_json", is_flag=True, help="Print the full status as JSON.")
def status(
    state_dir: Path | None, version: str | None, ml: bool, nodes: int, secured: bool, as_json: bool
) -> None:
    """Print the node's URL and health, or "not running" (exit 1).

    \b
    Example:
      semdup opensearch status --json
      semdup opensearch status --version 3.6.0
    """
    node = _node(version, state_dir, ml, nodes, secured)
    info = node.status()
    if info is None:
        click.echo(json.dumps(None) if as_json else "not running")
        sys.exit(1)  # click.exceptions.Exit would be swallowed by semdup.cli.main's non-standalone mode
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    if isinstance(node, LocalCluster):
        click.echo(f"cluster health={info['health']} nodes={info['nodes_joined']}/{node.size}")
        for member in info["nodes"]:
            where = f"http://127.0.0.1:{member['http_port']} transport {member['transport_port']}"
            click.echo(f"  {member['name']} {where} pid={member.get('pid', '-')} {member['health']}")
        return
    knn = "k-NN (lucene)" if info["knn"] else "no k-NN"
    click.echo(f"{info['url']} health={info['health']} version={info['version']} pid={info['pid']} {knn}")


@opensearch.command()
@_data_option
@_version_option
@_ml_option
@_nodes_option
@click.option("--node", "member", type=click.IntRange(min=0), required=True, help="Which node, from 0.")
def kill(state_dir: Path | None, version: str | None, ml: bool, nodes: int, member: int) -> None:
    """SIGKILL one node of a local cluster (a crash: no shutdown), to try what the others do without it.
    `semdup opensearch start --nodes N` starts it again on its data folder and ports.

    \b
    Example:
      semdup opensearch kill --nodes 3 --node 2
    """
    node = _node(version, state_dir, ml, nodes)
    if not isinstance(node, LocalCluster):
        raise click.UsageError("kill stops one node of a cluster: give --nodes N (2 or more); use stop for one node")
    pid = node.kill(member)
    click.echo(f"killed pid {pid}" if pid else "not running")
