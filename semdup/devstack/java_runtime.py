"""Pick a JDK that the requested OpenSearch version runs on.

OpenSearch 2.x installs a Java Security Manager at start-up, which Java 24 removed for good
(JEP 486: ``System.setSecurityManager`` throws), so 2.x needs Java 11 to 23. OpenSearch 3.x
dropped the Security Manager and is built for Java 21, so it needs 21 or newer. A machine often
has several JDKs (here: Debian's 17 on PATH, Temurin 25 under ``/usr/lib/jvm``), and ``JAVA_HOME``
is set for other tools, so the first JDK whose major version fits wins, looked for in this order:

1. ``$OPENSEARCH_JAVA_HOME``, 2. ``$JAVA_HOME``, 3. the ``java`` on PATH,
4. every JDK under ``$SEMDUP_JDK_DIRS`` (``os.pathsep``-separated; default ``/usr/lib/jvm``), newest first.

A candidate that does not fit is skipped with a log line; none fitting is a :class:`ConfigError`
that lists what was found.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from semdup.core.errors import ConfigError

__all__ = ["JavaRange", "java_range", "java_major", "find_java_home", "opensearch_major"]

logger = logging.getLogger(__name__)

DEFAULT_JDK_DIRS = (Path("/usr/lib/jvm"),)
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="?([^"\s]+)"?\s*$', re.MULTILINE)
_SPEC_VERSION = re.compile(r"java\.specification\.version\s*=\s*(\S+)")


@dataclass(frozen=True)
class JavaRange:
    """Java major versions an OpenSearch version runs on; ``maximum`` None means no upper bound."""

    minimum: int
    maximum: int | None = None

    def __contains__(self, major: object) -> bool:
        return isinstance(major, int) and major >= self.minimum and (self.maximum is None or major <= self.maximum)

    def __str__(self) -> str:
        return f"Java {self.minimum} or newer" if self.maximum is None else f"Java {self.minimum} to {self.maximum}"


def opensearch_major(version: str) -> int:
    """Major version of an OpenSearch release such as ``3.6.0``; anything else is a ConfigError."""
    match = _VERSION.match(version.strip())
    if match is None:
        raise ConfigError(f"OpenSearch version must look like 2.19.1 or 3.6.0, got {version!r}")
    return int(match.group(1))


def java_range(version: str) -> JavaRange:
    """The Java majors OpenSearch ``version`` runs on (see the module docstring for why)."""
    major = opensearch_major(version)
    if major >= 3:
        return JavaRange(21)
    if major == 2:
        return JavaRange(11, 23)
    raise ConfigError(f"OpenSearch {version} is not supported: semdup runs 2.x and 3.x")


def _parse_major(text: str) -> int | None:
    """``17.0.15`` -> 17, ``25`` -> 25, ``1.8.0_402`` -> 8."""
    parts = text.strip().split(".")
    try:
        return int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0].split("-")[0].split("+")[0])
    except ValueError:
        return None


def java_major(home: Path) -> int | None:
    """Major version of the JDK at ``home``: its ``release`` file, else ``java -XshowSettings``; None if unknown."""
    try:
        found = _RELEASE_VERSION.search((home / "release").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        found = None
    if found:
        return _parse_major(found.group(1))
    java = home / "bin" / "java"
    if not java.exists():
        return None
    try:
        done = subprocess.run(  # noqa: S603
            [str(java), "-XshowSettings:properties", "-version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    spec = _SPEC_VERSION.search(done.stdout + done.stderr)
    return _parse_major(spec.group(1)) if spec else None


def _jdk_dirs(env: Mapping[str, str]) -> tuple[Path, ...]:
    value = env.get("SEMDUP_JDK_DIRS")
    if value is None:
        return DEFAULT_JDK_DIRS
    return tuple(Path(part).expanduser() for part in value.split(os.pathsep) if part)


def _candidates(env: Mapping[str, str], which: Callable[[str], str | None]) -> Iterable[tuple[str, Path]]:
    """(where it came from, JDK home) in the order of the module docstring; later duplicates are dropped."""
    for var in ("OPENSEARCH_JAVA_HOME", "JAVA_HOME"):
        value = env.get(var)
        if value and (Path(value) / "bin" / "java").exists():
            yield f"${var}", Path(value)
    java = which("java")
    if java:
        yield "java on PATH", Path(java).resolve().parent.parent
    found: list[Path] = []
    for folder in _jdk_dirs(env):
        try:
            found.extend(p for p in folder.iterdir() if (p / "bin" / "java").exists())
        except OSError:
            continue
    for home in sorted(found, key=lambda p: (java_major(p) or 0, p.name), reverse=True):
        yield str(home.parent), home


def find_java_home(
    version: str, env: Mapping[str, str] | None = None, which: Callable[[str], str | None] = shutil.which
) -> Path:
    """The JDK home to run OpenSearch ``version`` with (order in the module docstring).

    Raises:
        ConfigError: no JDK in the range :func:`java_range` gives; the message lists each one found.
    """
    env = os.environ if env is None else env
    wanted = java_range(version)
    seen: dict[Path, int | None] = {}
    for origin, home in _candidates(env, which):
        key = home.resolve()
        if key in seen:
            continue
        major = seen[key] = java_major(home)
        if major in wanted:
            logger.debug("OpenSearch %s runs on Java %s at %s (%s)", version, major, home, origin)
            return home
        logger.info("skipping Java %s at %s (%s): OpenSearch %s needs %s", major, home, origin, version, wanted)
    listed = ", ".join(f"{home} (Java {major or '?'})" for home, major in seen.items()) or "none"
    dirs = os.pathsep.join(str(d) for d in _jdk_dirs(env))
    raise ConfigError(
        f"OpenSearch {version} needs {wanted}; found: {listed}. Install one under {dirs} "
        f"(e.g. apt-get install openjdk-{wanted.minimum}-jre-headless) or point OPENSEARCH_JAVA_HOME at it"
    )
