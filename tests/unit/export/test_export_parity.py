"""ONNX export parity: every architecture's bundle scores real posts as its torch checkpoint does.

Tiny untrained models (a few thousand weights) on real AskUbuntu posts: the export path, dynamic axes and the
scoring contract are what is checked, not model quality.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TINY, tiny_checkpoint

from semdup.bundle import Bundle, BundleScorer
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import parity_report, sample_posts
from semdup.training.checkpoint import CheckpointScorer, save_checkpoint
from semdup.training.registry import get_arch


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return sample_posts(48)


@pytest.fixture(scope="module")
def exported(posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("export")
    out = {}
    for arch in TINY:
        ckpt = tiny_checkpoint(arch, posts, root / f"ckpt-{arch}")
        result = export_checkpoint(ckpt, root / f"bundle-{arch}", parity_posts=posts[:16])
        out[arch] = (ckpt, result.bundle_dir)
    return out


@pytest.mark.parametrize("arch", list(TINY))
def test_onnx_matches_torch_on_real_posts(arch: str, exported: dict, posts: list[Post]) -> None:
    ckpt, bundle_dir = exported[arch]
    report = parity_report(ckpt, bundle_dir, posts)
    assert report.n_posts == len(posts)
    assert report.max_abs_dense <= 1e-4, report.to_dict()
    assert report.ok


@pytest.mark.parametrize("arch", list(TINY))
def test_bundle_scorer_equals_checkpoint_scorer(arch: str, exported: dict, posts: list[Post]) -> None:
    ckpt, bundle_dir = exported[arch]
    ref, got = CheckpointScorer.from_dir(ckpt), BundleScorer.load(bundle_dir)
    assert got.fusion == pytest.approx(ref.fusion)
    assert got.threshold == ref.threshold == 0.5
    query, candidates = posts[0], posts[1:30]
    lexical = np.linspace(3.0, 9.0, len(candidates))
    np.testing.assert_allclose(got.score(query, candidates, lexical), ref.score(query, candidates, lexical), atol=1e-5)
    np.testing.assert_allclose(got.score_matrix(posts[:10], posts[10:]), ref.score_matrix(posts[:10], posts[10:]),
                               atol=1e-5)


@pytest.mark.parametrize("arch", list(TINY))
def test_dynamic_batch_and_length(arch: str, exported: dict, posts: list[Post]) -> None:
    """One post alone and the same post inside a padded batch of long posts encode the same."""
    bundle = Bundle.load(exported[arch][1])
    alone = bundle.encode_dense([posts[3]])
    batched = bundle.encode_dense(posts[:9], batch_size=9)
    assert alone.shape == (1, bundle.dimension)
    np.testing.assert_allclose(alone[0], batched[3], atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)


def test_manifest_records_what_serving_needs(exported: dict) -> None:
    bundle = Bundle.load(exported["bow-cnn"][1])
    m = bundle.manifest
    assert bundle.version.startswith("bow-cnn-") and len(bundle.version) == len("bow-cnn-") + 12
    assert m["input_names"] == ["ids"] and m["input_kind"] == "text_ids"
    assert m["dimension"] == 16 and m["vocab_size"] == len(bundle.pipeline.vocab) == m["id_range"]
    assert m["opset"] >= 17 and m["parity"]["max_abs_dense"] <= 1e-4
    assert set(m["versions"]) >= {"semdup", "torch", "onnx", "onnxruntime"}
    assert set(m["files"]) == {"encoder.onnx", "vocab.json", "term_weights.npy"}
    rcnn = Bundle.load(exported["rcnn"][1]).manifest
    assert rcnn["input_names"] == ["title_ids", "body_ids"] and "term_weights.npy" not in rcnn["files"]


def test_same_checkpoint_gives_the_same_version(exported: dict, posts: list[Post], tmp_path: Path) -> None:
    ckpt, bundle_dir = exported["cnn"]
    again = export_checkpoint(ckpt, tmp_path / "again", parity_posts=posts[:4])
    assert again.version == Bundle.load(bundle_dir).version
    other = tiny_checkpoint("cnn", posts, tmp_path / "other-ckpt", seed=1)
    assert export_checkpoint(other, tmp_path / "other", parity_posts=posts[:4]).version != again.version


@pytest.mark.slow
def test_minilm_onnx_matches_torch(posts: list[Post], tmp_path: Path) -> None:
    """The 22M-parameter MiniLM peer (wordpiece input, tokenizer.json shipped in the bundle)."""
    torch.set_num_threads(2)
    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build([["unused"]]))
    model = get_arch("minilm").model_class.from_hparams({"max_len": 64}, pipeline, pretrained=True)
    ckpt = save_checkpoint(tmp_path / "ckpt", model, "minilm", pipeline, {"threshold": None})
    result = export_checkpoint(ckpt, tmp_path / "bundle", parity_posts=posts[:8])
    assert result.dimension == 384
    report = parity_report(ckpt, result.bundle_dir, posts[:12])
    assert report.ok, report.to_dict()
    assert "tokenizer.json" in Bundle.load(result.bundle_dir).manifest["files"]
