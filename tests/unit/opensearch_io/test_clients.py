"""The clients of the OpenSearch boundary: SigV4 signing, a closed port, a refused login, an absent broker.

Hermetic: no server is needed. Connection failures are tested against a port nothing listens on, refusals against
a loopback server that answers as the security plugin does.
"""

from __future__ import annotations

import sys

import pytest

from semdup.core.errors import BrokerUnavailable, ConfigError, OpenSearchUnavailable
from semdup.core.settings import OpenSearchSettings
from semdup.devstack.local_process import any_free_port
from semdup.opensearch_io.clients import aws_auth, check_broker, connect


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


# --- nothing listening -----------------------------------------------------------------------------------------
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
