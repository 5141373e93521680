"""Shards and replicas from the settings to the ``PUT /<index>`` body, and the replica report of ``enable``."""

from __future__ import annotations

from typing import Any

import pytest

from semdup.apps.settings import load_settings
from semdup.core.errors import ConfigError
from semdup.index_format.layout import IndexLayout, Shape, shape_of, site_shape, unreplicated
from semdup.index_format.schema import index_body
from semdup.index_format.system_indices import JOBS, VERDICTS, store_shape, use_store_shape
from semdup.site_index.enable import replica_warnings


def test_defaults_follow_the_site_and_stores_auto_expand() -> None:
    layout = load_settings({}).indices
    assert layout == IndexLayout()
    assert layout.companion(Shape(2, 1)) == Shape(2, 1)  # the site's own shards and replicas
    assert layout.companion(Shape(3, "0-all")) == Shape(3, "0-all")
    assert layout.companion(None) == Shape(1, "0-1")  # the cluster said nothing
    assert index_body(shape=layout.created())["settings"]["index"]["number_of_shards"] == 1
    body = VERDICTS.body_for(layout.store())["settings"]["index"]
    assert body == {"number_of_shards": 1, "auto_expand_replicas": "0-1"} and "number_of_replicas" not in body


def test_settings_from_the_environment_reach_the_index_bodies() -> None:
    layout = load_settings(
        {"SEMDUP_COMPANION_SHARDS": "4", "SEMDUP_COMPANION_REPLICAS": "2", "SEMDUP_INDEX_SHARDS": "3",
         "SEMDUP_INDEX_REPLICAS": "1", "SEMDUP_STORE_REPLICAS": "0-all", "SEMDUP_STORE_SHARDS": "2"}
    ).indices  # fmt: skip
    companion = index_body(shape=layout.companion(Shape(1, 0)))["settings"]["index"]
    assert (companion["number_of_shards"], companion["number_of_replicas"]) == (4, 2)
    assert "auto_expand_replicas" not in companion
    created = index_body(shape=layout.created())["settings"]["index"]
    assert (created["number_of_shards"], created["number_of_replicas"]) == (3, 1)
    store = JOBS.body_for(layout.store())["settings"]["index"]
    assert store == {"number_of_shards": 2, "auto_expand_replicas": "0-all"}


def test_a_config_file_may_give_numbers() -> None:
    layout = load_settings({}, data={"indices": {"companion_replicas": 1, "store_replicas": "1-all"}}).indices
    assert layout.companion_replicas == 1 and layout.store().replicas == "1-all"


@pytest.mark.parametrize(
    ("env", "named"),
    [({"SEMDUP_STORE_REPLICAS": "one"}, "SEMDUP_STORE_REPLICAS"),
     ({"SEMDUP_INDEX_SHARDS": "0"}, "SEMDUP_INDEX_SHARDS"),
     ({"SEMDUP_COMPANION_REPLICAS": "2-1"}, "SEMDUP_COMPANION_REPLICAS")],
)  # fmt: skip
def test_a_bad_value_names_its_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(env)


def test_process_store_shape_is_what_ensure_creates() -> None:
    before = store_shape()
    try:
        use_store_shape(Shape(1, 2))
        assert JOBS.body["settings"]["index"] == {"number_of_shards": 1, "number_of_replicas": 2}
    finally:
        use_store_shape(before)


def test_existing_replicas_are_set_in_place() -> None:
    assert Shape(1, 1).replica_settings() == {"number_of_replicas": 1, "auto_expand_replicas": False}
    assert Shape(1, "0-1").replica_settings() == {"auto_expand_replicas": "0-1"}


class _Cluster:
    """The answers of ``GET _cluster/health`` and ``GET <indices>/_settings`` of a cluster (the multi-node tier
    checks the real one; here only what enable does with the answers)."""

    def __init__(self, data_nodes: int, settings: dict[str, dict[str, Any]]) -> None:
        self.cluster = self
        self.indices = self
        self.data_nodes = data_nodes
        self.settings = settings

    def health(self, **_: Any) -> dict[str, Any]:
        return {"number_of_data_nodes": self.data_nodes, "status": "green"}

    def get_settings(self, index: str, **_: Any) -> dict[str, Any]:
        names = index.split(",")
        return {k: {"settings": {"index": v}} for k, v in self.settings.items() if k in names or k + "-alias" in names}


_SITE = {"posts": {"number_of_shards": "2", "number_of_replicas": "1"}}
_ZERO = {"semdup-posts-v1": {"number_of_shards": "2", "number_of_replicas": "0"},
         "semdup-verdicts": {"number_of_shards": "1", "number_of_replicas": "0", "auto_expand_replicas": "0-0"},
         "semdup-jobs": {"number_of_shards": "1", "number_of_replicas": "1",
                         "auto_expand_replicas": "0-1"}}  # fmt: skip


def test_site_shape_is_read_from_its_settings() -> None:
    assert site_shape(_Cluster(1, _SITE), "posts") == Shape(2, 1)
    assert shape_of({"number_of_shards": "3", "number_of_replicas": "0", "auto_expand_replicas": "0-all"}) == Shape(
        3, "0-all"
    )


def test_unreplicated_indices_on_several_nodes_get_the_fix() -> None:
    lines = replica_warnings(_Cluster(3, _ZERO), ["semdup-posts-v1"], ["semdup-verdicts", "semdup-jobs"])
    assert len(lines) == 2
    companion = next(line for line in lines if "semdup-posts-v1" in line)
    assert '"$SEMDUP_OPENSEARCH_URL/semdup-posts-v1/_settings"' in companion
    assert """-d '{"index":{"number_of_replicas":1}}'""" in companion and "SEMDUP_COMPANION_REPLICAS=1" in companion
    store = next(line for line in lines if "semdup-verdicts" in line)
    assert store.startswith("the store semdup-verdicts has 0 replicas") and "COMPANION" not in store


def test_a_single_node_is_never_warned() -> None:
    assert unreplicated(_Cluster(1, _ZERO), list(_ZERO)) == []


def test_config_show_prints_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from semdup.cli import cli

    monkeypatch.setenv("SEMDUP_COMPANION_REPLICAS", "1")
    out = CliRunner().invoke(cli, ["config", "show", "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["indices.companion_replicas"] == {"value": 1, "source": "env SEMDUP_COMPANION_REPLICAS"}
    assert shown["indices.store_replicas"] == {"value": "0-1", "source": "default"}
    assert shown["indices.companion_shards"]["value"] is None and shown["candidates.dfs"]["value"] is None
