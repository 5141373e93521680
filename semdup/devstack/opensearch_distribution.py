"""Assemble a runnable OpenSearch from what Maven Central publishes (no Docker, no other download site).

Maven Central carries OpenSearch's ``integ-test-zip`` distribution, which holds the server but
only one module (``transport-netty4``): no Painless, no Mustache, no ``rank_features``, no
common analyzers. The full distribution's modules are published there too, as plain jars
(``org.opensearch.plugin:lang-painless`` ...), so we rebuild each module folder from its jar,
the dependencies its POM lists, a ``plugin-descriptor.properties`` and the security policy the
full distribution ships. Then the k-NN plugin zip (``org.opensearch.plugin:opensearch-knn``)
is installed with ``bin/opensearch-plugin install --batch``; it needs ``lang-painless`` (it
extends it). Its zip carries no native faiss/nmslib libraries: only the ``lucene`` engine works.

From 3.x on (3.6.0 checked) the ``integ-test-zip`` already carries the full module set (and
``transport-grpc``, which the 3.x k-NN plugin extends): modules the zip has are kept, not rebuilt.
Each version runs on its own Java range (:mod:`semdup.devstack.java_runtime`: 2.x on 11-23, 3.x on 21+).

Everything is unpacked once per version under ``<semdup home>/opensearch/<version>`` and a
marker (``installed.json``) records the result, so later starts skip all of this.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from semdup.core.errors import ConfigError
from semdup.core.progress import progress
from semdup.devstack.java_runtime import find_java_home, java_range, opensearch_major
from semdup.devstack.local_process import file_lock, semdup_home

__all__ = [
    "DEFAULT_VERSION",
    "NEWEST_3X_VERSION",
    "Installation",
    "default_version",
    "default_maven_repo",
    "java_home",
    "fetch_artifact",
    "ensure_installed",
]

logger = logging.getLogger(__name__)

DEFAULT_VERSION = "2.19.1"
# The newest 3.x whose integ-test-zip and k-NN zip Maven Central serves and that passes semdup's tests here
# (3.7.0 and 3.8.0 have no k-NN zip there). Tested with the command in README.md ("Supported OpenSearch versions").
NEWEST_3X_VERSION = "3.6.0"
_MARKER = "installed.json"
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


@dataclass(frozen=True)
class _ModuleSpec:
    """One module of the full distribution, rebuilt from its Maven Central jar."""

    name: str
    artifact: str  # group:artifactId; its version is the OpenSearch version
    classname: str
    description: str
    policy: str = ""  # plugin-security.policy, copied from the module's source in OpenSearch


_MODULES: tuple[_ModuleSpec, ...] = (
    _ModuleSpec(
        "lang-painless",
        "org.opensearch.plugin:lang-painless",
        "org.opensearch.painless.PainlessPlugin",
        "An easy, safe and fast scripting language for OpenSearch",
        'grant {\n  permission java.lang.RuntimePermission "createClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n};\n',
    ),
    _ModuleSpec(
        "lang-mustache",
        "org.opensearch.plugin:lang-mustache-client",
        "org.opensearch.script.mustache.MustachePlugin",
        "Mustache scripting integration for OpenSearch",
        'grant {\n  permission java.lang.reflect.ReflectPermission "suppressAccessChecks";\n'
        '  permission java.lang.RuntimePermission "accessDeclaredMembers";\n};\n',
    ),
    _ModuleSpec(
        "mapper-extras",
        "org.opensearch.plugin:mapper-extras-client",
        "org.opensearch.index.mapper.MapperExtrasPlugin",
        "Adds advanced field mappers (rank_feature, rank_features, scaled_float, ...)",
    ),
    _ModuleSpec(
        "analysis-common",
        "org.opensearch.plugin:analysis-common",
        "org.opensearch.analysis.common.CommonAnalysisPlugin",
        'Adds "built in" analyzers to OpenSearch.',
    ),
    _ModuleSpec(
        "reindex",
        "org.opensearch.plugin:reindex-client",
        "org.opensearch.index.reindex.ReindexPlugin",
        "The Reindex module adds APIs to reindex from one index to another or update documents in place.",
        'grant {\n  permission java.net.SocketPermission "*", "connect";\n};\n',
    ),
)


@dataclass(frozen=True)
class Installation:
    """An unpacked, assembled OpenSearch home and what went into it."""

    version: str
    home: Path
    modules: tuple[str, ...]
    knn_installed: bool
    knn_error: str | None = None

    @property
    def knn_engines(self) -> tuple[str, ...]:
        """Engines that work here: the Maven k-NN zip has no native libraries, so lucene only."""
        return ("lucene",) if self.knn_installed else ()


def default_version() -> str:
    """``$SEMDUP_OPENSEARCH_VERSION`` or :data:`DEFAULT_VERSION`; a malformed value is a ConfigError."""
    version = os.environ.get("SEMDUP_OPENSEARCH_VERSION", "").strip() or DEFAULT_VERSION
    opensearch_major(version)
    return version


def default_maven_repo() -> Path:
    env = os.environ.get("SEMDUP_MAVEN_REPO")
    return Path(env).expanduser() if env else Path.home() / ".m2" / "repository"


def java_home(version: str | None = None) -> Path:
    """The JDK to run OpenSearch ``version`` (default :func:`default_version`) with.

    The first of $OPENSEARCH_JAVA_HOME, $JAVA_HOME, the ``java`` on PATH, the JDKs under /usr/lib/jvm
    whose major version fits that release (see :mod:`semdup.devstack.java_runtime`); else a ConfigError.
    """
    return find_java_home(version or default_version())


def _artifact_path(repo: Path, coords: str, ext: str) -> Path:
    group, artifact, version = coords.split(":")
    return repo / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.{ext}"


def fetch_artifact(coords: str, ext: str, repo: Path | None = None, timeout: float = 600.0) -> Path:
    """Path of ``group:artifact:version`` with extension ``ext`` in the local Maven repo, fetched if absent.

    Uses ``mvn dependency:get`` (Maven's own client, checksums checked) against Maven Central.
    """
    repo = repo or default_maven_repo()
    path = _artifact_path(repo, coords, ext)
    if path.is_file():
        return path
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(f"{coords}:{ext} is not in {repo} and Maven (mvn) is not installed: apt-get install maven")
    cmd = [mvn, "-q", "-B", "dependency:get", f"-Dartifact={coords}:{ext}", "-Dtransitive=false"]
    cmd.append(f"-Dmaven.repo.local={repo}")
    logger.info("fetching %s:%s from Maven Central", coords, ext)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"mvn took more than {timeout:.0f}s to fetch {coords}:{ext}; check the network") from exc
    if done.returncode != 0 or not path.is_file():
        detail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        raise ConfigError(
            f"could not fetch {coords}:{ext} from Maven Central (mvn exit {done.returncode}): {' | '.join(detail)}. "
            f"Check the version (SEMDUP_OPENSEARCH_VERSION) and network"
        )
    return path


def _pom_dependencies(pom: Path) -> list[str]:
    """Direct compile/runtime dependencies listed in a POM, as group:artifact:version."""
    try:
        root = ET.parse(pom).getroot()
    except ET.ParseError as exc:
        raise ConfigError(f"unreadable POM {pom}: {exc}; delete it so Maven fetches it again") from exc
    deps = []
    for dep in root.findall("m:dependencies/m:dependency", _POM_NS):
        scope = dep.findtext("m:scope", "compile", _POM_NS)
        if scope not in ("compile", "runtime") or dep.findtext("m:optional", "false", _POM_NS) == "true":
            continue
        parts = [dep.findtext(f"m:{tag}", "", _POM_NS).strip() for tag in ("groupId", "artifactId", "version")]
        if not all(parts) or "${" in parts[2]:
            raise ConfigError(f"{pom} lists a dependency without a plain version: {parts}")
        deps.append(":".join(parts))
    return deps


def _module_jars(coords: str, lib_jars: set[str], repo: Path) -> list[Path]:
    """The module's jar plus every dependency jar the server's lib/ does not already hold."""
    jars: list[Path] = []
    seen: set[str] = set()
    todo = [coords]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        _, artifact, version = current.split(":")
        if f"{artifact}-{version}.jar" in lib_jars:
            continue
        jars.append(fetch_artifact(current, "jar", repo))
        if current.startswith("org.opensearch"):
            # OpenSearch's POMs list every needed jar explicitly (third-party ones exclude '*').
            todo.extend(_pom_dependencies(fetch_artifact(current, "pom", repo)))
    return jars


def _assemble_module(home: Path, spec: _ModuleSpec, version: str, repo: Path) -> None:
    lib_jars = {p.name for p in (home / "lib").glob("*.jar")}
    target = home / "modules" / spec.name
    target.mkdir(parents=True, exist_ok=True)
    for jar in _module_jars(f"{spec.artifact}:{version}", lib_jars, repo):
        shutil.copy2(jar, target / jar.name)
    descriptor = {
        "description": spec.description,
        "version": version,
        "name": spec.name,
        "classname": spec.classname,
        "java.version": str(java_range(version).minimum),
        "opensearch.version": version,
        "extended.plugins": "",
        "has.native.controller": "false",
    }
    text = "".join(f"{key}={value}\n" for key, value in descriptor.items())
    (target / "plugin-descriptor.properties").write_text(text, encoding="utf-8")
    if spec.policy:
        (target / "plugin-security.policy").write_text(spec.policy, encoding="utf-8")


def _unzip(archive: Path, target: Path) -> None:
    """Unzip keeping the executable bits (zipfile alone drops them)."""
    with zipfile.ZipFile(archive) as zf:
        for info in progress(zf.infolist(), desc=f"unpacking {archive.name}", unit="file", leave=False):
            path = zf.extract(info, target)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)


def _install_knn(home: Path, version: str, repo: Path) -> str | None:
    """Install the k-NN plugin; return None on success, else why it failed (the node runs without it)."""
    try:
        archive = fetch_artifact(f"org.opensearch.plugin:opensearch-knn:{version}.0", "zip", repo)
    except ConfigError as exc:
        return str(exc)
    env = dict(os.environ, OPENSEARCH_JAVA_HOME=str(java_home(version)))
    cmd = [str(home / "bin" / "opensearch-plugin"), "install", "--batch", archive.resolve().as_uri()]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)  # noqa: S603
    except subprocess.TimeoutExpired:
        return "opensearch-plugin install took more than 300s"
    if done.returncode != 0:
        return f"opensearch-plugin install exited {done.returncode}: {(done.stdout + done.stderr).strip()[-500:]}"
    return None


def _read_marker(version_dir: Path) -> Installation | None:
    try:
        data = json.loads((version_dir / _MARKER).read_text(encoding="utf-8"))
        inst = Installation(
            version=data["version"],
            home=Path(data["home"]),
            modules=tuple(data["modules"]),
            knn_installed=bool(data["knn_installed"]),
            knn_error=data.get("knn_error"),
        )
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return inst if (inst.home / "bin" / "opensearch").exists() else None


def ensure_installed(
    version: str | None = None, cache_dir: Path | None = None, maven_repo: Path | None = None
) -> Installation:
    """Unpack and assemble OpenSearch ``version`` once; later calls return the recorded result.

    Safe to call from several processes at once (a lock file serialises them).
    """
    version = version or default_version()
    java_range(version)  # a malformed or unsupported version fails here, before any download
    cache_dir = cache_dir or semdup_home()
    repo = maven_repo or default_maven_repo()
    version_dir = cache_dir / "opensearch" / version
    found = _read_marker(version_dir)
    if found is not None:
        return found
    with file_lock(cache_dir / "opensearch" / f"{version}.lock"):
        found = _read_marker(version_dir)
        if found is not None:
            return found
        archive = fetch_artifact(f"org.opensearch.distribution.integ-test-zip:opensearch:{version}", "zip", repo)
        staging = version_dir / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _unzip(archive, staging)
        home = staging / f"opensearch-{version}"
        missing = [spec for spec in _MODULES if not (home / "modules" / spec.name).is_dir()]
        for spec in progress(missing, desc="assembling modules", unit="module", leave=False):
            _assemble_module(home, spec, version, repo)
        knn_error = _install_knn(home, version, repo)
        if knn_error:
            logger.warning("running without k-NN: %s", knn_error)
        final = version_dir / f"opensearch-{version}"
        shutil.rmtree(final, ignore_errors=True)
        home.rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        inst = Installation(
            version=version,
            home=final,
            modules=tuple(sorted(p.name for p in (final / "modules").iterdir())),
            knn_installed=knn_error is None,
            knn_error=knn_error,
        )
        data = asdict(inst) | {"home": str(final), "source": str(archive)}
        (version_dir / _MARKER).write_text(json.dumps(data, indent=2), encoding="utf-8")
        logger.info(
            "installed OpenSearch %s at %s (modules %s, k-NN %s)", version, final, inst.modules, inst.knn_installed
        )
        return inst
