"""The embedded OpenSearch with ml-commons: 2.19.1 with k-NN, job-scheduler, ml-commons and neural-search, all from
Maven Central.

Two things need a node with ml-commons: semdup inside the site's ``_search`` (a remote model and a search pipeline,
:mod:`semdup.search_pipeline`; ``semdup opensearch start --ml``, and its tests), and the neural-search peer of the
benchmarks (a text embedding model inside the cluster). It is built beside the plain embedded node, never in it::

    ensure_installed(2.19.1)  ──copy──▶  <semdup home>/neural-peer/opensearch/2.19.1/opensearch-2.19.1
    (devstack: modules + k-NN)              + opensearch-job-scheduler 2.19.1.0   (plugin zip, Maven Central)
                                            + opensearch-ml 2.19.1.0              (repacked, see below)
                                            + neural-search 2.19.1.0

The marker ``installed.json`` is the devstack's own, so ``LocalOpenSearch(cache_dir=ml_cache_dir())`` starts this
copy like any embedded node.

Offline repack: deploying a local ONNX model makes DJL initialise every engine it finds through
``META-INF/services/ai.djl.engine.EngineProvider``; the PyTorch engine then downloads libtorch, which fails
without internet and fails the deploy. :func:`repack_ml_plugin` writes a copy of the ml-commons plugin zip whose
``pytorch-engine-*.jar`` lacks that service file, so DJL finds the OnnxRuntime engine (and the Rust tokenizer
it bundles) only. The copy lives in this cache, never in the repository; the node semdup's tests use is left
alone.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import asdict
from pathlib import Path

from semdup.core.errors import ConfigError
from semdup.devstack.local_process import file_lock, semdup_home
from semdup.devstack.opensearch_distribution import (
    DEFAULT_VERSION,
    Installation,
    ensure_installed,
    fetch_artifact,
    java_home,
)

__all__ = [
    "ML_PLUGINS",
    "ENGINE_SERVICE",
    "ml_cache_dir",
    "repack_ml_plugin",
    "strip_engine_service",
    "ensure_ml_installed",
]

logger = logging.getLogger(__name__)

# (Maven coordinates without version, plugin folder name), installed in this order (ml extends job-scheduler,
# neural-search extends ml and k-NN).
ML_PLUGINS: tuple[tuple[str, str], ...] = (
    ("org.opensearch.plugin:opensearch-job-scheduler", "opensearch-job-scheduler"),
    ("org.opensearch.plugin:opensearch-ml-plugin", "opensearch-ml"),
    ("org.opensearch.plugin:neural-search", "opensearch-neural-search"),
)
ENGINE_SERVICE = "META-INF/services/ai.djl.engine.EngineProvider"
_PYTORCH_ENGINE_JAR = re.compile(r"^pytorch-engine-[0-9.]+\.jar$")
_MARKER = "installed.json"


def ml_cache_dir() -> Path:
    """``<semdup home>/neural-peer``: the copy with ml-commons (the ``cache_dir`` of its LocalOpenSearch)."""
    return semdup_home() / "neural-peer"


def strip_engine_service(jar: bytes) -> bytes:
    """The jar without :data:`ENGINE_SERVICE` (every other entry byte-identical, same order).

    Raises:
        ConfigError: the jar has no such entry (another DJL layout: the repack would change nothing).
    """
    src = zipfile.ZipFile(io.BytesIO(jar))
    if ENGINE_SERVICE not in src.namelist():
        raise ConfigError(f"the DJL PyTorch engine jar has no {ENGINE_SERVICE}; expected DJL 0.31's layout")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename != ENGINE_SERVICE:
                dst.writestr(info, src.read(info), compress_type=info.compress_type)
    return out.getvalue()


def repack_ml_plugin(src: Path, dst: Path) -> str:
    """Copy the ml-commons plugin zip ``src`` to ``dst`` with its PyTorch engine jar stripped of the DJL engine
    service (see the module docstring); returns that jar's name. Entries are stored uncompressed (the jars inside
    are compressed already), so the copy takes seconds, not minutes."""
    stripped = None
    tmp = dst.with_name(dst.name + ".tmp")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if _PYTORCH_ENGINE_JAR.match(Path(info.filename).name):
                data = strip_engine_service(data)
                stripped = info.filename
            out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            out.external_attr = info.external_attr
            zout.writestr(out, data, compress_type=zipfile.ZIP_STORED)
    if stripped is None:
        tmp.unlink()
        raise ConfigError(f"{src} holds no pytorch-engine-*.jar; expected the ml-commons 2.19 plugin layout")
    tmp.replace(dst)
    return stripped


def _read_marker(version_dir: Path) -> Installation | None:
    try:
        data = json.loads((version_dir / _MARKER).read_text(encoding="utf-8"))
        inst = Installation(data["version"], Path(data["home"]), tuple(data["modules"]), bool(data["knn_installed"]),
                            data.get("knn_error"))
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    plugins = inst.home / "plugins"
    if not all((plugins / folder).is_dir() for _, folder in ML_PLUGINS):
        return None
    return inst


def _install_plugin(home: Path, archive: Path) -> None:
    env = dict(os.environ, OPENSEARCH_JAVA_HOME=str(java_home(DEFAULT_VERSION)))
    cmd = [str(home / "bin" / "opensearch-plugin"), "install", "--batch", archive.resolve().as_uri()]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)  # noqa: S603
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"opensearch-plugin install {archive.name} took more than 600 s") from exc
    if done.returncode != 0:
        raise ConfigError(f"opensearch-plugin install {archive.name} exited {done.returncode}: "
                          f"{(done.stdout + done.stderr).strip()[-500:]}")


def ensure_ml_installed(cache_dir: Path | None = None, maven_repo: Path | None = None) -> Installation:
    """OpenSearch 2.19.1's home with the three plugins (built once; later calls read the marker).

    Raises:
        ConfigError: no Maven, an artifact Maven Central does not serve, a plugin that refuses to install, or a
            base installation without k-NN (neural-search needs it).
    """
    cache_dir = cache_dir or ml_cache_dir()
    version_dir = cache_dir / "opensearch" / DEFAULT_VERSION
    found = _read_marker(version_dir)
    if found is not None:
        return found
    base = ensure_installed(DEFAULT_VERSION, maven_repo=maven_repo)
    if not base.knn_installed:
        raise ConfigError(f"neural-search needs the k-NN plugin, which the base install lacks: {base.knn_error}")
    version_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(version_dir.parent / f"{DEFAULT_VERSION}.lock"):
        found = _read_marker(version_dir)
        if found is not None:
            return found
        staging = version_dir / f".staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        home = staging / base.home.name
        logger.info("copying %s for the neural-search peer", base.home)
        shutil.copytree(base.home, home, symlinks=True)
        plugin_version = f"{DEFAULT_VERSION}.0"
        for coords, folder in ML_PLUGINS:
            archive = fetch_artifact(f"{coords}:{plugin_version}", "zip", maven_repo)
            if folder == "opensearch-ml":
                repacked = staging / archive.name
                jar = repack_ml_plugin(archive, repacked)
                logger.info("repacked %s without DJL's PyTorch engine service (%s)", archive.name, jar)
                archive = repacked
            logger.info("installing %s into the peer's node", archive.name)
            _install_plugin(home, archive)
            if archive.parent == staging:
                archive.unlink()
        final = version_dir / home.name
        shutil.rmtree(final, ignore_errors=True)
        home.rename(final)
        shutil.rmtree(staging, ignore_errors=True)
        inst = Installation(DEFAULT_VERSION, final, base.modules, True, None)
        data = asdict(inst) | {"home": str(final), "plugins": [folder for _, folder in ML_PLUGINS]}
        (version_dir / _MARKER).write_text(json.dumps(data, indent=2), encoding="utf-8")
        logger.info("installed the neural-search peer's OpenSearch at %s", final)
        return inst
