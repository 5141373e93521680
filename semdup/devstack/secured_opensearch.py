"""The embedded OpenSearch with the security plugin: TLS on HTTP and transport, internal users, roles.

A site's production cluster runs the security plugin; this node is how semdup meets it on one machine, with no
Docker. It is the ml-commons node (:mod:`semdup.devstack.ml_plugins`, so ``semdup pipeline`` runs on it too) plus
``org.opensearch.plugin:opensearch-security`` from Maven Central, in a copy of its own::

    ensure_ml_installed()  ──copy──▶  <semdup home>/secured/opensearch/2.19.1/opensearch-2.19.1
                                          + opensearch-security 2.19.1.0   (plugin zip, Maven Central)

Certificates: the node makes its own, once per state folder, with the ``openssl`` command (no Python package
needed): a CA, a node certificate for ``127.0.0.1`` / ``localhost`` (HTTP and transport), and an admin certificate
(the ``plugins.security.authcz.admin_dn``), all under ``<state>/tls``. Clients trust ``<state>/tls/root-ca.pem``
(``SEMDUP_OPENSEARCH_CA_CERTS``). The admin certificate is the only login at first: the shipped demo users are
replaced by none, so every user is made by the administrator through the REST API (:meth:`SecuredOpenSearch.api`,
or ``curl --cert``; ``docs/operations.md``, "Security plugin: users, roles and TLS")::

    node = SecuredOpenSearch(heap="768m")
    url = node.start()                                   # https://127.0.0.1:<port>
    node.api("PUT", "/_plugins/_security/api/internalusers/alice", {"password": "..."})
    node.stop()
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from semdup.core.errors import ConfigError, OpenSearchUnavailable
from semdup.devstack.local_opensearch import LocalOpenSearch
from semdup.devstack.local_process import file_lock, semdup_home
from semdup.devstack.ml_plugins import _install_plugin, ensure_ml_installed
from semdup.devstack.opensearch_distribution import DEFAULT_VERSION, Installation, fetch_artifact

__all__ = [
    "SECURITY_PLUGIN",
    "Certificates",
    "make_certificates",
    "secured_cache_dir",
    "ensure_secured_installed",
    "SecuredOpenSearch",
]

logger = logging.getLogger(__name__)

SECURITY_PLUGIN = ("org.opensearch.plugin:opensearch-security", "opensearch-security")
_MARKER = "installed.json"
_NODE_DN = "CN=semdup-node,OU=semdup,O=semdup"
_ADMIN_DN = "CN=semdup-admin,OU=semdup,O=semdup"
_DAYS = "3650"
# ml-commons' own indices: with the security plugin they are system indices, which only the plugin itself reads.
_ML_SYSTEM_INDICES = [
    ".plugins-ml-config",
    ".plugins-ml-connector",
    ".plugins-ml-controller",
    ".plugins-ml-model-group",
    ".plugins-ml-model",
    ".plugins-ml-task",
    ".plugins-ml-agent",
    ".plugins-ml-memory-meta",
    ".plugins-ml-memory-message",
    ".plugins-ml-stop-words",
    ".plugins-ml-conversation-meta",
    ".plugins-ml-conversation-interactions",
]


def secured_cache_dir() -> Path:
    """``<semdup home>/secured``: the copy with the security plugin (the ``cache_dir`` of its node)."""
    return semdup_home() / "secured"


@dataclass(frozen=True)
class Certificates:
    """PEM files one :func:`make_certificates` call wrote: the CA, the node's certificate and key (HTTP and
    transport), the admin's certificate and key (PKCS#8 keys, as the security plugin reads them)."""

    ca: Path
    node: Path
    node_key: Path
    admin: Path
    admin_key: Path


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError("making the secured node's certificates needs the openssl command: apt-get install openssl")
    done = subprocess.run([openssl, *args], capture_output=True, text=True, timeout=120, check=False)  # noqa: S603
    if done.returncode != 0:
        raise ConfigError(f"openssl {args[0]} exited {done.returncode}: {done.stderr.strip()[-300:]}")


def _subject(dn: str) -> str:
    """``CN=a,OU=b,O=c`` (RFC 2253, how the plugin compares names) as openssl's ``-subj`` (``/O=c/OU=b/CN=a``)."""
    return "/" + "/".join(reversed(dn.split(",")))


def _certificate_paths(folder: Path) -> Certificates:
    names = ("root-ca.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem")
    return Certificates(*(folder / name for name in names))


def make_certificates(folder: Path, name: str = "semdup-local-ca") -> Certificates:
    """A new CA named ``name`` and the node and admin certificates it signs, in ``folder`` (kept if there already).

    A second call with another folder makes another CA: what a test uses as the wrong one.
    """
    folder.mkdir(parents=True, exist_ok=True)
    certs = _certificate_paths(folder)
    if all(p.is_file() for p in asdict(certs).values()):
        return certs
    ca_key = folder / "root-ca-key.pem"
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(ca_key))
    _openssl("req", "-new", "-x509", "-sha256", "-days", _DAYS, "-key", str(ca_key), "-subj", f"/O=semdup/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", str(certs.ca))  # fmt: skip
    for cert, key, dn, ext in (
        (certs.node, certs.node_key, _NODE_DN,
         "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"),
        (certs.admin, certs.admin_key, _ADMIN_DN, "extendedKeyUsage=clientAuth\n"),
    ):  # fmt: skip
        csr, extfile = folder / f"{cert.stem}.csr", folder / f"{cert.stem}.ext"
        extfile.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n" + ext)
        _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key))
        _openssl("req", "-new", "-key", str(key), "-subj", _subject(dn), "-out", str(csr))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(certs.ca), "-CAkey", str(ca_key), "-CAcreateserial",
                 "-sha256", "-days", _DAYS, "-extfile", str(extfile), "-out", str(cert))  # fmt: skip
        csr.unlink()
        extfile.unlink()
    for key in (ca_key, certs.node_key, certs.admin_key):
        key.chmod(0o600)
    return certs


def _read_marker(version_dir: Path) -> Installation | None:
    try:
        data = json.loads((version_dir / _MARKER).read_text(encoding="utf-8"))
        inst = Installation(data["version"], Path(data["home"]), tuple(data["modules"]), bool(data["knn_installed"]),
                            data.get("knn_error"))  # fmt: skip
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return inst if (inst.home / "plugins" / SECURITY_PLUGIN[1]).is_dir() else None


def ensure_secured_installed(cache_dir: Path | None = None, maven_repo: Path | None = None) -> Installation:
    """OpenSearch 2.19.1 with k-NN, ml-commons, neural-search and the security plugin (built once; later calls read
    the marker).

    Raises:
        ConfigError: no Maven, an artifact Maven Central does not serve, or a plugin that refuses to install.
    """
    cache_dir = cache_dir or secured_cache_dir()
    version_dir = cache_dir / "opensearch" / DEFAULT_VERSION
    found = _read_marker(version_dir)
    if found is not None:
        return found
    base = ensure_ml_installed(maven_repo=maven_repo)
    version_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(version_dir.parent / f"{DEFAULT_VERSION}.lock"):
        found = _read_marker(version_dir)
        if found is not None:
            return found
        staging = version_dir / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        home = staging / base.home.name
        logger.info("copying %s for the secured node", base.home)
        shutil.copytree(base.home, home, symlinks=True)
        archive = fetch_artifact(f"{SECURITY_PLUGIN[0]}:{DEFAULT_VERSION}.0", "zip", maven_repo)
        logger.info("installing %s into the secured node", archive.name)
        _install_plugin(home, archive)
        final = version_dir / home.name
        shutil.rmtree(final, ignore_errors=True)
        home.rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        inst = Installation(DEFAULT_VERSION, final, base.modules, base.knn_installed, base.knn_error)
        data = asdict(inst) | {"home": str(final), "plugins": [SECURITY_PLUGIN[1]]}
        (version_dir / _MARKER).write_text(json.dumps(data, indent=2), encoding="utf-8")
        logger.info("installed the secured node's OpenSearch at %s", final)
        return inst


# The security plugin's configuration, written over the shipped demo files on every start: no internal user at all
# (the demo's admin:admin and kibanaserver are gone), so the admin certificate is the only login until the
# administrator makes users. The other files (config.yml: basic auth on HTTP; roles.yml; action groups) stay as
# the plugin ships them.
_SECURITY_FILES = {
    "internal_users.yml": '_meta:\n  type: "internalusers"\n  config_version: 2\n',
    "roles_mapping.yml": '_meta:\n  type: "rolesmapping"\n  config_version: 2\n',
}


class SecuredOpenSearch(LocalOpenSearch):
    """The embedded node with the security plugin (see the module docstring). Takes LocalOpenSearch's arguments
    but ``version`` and ``cache_dir`` (2.19.1, :func:`secured_cache_dir`). Its state folder defaults to
    ``<home>/secured/state/opensearch``; the certificates live in ``<state>/tls`` (:attr:`certificates`)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cache_dir", secured_cache_dir())
        super().__init__(version=DEFAULT_VERSION, **kwargs)
        self.certificates = _certificate_paths(self.state_dir / "tls")  # made by the first start
        self._context: ssl.SSLContext | None = None

    @property
    def http_context(self) -> ssl.SSLContext | None:  # type: ignore[override]
        """Trust the node's CA, log in with the admin certificate (None until the first start made them)."""
        if self._context is None and self.certificates.admin_key.is_file():
            context = ssl.create_default_context(cafile=str(self.certificates.ca))
            context.load_cert_chain(str(self.certificates.admin), str(self.certificates.admin_key))
            self._context = context
        return self._context

    def ensure_installed(self) -> Installation:
        """The install (:func:`ensure_secured_installed`) and this node's certificates (before its URL is chosen:
        the certificates make it https)."""
        inst = ensure_secured_installed(self.cache_dir, self.maven_repo)
        make_certificates(self.state_dir / "tls")
        return inst

    def node_settings(self) -> dict[str, Any]:
        """TLS on both layers with the node's certificate (paths relative to the config folder), the admin
        certificate's name, the security index made from the config files on first start, ml-commons' indices
        protected as system indices."""
        tls: dict[str, Any] = {}
        for layer in ("transport", "http"):
            prefix = f"plugins.security.ssl.{layer}"
            tls |= {f"{prefix}.pemcert_filepath": "node.pem", f"{prefix}.pemkey_filepath": "node-key.pem",
                    f"{prefix}.pemtrustedcas_filepath": "root-ca.pem"}  # fmt: skip
        return tls | {
            "plugins.security.ssl.transport.enforce_hostname_verification": False,
            "plugins.security.ssl.http.enabled": True,
            "plugins.security.ssl.http.clientauth_mode": "OPTIONAL",  # the admin certificate logs in over HTTP
            "plugins.security.allow_default_init_securityindex": True,
            "plugins.security.authcz.admin_dn": [_ADMIN_DN],
            "plugins.security.nodes_dn": [_NODE_DN],
            "plugins.security.restapi.roles_enabled": ["all_access", "security_rest_api_access"],
            "plugins.security.system_indices.enabled": True,
            "plugins.security.system_indices.indices": _ML_SYSTEM_INDICES,
        }

    def _prepare(self, inst: Installation, port: int, run_as: Any) -> dict[str, str]:
        conf = self.state_dir / "config"
        if not (conf / "log4j2.properties").exists():
            shutil.copytree(inst.home / "config", conf, dirs_exist_ok=True)
        for src, name in ((self.certificates.ca, "root-ca.pem"), (self.certificates.node, "node.pem"),
                          (self.certificates.node_key, "node-key.pem")):  # fmt: skip
            shutil.copyfile(src, conf / name)
        security = conf / "opensearch-security"
        if not security.is_dir():
            raise ConfigError(f"{inst.home} has no config/opensearch-security; delete {self.cache_dir} to rebuild")
        for name, text in _SECURITY_FILES.items():
            (security / name).write_text(text, encoding="utf-8")
        return super()._prepare(inst, port, run_as)

    def _wait_healthy(self, poll: Callable[[], int | None], url: str, timeout: float) -> None:
        """Health yellow or green, then the security plugin initialised (until then it answers 503 to all)."""
        deadline = time.monotonic() + timeout
        super()._wait_healthy(poll, url, timeout)
        while time.monotonic() < deadline:
            try:
                if self.api("GET", "/_plugins/_security/health", url=url).get("status") == "UP":
                    return
            except OpenSearchUnavailable:
                pass
            time.sleep(1.0)
        raise OpenSearchUnavailable(f"the security plugin at {url} did not come up within {timeout:.0f}s; see "
                                    f"{self.log_file}. Last lines:\n{self._last_lines()}")  # fmt: skip

    def api(self, method: str, path: str, body: Any = None, url: str | None = None, timeout: float = 30.0) -> Any:
        """``method path`` as the admin certificate (what an administrator runs with ``curl --cert``); the answer's
        JSON. Raises OpenSearchUnavailable with the status and body when it is not 2xx."""
        base = url or self.url
        if base is None:
            raise OpenSearchUnavailable(f"the secured node in {self.state_dir} is not running")
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(f"{base}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.http_context) as resp:  # noqa: S310
                return json.loads(resp.read().decode("utf-8") or "null")
        except urllib.error.HTTPError as exc:
            said = exc.read().decode("utf-8", "replace")[:500]
            raise OpenSearchUnavailable(f"{method} {path} answered HTTP {exc.code}: {said}", status=exc.code) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise OpenSearchUnavailable(f"{method} {base}{path} failed: {exc}") from exc
