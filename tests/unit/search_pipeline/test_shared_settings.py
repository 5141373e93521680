"""What ``remove`` takes back of the cluster settings when other semdup pipelines remain (issue #45: ``remove`` of
A took back what B needed). The connectors and the cluster's settings are dicts here; the same runs on a real node
in tests/integration/test_search_pipeline_ops.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from semdup.search_pipeline import setup
from semdup.search_pipeline.cluster_settings import PRIVATE_IP, TRUSTED, endpoint_regex
from semdup.search_pipeline.setup import PipelineState

DEFAULTS = ["^https://api\\.openai\\.com/.*$"]
URL = "http://127.0.0.1:8080"
REGEX = endpoint_regex(URL)


class Cluster:
    """``cluster.get_settings`` / ``put_settings`` over persistent settings and fixed defaults."""

    def __init__(self, persistent: dict[str, Any]) -> None:
        self.persistent = dict(persistent)
        self.cluster = SimpleNamespace(get_settings=self._get, put_settings=self._put)

    def _get(self, params: Any = None) -> dict[str, Any]:
        return {"defaults": {TRUSTED: DEFAULTS, PRIVATE_IP: "false"}, "persistent": dict(self.persistent),
                "transient": {}}  # fmt: skip

    def _put(self, body: dict[str, Any]) -> None:
        for k, v in body["persistent"].items():
            if v is None:
                self.persistent.pop(k, None)
            else:
                self.persistent[k] = v


def _connector(cid: str, url: str, **recorded: str) -> dict[str, Any]:
    return {"_id": cid, "actions": [{"url": url + setup.REWRITE_PATH}], "parameters": {setup._SPEC: "{}", **recorded}}


A_RECORD = {setup._ADDED_REGEX: REGEX, setup._WAS_DEFAULT: "true", setup._SET_PRIVATE: "true"}


@pytest.fixture
def connectors(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    monkeypatch.setattr(setup, "_semdup_connectors", lambda client, but: [c for c in found if c["_id"] != but])
    return found


def test_a_later_connector_to_the_same_service_records_what_the_first_changed(connectors: list[dict[str, Any]]
                                                                               ) -> None:  # fmt: skip
    connectors.append(_connector("a", URL, **A_RECORD))
    assert setup._shared_records(Cluster({}), URL, None) == A_RECORD
    assert setup._shared_records(Cluster({}), "https://semdup.example.org", None) == {}  # needs none of it


def test_remove_keeps_what_another_pipeline_needs_and_the_last_takes_it_back(connectors: list[dict[str, Any]]
                                                                             ) -> None:  # fmt: skip
    cluster = Cluster({TRUSTED: [*DEFAULTS, REGEX], PRIVATE_IP: "true"})
    connectors.append(_connector("b", URL, **A_RECORD))  # B copied A's record when it was created
    a = PipelineState("semdup-a", settings=dict(A_RECORD))
    setup._restore_settings(cluster, a, "a")
    assert cluster.persistent == {TRUSTED: [*DEFAULTS, REGEX], PRIVATE_IP: "true"}  # B still needs both
    assert a.actions == ["cluster settings kept for another semdup pipeline: the trusted endpoint regex, private "
                         "addresses"]  # fmt: skip
    connectors.clear()  # B is the last
    setup._restore_settings(cluster, PipelineState("semdup-b", settings=dict(A_RECORD)), "b")
    assert cluster.persistent == {}  # as before the first create


def test_a_regex_another_pipeline_added_since_is_kept_when_the_first_is_removed(connectors: list[dict[str, Any]]
                                                                                ) -> None:  # fmt: skip
    other = endpoint_regex("https://semdup.example.org")
    cluster = Cluster({TRUSTED: [*DEFAULTS, REGEX, other]})
    connectors.append(_connector("c", "https://semdup.example.org", **{setup._ADDED_REGEX: other,
                                                                      setup._WAS_DEFAULT: "false"}))  # fmt: skip
    a = PipelineState("semdup-a", settings={setup._ADDED_REGEX: REGEX, setup._WAS_DEFAULT: "true"})
    setup._restore_settings(cluster, a, "a")
    assert cluster.persistent == {TRUSTED: [*DEFAULTS, other]}  # only A's regex out: not reset to the default
