"""Nobody searches what the service does not serve (issue #13, item 5), on a real OpenSearch.

The service was configured with two served names: the test index and an alias of it. Every other name a caller
tries (patterns, ``_all``, system and semdup's own indices, comma lists, paths, endpoints, an alias of an index
that is not served, an index that does not exist) gets one and the same 404, and none of them reaches OpenSearch.
Per-key allow-lists narrow what a key may name.
"""

# ruff: noqa: F811  (the module-scoped fixtures are imported from conftest)
from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from served_index import build_index
from settings_tree import service_settings

from semdup.apps.http import create_app
from semdup.bundle.bundle import Bundle
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.reranker import Reranker

pytestmark = pytest.mark.opensearch

ALL_KEY, NARROW_KEY = "key-all-0f3c-7d2f0c9e4b1a", "key-alias-77d1-7d2f0c9e4b1a"


class RecordingClient:
    """The real client, recording every call's arguments (to show which names reached OpenSearch)."""

    def __init__(self, client: Any, calls: list[str], prefix: str = "") -> None:
        self._client, self._calls, self._prefix = client, calls, prefix

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._client, name)
        if not callable(target):
            return RecordingClient(target, self._calls, f"{self._prefix}{name}.")

        def call(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(f"{self._prefix}{name} {args!r} {kwargs!r}")
            return target(*args, **kwargs)

        return call


@pytest.fixture(scope="module")
def names(opensearch_client: Any, served: tuple[Bundle, str], real_posts: list[Post]) -> Iterator[dict[str, str]]:
    """The served index, an alias of it, another semdup index and an alias of that one (not served)."""
    bundle, index = served
    tag = uuid.uuid4().hex[:8]
    other = f"semdup-test-other-{tag}"
    build_index(opensearch_client, other, bundle, real_posts[:10])
    out = {
        "index": index,
        "alias": f"semdup-test-alias-{tag}",
        "other": other,
        "other_alias": f"semdup-test-evil-{tag}",
        "missing": f"semdup-test-missing-{tag}",  # served, but no such index in the cluster
    }
    opensearch_client.indices.update_aliases(
        body={
            "actions": [
                {"add": {"index": index, "alias": out["alias"]}},
                {"add": {"index": other, "alias": out["other_alias"]}},
            ]
        }
    )
    yield out
    opensearch_client.indices.delete(index=other, ignore_unavailable=True)
    opensearch_client.indices.delete_alias(index=index, name=out["alias"], ignore=[404])


@pytest.fixture(scope="module")
def service(
    served: tuple[Bundle, str], names: dict[str, str], tiny_bundle: Path, opensearch_url: str, opensearch_client: Any
) -> tuple[TestClient, list[str]]:
    bundle, index = served
    settings = service_settings(
        {
            "bundle": str(tiny_bundle),
            "index": index,
            "indices": f"{index},{names['alias']},{names['missing']}",
            "api_keys": f"{ALL_KEY}:*,{NARROW_KEY}:{names['alias']}",
        },
        OpenSearchSettings(url=opensearch_url),
    )
    calls: list[str] = []
    reranker = Reranker(bundle, RecordingClient(opensearch_client, calls), index)
    return TestClient(create_app(settings, reranker=reranker)), calls


def ask(client: TestClient, index: str | None, key: str = ALL_KEY) -> Any:
    body: dict[str, Any] = {"title": "How do I mount a USB drive?", "k": 3}
    if index is not None:
        body["index"] = index
    return client.post("/v1/rerank", json=body, headers={"X-API-Key": key})


TRICKS = ["*", "_all", "semdup-parked", ".kibana", "a,b", "../x", "%2e%2e", "_search", "semdup-*", "-x", "_cat/x"]


def test_every_name_not_served_gets_the_same_404_and_never_reaches_opensearch(
    service: tuple[TestClient, list[str]], names: dict[str, str]
) -> None:
    client, calls = service
    refused = [*TRICKS, names["other"], names["other_alias"], "semdup-no-such-index-" + uuid.uuid4().hex[:6]]
    answers = {}
    for name in refused:
        r = ask(client, name)
        assert r.status_code == 404, (name, r.text)
        answers[name] = r.json()
    # one answer for all: the text differs only by the name echoed back, so it tells nothing about existence
    reached = "\n".join(calls)
    for name in refused:
        assert repr(name) not in reached, name
    answers[names["missing"]] = ask(client, names["missing"]).json()  # served but absent: the same answer
    shapes = {(a["error"]["type"], a["error"]["message"].replace(repr(n), "NAME")) for n, a in answers.items()}
    assert len(shapes) == 1, shapes
    assert ask(client, names["index"]).status_code == 200  # the service itself still answers


def test_the_served_alias_and_per_key_lists(service: tuple[TestClient, list[str]], names: dict[str, str]) -> None:
    client, _ = service
    by_alias = ask(client, names["alias"])
    assert by_alias.status_code == 200 and by_alias.json()["index"] == names["alias"]
    direct = ask(client, None).json()["candidates"]
    assert [c["id"] for c in by_alias.json()["candidates"]] == [c["id"] for c in direct]
    narrow = ask(client, None, key=NARROW_KEY)  # this key may not search the default index: its own is used
    assert narrow.status_code == 200 and narrow.json()["index"] == names["alias"]
    denied = ask(client, names["index"], key=NARROW_KEY)
    assert denied.status_code == 404 and denied.json()["error"]["type"] == "SearchIndexError"
    for key in ("wrong", "", ALL_KEY[:-1]):
        assert ask(client, names["index"], key=key).status_code == 401
