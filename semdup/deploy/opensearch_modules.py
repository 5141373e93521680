"""Assemble the OpenSearch modules semdup needs from Maven Central jars.

Why: the only OpenSearch distribution on Maven Central, ``integ-test-zip``, ships with one module
(transport-netty4). semdup needs four more that the full distribution bundles:

* ``lang-mustache``  stored search templates (``_render/template``, ``_msearch/template``);
* ``lang-painless``  the scripted TF-IDF similarity, and the k-NN plugin extends it;
* ``mapper-extras``  the ``rank_features`` field for learned BOW term weights;
* ``analysis-common`` the ``english`` analyzer and common token filters.

OpenSearch publishes each module's code jar to Maven Central (``org.opensearch.plugin:<name>[-client]``);
we fetch those and their third-party jars with ``mvn dependency:get`` and write the
``plugin-descriptor.properties`` and security policy that the full distribution carries.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from pathlib import Path

from semdup.errors import ConfigError

__all__ = ["ModuleSpec", "MODULES", "install_modules", "maven_jar"]

logger = logging.getLogger(__name__)

_OS = "{version}"  # replaced by the OpenSearch version


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    classname: str
    artifacts: tuple[str, ...]  # group:artifact:version (jar); "{version}" = the OpenSearch version
    policy: str = ""
    description: str = ""


MODULES: tuple[ModuleSpec, ...] = (
    ModuleSpec(
        name="lang-painless",
        classname="org.opensearch.painless.PainlessPlugin",
        artifacts=(
            f"org.opensearch.plugin:lang-painless:{_OS}",
            f"org.opensearch.plugin:opensearch-scripting-painless-spi:{_OS}",
            "org.antlr:antlr4-runtime:4.13.1",
            "org.ow2.asm:asm:9.7",
            "org.ow2.asm:asm-util:9.7",
            "org.ow2.asm:asm-tree:9.7",
            "org.ow2.asm:asm-commons:9.7",
            "org.ow2.asm:asm-analysis:9.7",
        ),
        policy='grant {\n  permission java.lang.RuntimePermission "createClassLoader";\n'
        '  permission java.lang.RuntimePermission "getClassLoader";\n};\n',
        description="An easy, safe and fast scripting language for OpenSearch",
    ),
    ModuleSpec(
        name="lang-mustache",
        classname="org.opensearch.script.mustache.MustachePlugin",
        artifacts=(f"org.opensearch.plugin:lang-mustache-client:{_OS}", "com.github.spullara.mustache.java:compiler:0.9.14"),
        policy='grant {\n  permission java.lang.RuntimePermission "accessDeclaredMembers";\n};\n',
        description="Mustache scripting integration for OpenSearch",
    ),
    ModuleSpec(
        name="mapper-extras",
        classname="org.opensearch.index.mapper.MapperExtrasPlugin",
        artifacts=(f"org.opensearch.plugin:mapper-extras-client:{_OS}",),
        description="Adds advanced field mappers (rank_features among them)",
    ),
    ModuleSpec(
        name="analysis-common",
        classname="org.opensearch.analysis.common.CommonAnalysisPlugin",
        artifacts=(f"org.opensearch.plugin:analysis-common:{_OS}",),
        description="Adds common text analysis (the english analyzer among them)",
    ),
)


def maven_jar(coordinate: str, m2: Path | None = None, packaging: str = "jar") -> Path:
    """Path of ``group:artifact:version`` in the local Maven cache, fetched from Maven Central if absent."""
    group, artifact, version = coordinate.split(":")
    m2 = m2 or Path.home() / ".m2" / "repository"
    path = m2.joinpath(*group.split("."), artifact, version, f"{artifact}-{version}.{packaging}")
    if path.exists():
        return path
    cmd = ["mvn", "-q", "-B", "dependency:get", f"-Dartifact={coordinate}:{packaging}", "-Dtransitive=false"]
    logger.info("fetching %s from Maven Central", coordinate)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as exc:
        raise ConfigError("Maven ('mvn') is not on PATH; install it (apt-get install maven)") from exc
    if proc.returncode != 0 or not path.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise ConfigError(f"could not fetch {coordinate} from Maven Central with {' '.join(cmd)}: {' | '.join(tail)}")
    return path


def install_modules(home: Path, version: str, modules: tuple[ModuleSpec, ...] = MODULES) -> list[str]:
    """Write each module into ``<home>/modules/<name>``; returns the names installed now (idempotent)."""
    installed = []
    for spec in modules:
        target = home / "modules" / spec.name
        descriptor = target / "plugin-descriptor.properties"
        if descriptor.exists():
            continue
        target.mkdir(parents=True, exist_ok=True)
        for coordinate in spec.artifacts:
            jar = maven_jar(coordinate.replace(_OS, version))
            (target / jar.name).write_bytes(jar.read_bytes())
        if spec.policy:
            (target / "plugin-security.policy").write_text(spec.policy, encoding="utf-8")
        # Written last: its presence marks a complete module.
        descriptor.write_text(
            "\n".join(
                [
                    f"description={spec.description}",
                    f"version={version}",
                    f"name={spec.name}",
                    f"classname={spec.classname}",
                    "java.version=11",
                    f"opensearch.version={version}",
                    "extended.plugins=",
                    "has.native.controller=false",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        installed.append(spec.name)
    return installed
