"""Which OpenSearch version runs, on which Java, from which state folder: no download, no JVM started.

JDKs are fake folders (``bin/java`` plus a ``release`` file, as every JDK ships one), so the choice is
checked on any machine, whatever it has under /usr/lib/jvm.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from semdup.core.errors import ConfigError
from semdup.devstack.java_runtime import JavaRange, find_java_home, java_major, java_range, opensearch_major
from semdup.devstack.local_opensearch import LocalOpenSearch, default_state_dir
from semdup.devstack.local_process import ServiceRecord, write_record
from semdup.devstack.opensearch_distribution import DEFAULT_VERSION, NEWEST_3X_VERSION, default_version


def _jdk(root: Path, name: str, release_version: str | None) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (home / "bin" / "java").chmod(0o755)
    if release_version is not None:
        (home / "release").write_text(f'IMPLEMENTOR="x"\nJAVA_VERSION="{release_version}"\n', encoding="utf-8")
    return home


def _no_java(_: str) -> None:
    return None


@pytest.fixture
def jvm_dir(tmp_path: Path) -> Path:
    """A /usr/lib/jvm like this machine's: Debian's 17 (and its alias) beside Temurin 25."""
    root = tmp_path / "jvm"
    _jdk(root, "java-17-openjdk-amd64", "17.0.15")
    (root / "java-1.17.0-openjdk-amd64").symlink_to(root / "java-17-openjdk-amd64")
    _jdk(root, "temurin-25-jdk-amd64", "25.0.3")
    return root


def test_java_ranges_follow_the_security_manager() -> None:
    assert java_range("2.19.1") == JavaRange(11, 23)  # 2.x installs a Security Manager; Java 24 removed it
    assert java_range(NEWEST_3X_VERSION) == JavaRange(21)
    assert 23 in java_range("2.19.1") and 24 not in java_range("2.19.1")
    assert 17 not in java_range("3.6.0") and 25 in java_range("3.6.0")
    assert str(java_range("3.0.0")) == "Java 21 or newer" and str(java_range("2.19.1")) == "Java 11 to 23"


@pytest.mark.parametrize("bad", ["3.6", "latest", "3.6.0-SNAPSHOT", "", "1.3.0"])
def test_malformed_or_unsupported_versions_are_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="OpenSearch"):
        java_range(bad)


def test_opensearch_major() -> None:
    assert (opensearch_major("2.19.1"), opensearch_major(" 3.6.0 ")) == (2, 3)


def test_java_major_reads_the_release_file(tmp_path: Path) -> None:
    assert java_major(_jdk(tmp_path, "a", "17.0.15")) == 17
    assert java_major(_jdk(tmp_path, "b", "25")) == 25
    assert java_major(_jdk(tmp_path, "c", "1.8.0_402")) == 8
    assert java_major(tmp_path / "missing") is None


def test_java_major_asks_java_when_there_is_no_release_file(tmp_path: Path) -> None:
    home = _jdk(tmp_path, "norelease", None)
    (home / "bin" / "java").write_text(
        "#!/bin/sh\necho 'Property settings:' >&2\necho '    java.specification.version = 21' >&2\n", encoding="utf-8"
    )
    assert java_major(home) == 21


def test_2x_keeps_the_java_on_path(jvm_dir: Path) -> None:
    path_java = str(jvm_dir / "java-17-openjdk-amd64" / "bin" / "java")
    env = {"SEMDUP_JDK_DIRS": str(jvm_dir)}
    assert find_java_home("2.19.1", env=env, which=lambda _: path_java) == jvm_dir / "java-17-openjdk-amd64"


def test_3x_skips_java_17_everywhere_and_finds_temurin_25(jvm_dir: Path) -> None:
    java17 = jvm_dir / "java-17-openjdk-amd64"
    env = {"JAVA_HOME": str(java17), "OPENSEARCH_JAVA_HOME": str(java17), "SEMDUP_JDK_DIRS": str(jvm_dir)}
    found = find_java_home("3.6.0", env=env, which=lambda _: str(java17 / "bin" / "java"))
    assert found == jvm_dir / "temurin-25-jdk-amd64"


def test_a_fitting_opensearch_java_home_wins_over_newer_jdks(jvm_dir: Path, tmp_path: Path) -> None:
    java21 = _jdk(tmp_path, "jdk-21", "21.0.5")
    env = {"OPENSEARCH_JAVA_HOME": str(java21), "SEMDUP_JDK_DIRS": str(jvm_dir)}
    assert find_java_home("3.6.0", env=env, which=_no_java) == java21


def test_the_newest_fitting_jdk_of_all_search_dirs_is_taken(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    _jdk(first, "jdk-21", "21.0.5")
    _jdk(second, "jdk-24", "24.0.1")
    env = {"SEMDUP_JDK_DIRS": os.pathsep.join([str(first), str(tmp_path / "absent"), str(second)])}
    assert find_java_home("3.6.0", env=env, which=_no_java) == second / "jdk-24"
    # 2.x takes the newest below 24: 21.
    assert find_java_home("2.19.1", env=env, which=_no_java) == first / "jdk-21"


def test_no_fitting_jdk_is_a_clear_error_listing_what_was_found(tmp_path: Path) -> None:
    root = tmp_path / "jvm"
    java17 = _jdk(root, "java-17-openjdk-amd64", "17.0.15")
    (root / "java-1.17.0-openjdk-amd64").symlink_to(java17)
    env = {"JAVA_HOME": str(java17), "SEMDUP_JDK_DIRS": str(root)}
    with pytest.raises(ConfigError) as caught:
        find_java_home("3.6.0", env=env, which=lambda _: str(java17 / "bin" / "java"))
    message = str(caught.value)
    assert "OpenSearch 3.6.0 needs Java 21 or newer" in message
    assert f"{java17} (Java 17)" in message and message.count("(Java 17)") == 1  # the alias is the same JDK
    assert "OPENSEARCH_JAVA_HOME" in message and "openjdk-21" in message


def test_2x_refuses_a_machine_with_only_java_25(tmp_path: Path) -> None:
    root = tmp_path / "jvm"
    _jdk(root, "temurin-25-jdk-amd64", "25.0.3")
    with pytest.raises(ConfigError, match="OpenSearch 2.19.1 needs Java 11 to 23"):
        find_java_home("2.19.1", env={"SEMDUP_JDK_DIRS": str(root)}, which=_no_java)


def test_default_version_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEMDUP_OPENSEARCH_VERSION", raising=False)
    assert default_version() == DEFAULT_VERSION == "2.19.1"
    monkeypatch.setenv("SEMDUP_OPENSEARCH_VERSION", NEWEST_3X_VERSION)
    assert default_version() == NEWEST_3X_VERSION
    monkeypatch.setenv("SEMDUP_OPENSEARCH_VERSION", "3")
    with pytest.raises(ConfigError, match="must look like"):
        default_version()


def test_each_version_gets_its_own_state_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEMDUP_CACHE", str(tmp_path))
    monkeypatch.delenv("SEMDUP_OPENSEARCH_VERSION", raising=False)
    assert default_state_dir() == tmp_path / "state" / "opensearch"  # 2.19.1 keeps the folder it always had
    assert default_state_dir("3.6.0") == tmp_path / "state" / "opensearch-3.6.0"
    assert LocalOpenSearch(version="3.6.0").state_dir == tmp_path / "state" / "opensearch-3.6.0"
    elsewhere = LocalOpenSearch(version="3.6.0", cache_dir=tmp_path / "c")
    assert elsewhere.state_dir == tmp_path / "c" / "state" / "opensearch-3.6.0"
    monkeypatch.setenv("SEMDUP_OPENSEARCH_VERSION", "3.6.0")
    assert LocalOpenSearch().state_dir == tmp_path / "state" / "opensearch-3.6.0"


def test_a_bad_version_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must look like"):
        LocalOpenSearch(version="../2.19.1", cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_another_version_running_in_the_state_folder_is_not_reused(tmp_path: Path) -> None:
    # A live record: this test's own pid, recognised by a string of its own command line.
    program = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
    record = ServiceRecord(os.getpid(), "http://127.0.0.1:9", 9, program, time.time(), "log", {"version": "2.19.1"})
    write_record(tmp_path / "node.json", record)
    node = LocalOpenSearch(version="3.6.0", state_dir=tmp_path)
    assert node.url == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="OpenSearch 2.19.1 already runs from .*--data"):
        node.start(timeout=1)
