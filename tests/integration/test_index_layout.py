"""Shards and replicas of the indices semdup creates, on the real single node: a companion follows the site's
index, the stores and ``index-posts`` indices carry ``auto_expand_replicas: 0-1``, and every one of them is green
here (a single node holds no replica: a fixed count of 1 would stay yellow for ever). The multi-node tier checks
that the replicas appear where a second data node exists."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.site_index import SITE_MAPPING
from semdup.index_format.layout import IndexLayout, Shape
from semdup.index_format.system_indices import JOBS, SYSTEM_INDICES, ensure
from semdup.ingest.lexical_index import create_index
from semdup.site_index.enable import enable_index

pytestmark = [pytest.mark.opensearch]


def _index_settings(client: Any, name: str) -> dict[str, Any]:
    got = client.indices.get_settings(index=name)
    return next(iter(got.values()))["settings"]["index"]


def _green(client: Any, name: str) -> str:
    return client.cluster.health(index=name, wait_for_status="green", timeout="30s", request_timeout=40)["status"]


@pytest.fixture
def site(opensearch_client: Any, unique_index: str) -> Any:
    """A site's index of two primary shards holding three posts; it and its companions deleted afterwards."""
    client = opensearch_client
    settings = {"index": {"number_of_shards": 2, "number_of_replicas": 0}}
    client.indices.create(index=unique_index, body={"settings": settings, "mappings": SITE_MAPPING})
    for n, title in enumerate(("Visa on arrival in Qatar", "Night train from Paris", "Lounge at the airport")):
        client.index(index=unique_index, id=str(n), body={"Title": title, "Body": f"<p>{title}?</p>"})
    client.indices.refresh(index=unique_index)
    yield unique_index
    client.indices.delete(index=f"{unique_index}*", ignore_unavailable=True, request_timeout=30)


def test_companion_follows_a_two_shard_site_index(opensearch_client: Any, site: str) -> None:
    client = opensearch_client
    out = enable_index(client, site, version="layout-v1", dimension=None, title_field="Title", body_field="Body")
    made = _index_settings(client, out.index)
    assert (made["number_of_shards"], made["number_of_replicas"]) == ("2", "0")  # the site's own
    assert out.warnings == ()  # one data node: no replica can live anywhere, nothing to report
    assert _green(client, out.index) == "green"
    for decl in SYSTEM_INDICES:  # enable made the stores the service and workers will write
        assert client.indices.exists(index=decl.name)

    # enabling again with companion replicas set applies them in place (a range: still green on one node)
    again = enable_index(client, site, version="layout-v1", dimension=None, title_field="Title", body_field="Body",
                         layout=IndexLayout(companion_replicas="0-1"))  # fmt: skip
    assert not again.created and _index_settings(client, out.index)["auto_expand_replicas"] == "0-1"
    assert _green(client, out.index) == "green"


def test_companion_shards_from_the_settings(opensearch_client: Any, site: str) -> None:
    client = opensearch_client
    out = enable_index(client, site, version="layout-v1", dimension=None, title_field="Title", body_field="Body",
                       layout=IndexLayout(companion_shards=3, companion_replicas="0-1"))  # fmt: skip
    made = _index_settings(client, out.index)
    assert (made["number_of_shards"], made["auto_expand_replicas"]) == ("3", "0-1")
    assert _green(client, out.index) == "green"


def test_stores_carry_auto_expand_replicas(opensearch_client: Any, unique_index: str) -> None:
    client = opensearch_client
    name = f"{unique_index}-jobs"
    try:
        assert ensure(client, JOBS, name)
        made = _index_settings(client, name)
        assert (made["number_of_shards"], made["auto_expand_replicas"]) == ("1", "0-1")
        assert _green(client, name) == "green"
    finally:
        client.indices.delete(index=name, ignore_unavailable=True)


def test_an_index_semdup_creates_keeps_one_shard(opensearch_client: Any, unique_index: str) -> None:
    client = opensearch_client
    create_index(client, unique_index, shape=IndexLayout().created())
    made = _index_settings(client, unique_index)
    assert (made["number_of_shards"], made["auto_expand_replicas"]) == ("1", "0-1")
    assert _green(client, unique_index) == "green"
    other = f"{unique_index}-two"
    try:
        create_index(client, other, shape=Shape(2, 0))
        assert _index_settings(client, other)["number_of_shards"] == "2"
    finally:
        client.indices.delete(index=other, ignore_unavailable=True)
