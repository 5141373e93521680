"""The roles ``semdup roles print`` writes: each user's patterns stay within its part (the secured cluster test,
``tests/integration/test_secured_cluster.py``, checks the plugin enforces them on the whole flow)."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from semdup.apps.roles import rest_bodies, roles_yml, semdup_roles
from semdup.cli import cli


def _patterns(role: dict, action: str) -> set[str]:
    perms = role["index_permissions"]
    return {p for perm in perms if action in perm["allowed_actions"] for p in perm["index_patterns"]}


def test_each_role_writes_only_its_own_stores() -> None:
    roles = rest_bodies(semdup_roles(["travel"]))
    assert set(roles) == {"semdup_service", "semdup_worker", "semdup_setup", "semdup_site_search"}
    write = "indices:data/write/index"
    assert _patterns(roles["semdup_service"], write) == {"semdup-duplicates", "semdup-verdicts", "semdup-sessions"}
    assert _patterns(roles["semdup_worker"], write) == {"travel.semdup*", "semdup-jobs", "semdup-parked",
                                                        "semdup-duplicates"}  # fmt: skip
    assert "travel" not in _patterns(roles["semdup_setup"], write)  # semdup never writes the site's documents
    for name, role in roles.items():
        patterns = {p for perm in role["index_permissions"] for p in perm["index_patterns"]}
        assert all("*" not in p or p == "travel.semdup*" for p in patterns), name
        if name != "semdup_setup":
            assert not any("settings/update" in a or "script/put" in a for a in role["cluster_permissions"]), name


def test_json_and_yaml_say_the_same() -> None:
    runner = CliRunner()
    as_json = runner.invoke(cli, ["roles", "print", "--index", "travel", "--index", "travel-*"])
    as_yaml = runner.invoke(cli, ["roles", "print", "--index", "travel", "--index", "travel-*", "--format", "yaml"])
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, as_json.output + as_yaml.output
    doc = yaml.safe_load(as_yaml.output)
    assert doc.pop("_meta") == {"type": "roles", "config_version": 2}
    assert doc == json.loads(as_json.output)
    assert roles_yml(semdup_roles(["travel"], prefix="qa")).count("qa_") == 4


def test_no_index_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        semdup_roles([])
