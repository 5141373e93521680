"""The one settings tree: sources and their order, the old config file format, the parts handed down, secrets never
shown, `semdup config show`, the generated variable table, and the hand-off from `semdup serve` to its workers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import semdup
from semdup.apps.settings import (
    DEFAULT_SWEEP_AFTER,
    DEFAULT_VISIBILITY_TIMEOUT,
    HANDOFF_ENV,
    OTHER_VARIABLES,
    VARIABLES,
    handoff,
    load_settings,
)
from semdup.apps.settings_report import explain, settings_table
from semdup.core.errors import ConfigError, OpenSearchUnavailable

REPO = Path(semdup.__file__).parents[1]
SECRET = "hunter2-s3cr3t-0b9e5d7a1c"  # 24+ characters: what a key needs
ENV = {
    "SEMDUP_OPENSEARCH_URL": f"https://admin:{SECRET}@search:9200",
    "SEMDUP_BROKER_URL": f"redis://:{SECRET}@broker:6379/0",
    "SEMDUP_BUNDLE": "/bundles/current",
    "SEMDUP_INDEX": "travel",
    "SEMDUP_INDICES": "travel,cooking",
    "SEMDUP_API_KEY": SECRET + "-key",
    "SEMDUP_API_KEYS": f"{SECRET}-mod:travel:review:alice",
    "SEMDUP_SESSION_SECRET": SECRET * 3,
    "SEMDUP_TEMPLATES": "bm25,lmj",
    "SEMDUP_KNN": "auto",
}


def test_the_committed_table_is_the_generated_one() -> None:
    committed = (REPO / "docs" / "settings.md").read_text(encoding="utf-8")
    assert committed == settings_table(), "run `semdup config table --out docs/settings.md`"


def test_every_semdup_variable_in_the_code_is_in_the_table() -> None:
    named = {v.name for v in VARIABLES} | {name for name, _, _ in OTHER_VARIABLES}
    in_code: set[str] = set()
    for path in (REPO / "semdup").rglob("*.py"):
        in_code |= set(re.findall(r"\bSEMDUP_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    assert sorted(in_code - named) == []


def test_the_tree_has_one_field_per_section() -> None:
    from semdup.apps.sections import SECTION_TYPES
    from semdup.apps.settings import Settings

    assert list(Settings.model_fields) == ["config_file", *SECTION_TYPES]


def test_the_defaults_agree_with_the_modules_that_own_them() -> None:
    from semdup.ingest.celery_app import DEFAULT_VISIBILITY_TIMEOUT as celery_default
    from semdup.ingest.sweeper import DEFAULT_SWEEP_AFTER as sweeper_default
    from semdup.service.settings import ServiceSettings

    tree = load_settings(env={})
    assert (DEFAULT_VISIBILITY_TIMEOUT, DEFAULT_SWEEP_AFTER) == (celery_default, sweeper_default) == (300, 300.0)
    assert (tree.worker.visibility_timeout, tree.worker.sweep_after) == (celery_default, sweeper_default)
    assert ServiceSettings.model_fields["sweep_after"].default == sweeper_default  # the service's sweeper
    assert tree.opensearch is None and tree.broker is None and tree.candidates.k_candidates == 100
    with pytest.raises(OpenSearchUnavailable, match="SEMDUP_OPENSEARCH_URL"):
        tree.opensearch_settings()


def test_env_over_file_over_defaults_and_the_old_reranker_section(tmp_path: Path) -> None:
    path = tmp_path / "semdup.yaml"
    path.write_text(
        "opensearch:\n  url: http://file:9200\n  timeout: 7\n"
        "reranker:\n  bundle: /b\n  index: site\n  templates: [dfr, ib]\n  api_key: k-file-0001-9c2e7a4b1d5f0e8a\n  max_k: 20\n"
        "review:\n  stats_ttl: 5\n",
        encoding="utf-8",
    )
    tree = load_settings(env={"SEMDUP_CONFIG": str(path), "SEMDUP_MAX_K": "30"})
    service = tree.service_settings()
    assert (service.opensearch.url, service.opensearch.timeout) == ("http://file:9200", 7.0)
    assert (service.bundle, service.index, service.reranker.templates) == ("/b", "site", ("dfr", "ib"))
    assert (service.max_k, service.review.stats_ttl) == (30, 5.0)  # env over file, new sections beside old
    cli = load_settings(env={"SEMDUP_CONFIG": str(path)}, overrides={"service.index": "other", "model.bundle": None})
    assert (cli.service.index, cli.model.bundle) == ("other", "/b")  # an option given wins, one not given does not
    explained = explain(tree, {"SEMDUP_CONFIG": str(path), "SEMDUP_MAX_K": "30"})
    assert explained["service.max_k"]["source"] == "env SEMDUP_MAX_K"
    assert explained["candidates.templates"]["source"] == f"file {path} (reranker.templates)"
    assert explained["service.threads"]["source"] == "default"


def test_the_flagging_workers_and_the_service_share_one_candidate_section() -> None:
    tree = load_settings(env=ENV)
    assert tree.alert_settings().reranker.templates == tree.service_settings().reranker.templates == ("bm25", "lmj")


def test_bad_values_name_the_variable_and_never_show_a_secret() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env={"SEMDUP_MAX_K": "many", "SEMDUP_THREADS": "2.5"})
    assert "SEMDUP_MAX_K must be a whole number, got 'many'" in str(info.value)
    assert "SEMDUP_THREADS must be a whole number" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_settings(env={"SEMDUP_API_KEYS": f"{SECRET}:travel:nope"})
    assert "unknown API key scope" in str(info.value) and SECRET not in str(info.value)
    with pytest.raises(ConfigError, match="SEMDUP_SESSION_SECRET must hold at least 32 characters"):
        load_settings(env={**ENV, "SEMDUP_SESSION_SECRET": "short"}).service_settings()


def test_no_secret_in_a_repr_or_in_config_show(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = load_settings(env=ENV)
    assert SECRET not in repr(tree) and SECRET not in repr(tree.service_settings())
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    from semdup.cli import cli

    out = CliRunner().invoke(cli, ["config", "show", "--json"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert SECRET not in out.output
    assert shown["opensearch.url"] == {"value": "https://search:9200", "source": "env SEMDUP_OPENSEARCH_URL"}
    assert shown["opensearch.password"]["value"] == "***"
    assert shown["broker.url"]["value"] == "redis://***@broker:6379/0"
    assert shown["service.api_keys"]["value"] == [
        {"key": "***", "indices": ["travel"], "scopes": ["review"], "name": "alice"}
    ]
    assert shown["worker.visibility_timeout"] == {"value": 300, "source": "default"}
    text = CliRunner().invoke(cli, ["config", "show"])
    assert text.exit_code == 0 and SECRET not in text.output and "env SEMDUP_INDEX" in text.output


def test_the_hand_off_to_serves_workers_is_the_resolved_tree() -> None:
    tree = load_settings(env=ENV, overrides={"service.index": "cooking", "candidates.sparse": True})
    text = handoff(tree)
    child = load_settings(env={HANDOFF_ENV: text, "SEMDUP_INDEX": "ignored"})  # one variable: the whole tree
    assert child.service_settings() == tree.service_settings()
    assert child.service.index == "cooking" and child.candidates.sparse is True
    assert child.service.api_keys[0].key == f"{SECRET}-mod"  # the worker checks keys: it needs them
    with pytest.raises(ConfigError, match=HANDOFF_ENV):
        load_settings(env={HANDOFF_ENV: "{not json"})


def test_forwarded_headers_are_trusted_only_from_the_proxies_named_and_config_show_says_which_address_counts() -> None:
    """Issue #34: uvicorn trusted X-Forwarded-For from 127.0.0.1 by default; now nobody unless named."""
    plain = load_settings(env=ENV)
    assert plain.service.forwarded_allow_ips == ()
    row = explain(plain, ENV)["service.throttle_address"]
    assert row["value"].startswith("the connection's own address") and "ignored" in row["value"]
    named = load_settings(env={**ENV, "SEMDUP_FORWARDED_ALLOW_IPS": "10.0.0.5, 10.1.2.3/16,::1"})
    assert named.service.forwarded_allow_ips == ("10.0.0.5", "10.1.0.0/16", "::1")  # as uvicorn compares them
    said = explain(named, {**ENV, "SEMDUP_FORWARDED_ALLOW_IPS": "10.0.0.5, 10.1.2.3/16,::1"})
    assert said["service.forwarded_allow_ips"]["source"] == "env SEMDUP_FORWARDED_ALLOW_IPS"
    assert said["service.throttle_address"]["value"].startswith("on connections from 10.0.0.5, 10.1.0.0/16, ::1:")
    with pytest.raises(ConfigError, match="SEMDUP_FORWARDED_ALLOW_IPS holds 'proxy.local', not an IP address"):
        load_settings(env={**ENV, "SEMDUP_FORWARDED_ALLOW_IPS": "proxy.local"})
    cli = load_settings(env=ENV, overrides={"service.forwarded_allow_ips": "192.0.2.7"})  # semdup serve's option
    assert cli.service.forwarded_allow_ips == ("192.0.2.7",)
