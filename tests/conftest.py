"""Session fixtures every integration test shares: a real OpenSearch and a real Redis, never mocks.

Where they come from (first match wins):

``opensearch_url``
    1. ``$OPENSEARCH_URL`` / ``$SEMDUP_OPENSEARCH_URL`` (credentials and TLS from the other
       ``SEMDUP_OPENSEARCH_*`` variables, see :mod:`semdup.core.settings`);
    2. a Docker OpenSearch 2.19.1 container (testcontainers) when a Docker engine answers
       (``SEMDUP_TEST_DOCKER=0`` skips this);
    3. the embedded node already running (``semdup opensearch start``), reused as is;
    4. an embedded node from Maven Central started for this session on a free port with its own
       temporary data folder, stopped and deleted at the end.
``redis_url``
    ``$SEMDUP_BROKER_URL`` / ``$REDIS_URL``, else a local ``redis-server`` on a free port in a
    temporary folder, stopped at the end.
``rabbitmq_url``
    ``$SEMDUP_TEST_RABBITMQ_URL``, else a local ``rabbitmq-server`` (Debian's) on free ports with its own
    epmd in a temporary folder, stopped at the end (:mod:`benchmarks.local_rabbitmq`).
``opensearch_cluster``
    three embedded nodes with ml-commons (:class:`semdup.devstack.local_cluster.LocalCluster`, 512 MB heap each,
    free ports, a temporary folder), started once per session by the first test that asks, stopped at the end.
    Always local: its tests SIGKILL and restart a member, which no cluster of the environment's allows.

Tests that request these fixtures are marked ``opensearch`` / ``broker`` automatically, so
``pytest -m "not opensearch and not broker"`` is the fast hermetic tier.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_services import throwaway

from benchmarks.local_rabbitmq import LocalRabbitMQ
from semdup.apps.settings import load_settings
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_cluster import LocalCluster
from semdup.devstack.local_opensearch import LocalOpenSearch, running_url
from semdup.devstack.local_redis import LocalRedis
from semdup.opensearch_io.clients import connect

logger = logging.getLogger(__name__)

_OPENSEARCH_IMAGE = "opensearchproject/opensearch:2.19.1"
_OPENSEARCH_FIXTURES = {
    "embedded_opensearch",
    "opensearch_url",
    "opensearch_settings",
    "opensearch_client",
    "unique_index",
}
_BROKER_FIXTURES = {"redis_url", "rabbitmq_url"}
_CLUSTER_FIXTURES = {"opensearch_cluster"}


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection looks at the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs a cluster or a broker, even if its author forgot the marker."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & _OPENSEARCH_FIXTURES and item.get_closest_marker("opensearch") is None:
            item.add_marker(pytest.mark.opensearch)
        if names & _BROKER_FIXTURES and item.get_closest_marker("broker") is None:
            item.add_marker(pytest.mark.broker)
        if names & _CLUSTER_FIXTURES:
            for mark in ("multinode", "opensearch"):
                if item.get_closest_marker(mark) is None:
                    item.add_marker(getattr(pytest.mark, mark))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran a worker or server subprocess shows the end of its log (``*.log`` in ``tmp_path``):
    on CI that log is the only account of what the worker did."""
    outcome = yield
    report = outcome.get_result()
    tmp = getattr(item, "funcargs", {}).get("tmp_path")
    if report.when != "call" or not report.failed or tmp is None:
        return
    for log in sorted(Path(tmp).rglob("*.log"))[:4]:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        report.sections.append((f"last lines of {log.name}", "\n".join(lines[-60:])))


def _env_opensearch_url() -> str | None:
    return os.environ.get("OPENSEARCH_URL") or os.environ.get("SEMDUP_OPENSEARCH_URL")


def _docker_answers() -> bool:
    if os.environ.get("SEMDUP_TEST_DOCKER", "1").lower() in ("0", "false", "no", "off"):
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # no docker package, no socket, engine down: all mean "no Docker here"
        return False


def _opensearch_container() -> Any:
    try:
        from testcontainers.community.opensearch import OpenSearchContainer
    except ImportError:  # testcontainers < 4.10
        from testcontainers.opensearch import OpenSearchContainer

    container = OpenSearchContainer(_OPENSEARCH_IMAGE, security_enabled=False, initial_admin_password="Semdup-Test-9x")
    container.with_env("OPENSEARCH_JAVA_OPTS", "-Xms1g -Xmx1g")
    return container


@pytest.fixture(scope="session")
def embedded_opensearch() -> Iterator[LocalOpenSearch | None]:
    """The embedded node serving this session, or None when the URL comes from the environment or Docker."""
    if _env_opensearch_url() or _docker_answers():
        yield None
        return
    if running_url():
        logger.info("reusing the embedded OpenSearch at %s", running_url())
        yield LocalOpenSearch()
        return
    with throwaway(LocalOpenSearch, "semdup-test-opensearch-", timeout=300) as node:
        yield node


@pytest.fixture(scope="session")
def opensearch_url(embedded_opensearch: LocalOpenSearch | None) -> Iterator[str]:
    """URL of a real OpenSearch for this test session (see the module docstring for the order)."""
    if embedded_opensearch is not None:
        url = embedded_opensearch.url
        if url is None:
            raise RuntimeError(f"the embedded OpenSearch in {embedded_opensearch.state_dir} stopped mid-session")
        yield url
        return
    url = _env_opensearch_url()
    if url:
        yield url
        return
    container = _opensearch_container()
    container.start()
    try:
        yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(9200)}"
    finally:
        container.stop()


@pytest.fixture(scope="session")
def opensearch_settings(opensearch_url: str) -> OpenSearchSettings:
    """Settings for the session's cluster; credentials and TLS come from the environment when it named the URL."""
    if _env_opensearch_url():
        return load_settings().opensearch_settings()
    return OpenSearchSettings(url=opensearch_url)


@pytest.fixture(scope="session")
def opensearch_client(opensearch_settings: OpenSearchSettings) -> Iterator[Any]:
    """A connected ``opensearchpy.OpenSearch`` client (checked with GET / by :func:`semdup.core.settings.connect`)."""
    client = connect(opensearch_settings)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def unique_index(opensearch_client: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh index name (the test creates the index); the index is deleted after the test."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40]
    name = f"semdup-test-{stem}-{uuid.uuid4().hex[:8]}"
    yield name
    opensearch_client.indices.delete(index=name, ignore_unavailable=True, request_timeout=30)


CLUSTER_NODES = 3
CLUSTER_HEAP = "512m"  # x 3 beside the single node and the workers, on a 2-core 24 GiB machine


@pytest.fixture(scope="session")
def opensearch_cluster() -> Iterator[LocalCluster]:
    """Three local nodes with ml-commons, formed and healthy (see the module docstring); shared by the tier.

    A test that kills a member starts it again and waits for green before it ends, so the next test finds the
    cluster whole."""
    import shutil
    import tempfile

    from semdup.devstack.ml_plugins import ensure_ml_installed, ml_cache_dir

    ensure_ml_installed()
    state = Path(tempfile.mkdtemp(prefix="semdup-test-cluster-"))
    cluster = LocalCluster(CLUSTER_NODES, cache_dir=ml_cache_dir(), state_dir=state, heap=CLUSTER_HEAP, ports=0)
    try:
        cluster.start(timeout=600)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a real Redis for this session: the environment's, else a local one on a free port."""
    url = os.environ.get("SEMDUP_BROKER_URL") or os.environ.get("REDIS_URL")
    if url:
        yield url
        return
    with throwaway(LocalRedis, "semdup-test-redis-", timeout=30.0) as broker:
        assert broker.url, "the throwaway Redis stopped"
        yield broker.url


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """URL of a real RabbitMQ for this session: the environment's, else a throwaway local node."""
    url = os.environ.get("SEMDUP_TEST_RABBITMQ_URL")
    if url:
        yield url
        return
    with throwaway(LocalRabbitMQ, "semdup-test-rabbitmq-", timeout=120.0) as broker:
        assert broker.url, "the throwaway RabbitMQ stopped"
        yield broker.url
