"""The OpenSearch 3.x tier (marker ``opensearch3``): the cluster really is 3.x, on Java 21+, with what semdup needs.

Skipped unless ``$SEMDUP_TEST_OPENSEARCH3`` asks for it, so the default run downloads nothing:

* a URL (``http://127.0.0.1:9236``): check that running 3.x cluster;
* ``start``: start the embedded :data:`NEWEST_3X_VERSION` node for this module on a free port in a
  temporary state folder (the 2.19 node and its folder are left alone), stop and delete it afterwards.

``scripts/test_opensearch3.sh`` starts the 3.x node and runs this module together with semdup's
other OpenSearch integration tests against it (README, "Supported OpenSearch versions").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from local_services import throwaway

from semdup.apps.settings import load_settings
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_opensearch import LocalOpenSearch, default_state_dir
from semdup.devstack.opensearch_distribution import DEFAULT_VERSION, NEWEST_3X_VERSION
from semdup.opensearch_io.clients import connect, knn_available

pytestmark = [pytest.mark.opensearch, pytest.mark.opensearch3]

_MODULES = {"lang-painless", "lang-mustache", "mapper-extras", "analysis-common", "reindex"}


@pytest.fixture(scope="module")
def node() -> Iterator[LocalOpenSearch | None]:
    """The embedded 3.x node this module started, or None when ``$SEMDUP_TEST_OPENSEARCH3`` names a URL."""
    wanted = os.environ.get("SEMDUP_TEST_OPENSEARCH3", "").strip()
    if wanted.lower() in ("", "0", "false", "no", "off"):
        pytest.skip("the OpenSearch 3.x tier runs only with SEMDUP_TEST_OPENSEARCH3=URL or =start")
    if wanted.startswith(("http://", "https://")):
        yield None
        return
    if wanted.lower() not in ("start", "1", "true", "yes"):
        raise pytest.UsageError(f"SEMDUP_TEST_OPENSEARCH3 must be a URL or 'start', got {wanted!r}")
    with throwaway(LocalOpenSearch, "semdup-test-opensearch3-", timeout=300, version=NEWEST_3X_VERSION) as started:
        yield started


@pytest.fixture(scope="module")
def client(node: LocalOpenSearch | None) -> Iterator[Any]:
    """A client for the 3.x cluster; for a URL from the environment, credentials and TLS from SEMDUP_OPENSEARCH_*."""
    if node is not None:
        assert node.url, "the embedded 3.x node stopped"
        settings = OpenSearchSettings(url=node.url)
    else:
        url = os.environ["SEMDUP_TEST_OPENSEARCH3"].strip()
        settings = load_settings(env={**os.environ, "SEMDUP_OPENSEARCH_URL": url}).opensearch_settings()
    opensearch = connect(settings)
    try:
        yield opensearch
    finally:
        opensearch.close()


def test_the_cluster_is_3x_on_java_21_or_newer(client: Any, node: LocalOpenSearch | None) -> None:
    number = client.info()["version"]["number"]
    assert number.split(".")[0] == "3", number
    if node is not None:
        assert number == NEWEST_3X_VERSION
    jvms = [info["jvm"]["version"] for info in client.nodes.info(metric="jvm")["nodes"].values()]
    assert jvms and all(int(v.split(".")[0]) >= 21 for v in jvms), jvms


def test_modules_and_the_lucene_knn_plugin_are_there(client: Any, node: LocalOpenSearch | None) -> None:
    nodes = client.nodes.info(metric="plugins")["nodes"].values()
    assert all(_MODULES <= {m["name"] for m in info["modules"]} for info in nodes)
    assert knn_available(client)
    if node is not None:
        status = node.status()
        assert status is not None
        assert (status["version"], status["knn_engines"]) == (NEWEST_3X_VERSION, ["lucene"])


def test_each_version_has_its_own_state_folder(node: LocalOpenSearch | None) -> None:
    assert default_state_dir(NEWEST_3X_VERSION) != default_state_dir(DEFAULT_VERSION)
    assert default_state_dir(NEWEST_3X_VERSION).name == f"opensearch-{NEWEST_3X_VERSION}"
    if node is not None:
        assert node.version == NEWEST_3X_VERSION and node.state_dir.name.startswith("semdup-test-opensearch3-")
