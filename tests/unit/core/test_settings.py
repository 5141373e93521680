"""Connection settings: environment and file parsing, secrets masking, SigV4, errors when nothing runs.

Hermetic: no server is needed. Connection failures are tested against a port nothing listens on.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from semdup.apps.settings import load_settings
from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.settings import BrokerSettings, OpenSearchSettings, load_config_file, parse_auto_bool, redact_url
from semdup.devstack.local_process import any_free_port
from semdup.opensearch_io.clients import aws_auth, check_broker, connect


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


# --- AWS SigV4 ------------------------------------------------------------------------------------------------
def test_sigv4_signer_signs_with_the_given_credentials() -> None:
    import requests
    from botocore.credentials import Credentials
    from opensearchpy import AWSV4SignerAuth

    settings = OpenSearchSettings(url="https://search-x.eu-west-1.es.amazonaws.com", aws_region="eu-west-1")
    auth = aws_auth(settings, credentials=Credentials("AKIDEXAMPLEFAKE", "fake-secret"))
    assert isinstance(auth, AWSV4SignerAuth)
    request = requests.Request("GET", "https://search-x.eu-west-1.es.amazonaws.com/_cluster/health").prepare()
    signed = auth(request)
    header = signed.headers["Authorization"]
    assert header.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLEFAKE/")
    assert "/eu-west-1/es/aws4_request" in header
    assert "fake-secret" not in header


def test_sigv4_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # makes `import boto3` fail
    settings = OpenSearchSettings(url="https://h", aws_region="eu-west-1")
    with pytest.raises(ImportError, match=r'pip install "semdup\[aws\]"'):
        aws_auth(settings)


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


def test_connect_to_a_closed_port_names_the_url_without_credentials() -> None:
    port = any_free_port()
    settings = OpenSearchSettings(url=f"http://127.0.0.1:{port}", username="u", password="hunter2", max_retries=0)
    with pytest.raises(OpenSearchUnavailable) as info:
        connect(settings)
    message = str(info.value)
    assert f"127.0.0.1:{port}" in message and "semdup opensearch start" in message
    assert "hunter2" not in message


def test_check_broker_on_a_closed_port() -> None:
    with pytest.raises(BrokerUnavailable, match="no broker at redis://\\*\\*\\*@127.0.0.1"):
        check_broker(f"redis://:pw@127.0.0.1:{any_free_port()}/0", timeout=2)


def test_an_auto_boolean_is_none_unless_set_and_else_a_boolean() -> None:
    assert [parse_auto_bool("knn", v) for v in (None, "", " ", "auto", "AUTO")] == [None] * 5
    assert [parse_auto_bool("knn", v) for v in ("true", "0", True, "off")] == [True, False, True, False]
    with pytest.raises(ConfigError, match="knn must be true or false"):
        parse_auto_bool("knn", "maybe")


def _refusing_cluster(status: int, body: str) -> tuple[object, str]:
    """A loopback server answering every call as the security plugin refuses one: ``status`` and ``body``."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    "status, body, expected",
    [
        (401, "Unauthorized", r"refused user 'semdup-worker' \(HTTP 401: wrong name or password\); check "
         "SEMDUP_OPENSEARCH_USERNAME and SEMDUP_OPENSEARCH_PASSWORD"),
        (403, '{"error": {"type": "security_exception", "reason": "no permissions for [cluster:monitor/main]"}, '
         '"status": 403}', r"let user 'semdup-worker' in but refused GET / \(HTTP 403: no permissions for "
         r"\[cluster:monitor/main\]\); give it its semdup role \(`semdup roles print`\)"),
    ],
    ids=["wrong-password", "no-role"],
)
def test_a_refused_login_names_the_user_never_the_password(status: int, body: str, expected: str) -> None:
    server, url = _refusing_cluster(status, body)
    settings = OpenSearchSettings(url=url, username="semdup-worker", password="hunter2-secret", max_retries=0)
    try:
        with pytest.raises(ConfigError, match=expected) as info:
            connect(settings)
    finally:
        server.shutdown()  # type: ignore[attr-defined]
    assert "hunter2-secret" not in str(info.value)
