"""The secured node's own CA and certificates (``openssl``; no node started): what the security plugin is told to
trust and whom it takes for the admin. The node itself: tests/integration/test_secured_cluster.py."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest

from semdup.devstack.secured_opensearch import SecuredOpenSearch, make_certificates

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


def test_the_node_and_admin_certificates_verify_against_their_ca_only(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "a")
    other = make_certificates(tmp_path / "b", name="another-ca")
    for cert in (certs.node, certs.admin):
        assert _openssl("verify", "-CAfile", str(certs.ca), str(cert)).strip().endswith("OK")
        with pytest.raises(subprocess.CalledProcessError):
            _openssl("verify", "-CAfile", str(other.ca), str(cert))
    node = _openssl("x509", "-in", str(certs.node), "-noout", "-ext", "subjectAltName")
    assert "IP Address:127.0.0.1" in node and "DNS:localhost" in node
    assert (certs.admin_key.stat().st_mode & 0o077) == 0  # keys are the owner's only
    assert "BEGIN PRIVATE KEY" in certs.admin_key.read_text()  # PKCS#8, what the plugin reads
    before = certs.ca.read_bytes()
    assert make_certificates(tmp_path / "a").ca.read_bytes() == before  # made once per folder


def test_the_node_names_the_admin_it_was_given_a_certificate_for(tmp_path: Path) -> None:
    node = SecuredOpenSearch(state_dir=tmp_path / "state", port=9299)
    assert node.http_context is None  # no certificate yet: nothing to log in with
    certs = make_certificates(node.state_dir / "tls")
    settings = node.node_settings()
    subject = _openssl("x509", "-in", str(certs.admin), "-noout", "-subject", "-nameopt", "RFC2253")
    assert subject.strip() == f"subject={settings['plugins.security.authcz.admin_dn'][0]}"
    assert settings["plugins.security.ssl.http.enabled"] is True
    assert isinstance(node.http_context, ssl.SSLContext)
