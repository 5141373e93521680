"""Connection settings: environment and file parsing, secrets masking, errors when nothing is configured.

Hermetic: no server is needed (the clients built from them: tests/unit/opensearch_io/test_clients.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from semdup.apps.settings import load_settings
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.settings import BrokerSettings, OpenSearchSettings, load_config_file, parse_auto_bool, redact_url


@pytest.fixture(autouse=True)
def _no_embedded_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the embedded-node lookup at an empty folder so a developer's running node never leaks in."""
    monkeypatch.setenv("SEMDUP_CACHE", str(tmp_path / "semdup-home"))


# --- environment ----------------------------------------------------------------------------------------------
def test_env_gives_url_credentials_and_tls_settings() -> None:
    env = {
        "SEMDUP_OPENSEARCH_URL": "https://search.example.org:9200",
        "SEMDUP_OPENSEARCH_USERNAME": "indexer",
        "SEMDUP_OPENSEARCH_PASSWORD": "s3cret",
        "SEMDUP_OPENSEARCH_VERIFY_CERTS": "false",
        "SEMDUP_OPENSEARCH_CA_CERTS": "/etc/ssl/ca.pem",
        "SEMDUP_OPENSEARCH_TIMEOUT": "12.5",
        "SEMDUP_OPENSEARCH_MAX_RETRIES": "5",
    }
    settings = load_settings(env=env).opensearch_settings()
    assert settings.url == "https://search.example.org:9200"
    assert (settings.username, settings.password) == ("indexer", "s3cret")
    assert settings.verify_certs is False
    assert settings.ca_certs == "/etc/ssl/ca.pem"
    assert (settings.timeout, settings.max_retries) == (12.5, 5)


def test_semdup_url_wins_over_plain_opensearch_url() -> None:
    env = {"OPENSEARCH_URL": "http://other:9200", "SEMDUP_OPENSEARCH_URL": "http://mine:9200"}
    assert load_settings(env=env).opensearch_settings().url == "http://mine:9200"
    assert load_settings(env={"OPENSEARCH_URL": "http://other:9200"}).opensearch_settings().url == "http://other:9200"


def test_aws_settings_from_env() -> None:
    env = {"SEMDUP_OPENSEARCH_URL": "https://x.eu-west-1.aoss.amazonaws.com", "SEMDUP_AWS_REGION": "eu-west-1"}
    settings = load_settings(env=env | {"SEMDUP_AWS_SERVICE": "aoss"}).opensearch_settings()
    assert (settings.aws_region, settings.aws_service) == ("eu-west-1", "aoss")
    assert load_settings(env=env).opensearch_settings().aws_service == "es"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SEMDUP_OPENSEARCH_VERIFY_CERTS": "maybe"}, "must be true or false"),
        ({"SEMDUP_OPENSEARCH_TIMEOUT": "soon"}, "SEMDUP_OPENSEARCH_TIMEOUT must be a number, got 'soon'"),
        ({"SEMDUP_AWS_REGION": "eu-west-1", "SEMDUP_AWS_SERVICE": "s3"}, "'es' (managed OpenSearch) or 'aoss'"),
        ({"SEMDUP_OPENSEARCH_PASSWORD": "x"}, "without a username"),
        ({"SEMDUP_OPENSEARCH_USERNAME": "u", "SEMDUP_AWS_REGION": "eu-west-1"}, "choose one"),
    ],
)
def test_bad_values_are_refused_with_the_accepted_ones(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        load_settings(env={"SEMDUP_OPENSEARCH_URL": "http://h:9200"} | env).opensearch_settings()


def test_url_without_scheme_is_refused() -> None:
    with pytest.raises(ConfigError, match="http\\(s\\)://host:port"):
        OpenSearchSettings(url="search.example.org:9200")


# --- config file ----------------------------------------------------------------------------------------------
def test_yaml_file_and_env_override(tmp_path: Path) -> None:
    path = tmp_path / "semdup.yaml"
    path.write_text(
        "opensearch:\n  url: https://file-host:9200\n  username: fileuser\n  password: filepass\n"
        "  verify_certs: false\n  timeout: 7\nbroker:\n  url: redis://broker-host:6379/1\n"
        "worker:\n  retry_budget: 60\n",  # every part's section, in the one tree
        encoding="utf-8",
    )
    settings = load_settings({}, config_file=path).opensearch_settings()
    assert (settings.url, settings.username, settings.verify_certs, settings.timeout) == (
        "https://file-host:9200",
        "fileuser",
        False,
        7.0,
    )
    tree = load_settings(env={"SEMDUP_CONFIG": str(path), "SEMDUP_OPENSEARCH_URL": "http://env:1"})
    overridden = tree.opensearch_settings()
    assert tree.worker.retry_budget == 60
    assert overridden.url == "http://env:1"
    assert overridden.username == "fileuser"  # fields the environment does not set still come from the file
    assert load_settings({}, config_file=path).broker_settings().url == "redis://broker-host:6379/1"
    path.write_text("worker:\n  concurrency: 2\n", encoding="utf-8")  # a key no part reads: refused, not ignored
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['concurrency'\] in section 'worker'.*accepted: .*retry_budget"):
        load_settings({}, config_file=path)


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "semdup.toml"
    path.write_text('[opensearch]\nurl = "http://toml-host:9200"\nmax_retries = 0\n', encoding="utf-8")
    settings = load_settings({}, config_file=path).opensearch_settings()
    assert (settings.url, settings.max_retries) == ("http://toml-host:9200", 0)


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.yaml", "opensearch:\n  url: http://h:9200\n  pasword: x\n", "unknown key\\(s\\) \\['pasword'\\]"),
        ("a.yaml", "opensearch: [1, 2]\n", "must be a mapping"),
        ("a.yaml", "- just\n- a list\n", "mapping of sections"),
        ("a.yaml", "opensearch:\n  url: [unclosed\n", "not valid YAML"),
        ("a.toml", "[opensearch\n", "not valid TOML"),
        ("a.ini", "[opensearch]\n", "must end in .yaml, .yml or .toml"),
    ],
)
def test_malformed_config_files_give_one_clear_error(tmp_path: Path, name: str, text: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=expected):
        load_settings({}, config_file=path).opensearch_settings()


def test_missing_and_non_utf8_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "nope.yaml")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"opensearch:\n  url: \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_config_file(binary)


# --- secrets never shown --------------------------------------------------------------------------------------
def test_repr_masks_the_password() -> None:
    settings = OpenSearchSettings(url="https://h:9200", username="admin", password="hunter2")
    assert "hunter2" not in repr(settings)
    assert "hunter2" not in str(settings)
    assert "password='***'" in repr(settings)


def test_credentials_in_the_url_move_to_fields_and_never_show() -> None:
    settings = OpenSearchSettings(url="https://admin:p%40ss@h:9200/prefix")
    assert settings.url == "https://h:9200/prefix"
    assert (settings.username, settings.password) == ("admin", "p@ss")
    assert "p@ss" not in repr(settings) and "p%40ss" not in repr(settings)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:9200", "http://h:9200"),
        ("https://user:pw@h:9200/x?y=1", "https://***@h:9200/x?y=1"),
        ("redis://:pw@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
        ("amqp://guest:guest@[::1]:5672//", "amqp://***@[::1]:5672//"),
        ("http://h:notaport", "<unparseable URL>"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_broker_settings_mask_and_validate() -> None:
    assert "pw" not in repr(BrokerSettings("redis://:pw@h:6379/0"))
    with pytest.raises(ConfigError, match="redis://, rediss://, amqp://"):
        BrokerSettings("http://h:6379")


# --- nothing running ------------------------------------------------------------------------------------------
def test_no_url_and_no_embedded_node_says_how_to_start_one() -> None:
    with pytest.raises(OpenSearchUnavailable) as info:
        load_settings(env={}).opensearch_settings()
    message = str(info.value)
    assert "no OpenSearch at" in message
    assert "semdup opensearch start" in message and "SEMDUP_OPENSEARCH_URL" in message


def test_no_broker_says_how_to_start_one() -> None:
    with pytest.raises(BrokerUnavailable, match="`semdup broker start` prints the URL"):
        load_settings(env={}).broker_settings()


def test_a_running_embedded_node_is_never_picked_up_behind_the_callers_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Production settings never fall back to the dev stack: only `semdup demo` and the tests pass its URL."""
    from semdup.devstack import local_opensearch, local_redis

    monkeypatch.setattr(local_opensearch, "running_url", lambda *a, **k: "http://127.0.0.1:9")
    monkeypatch.setattr(local_redis, "running_url", lambda *a, **k: "redis://127.0.0.1:9/0")
    with pytest.raises(OpenSearchUnavailable):
        load_settings(env={}).opensearch_settings()
    with pytest.raises(BrokerUnavailable):
        load_settings(env={}).broker_settings()


def test_an_auto_boolean_is_none_unless_set_and_else_a_boolean() -> None:
    assert [parse_auto_bool("knn", v) for v in (None, "", " ", "auto", "AUTO")] == [None] * 5
    assert [parse_auto_bool("knn", v) for v in ("true", "0", True, "off")] == [True, False, True, False]
    with pytest.raises(ConfigError, match="knn must be true or false"):
        parse_auto_bool("knn", "maybe")
