"""Bundles from named base encoders: verified, ONNX equal to torch and to sentence-transformers, provenance kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from semdup.bundle import Bundle
from semdup.cli.export_cmd import export
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.core.wordpiece import wordpiece_text
from semdup.export.base_encoder_bundle import export_base_encoder
from semdup.export.onnx_export import export_checkpoint
from semdup.export.parity import sample_posts
from semdup.training.base_encoders import get_base_encoder
from semdup.training.checkpoint import save_checkpoint
from semdup.training.models.minilm import MiniLM


@pytest.fixture(scope="module")
def posts() -> list[Post]:
    return sample_posts(16)


@pytest.fixture(scope="module")
def minilm_bundle(posts: list[Post], tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(2)
    out = tmp_path_factory.mktemp("base") / "minilm"
    return export_base_encoder("minilm", out, parity_posts=posts[:8], max_len=128).bundle_dir


def _check_manifest(bundle: Bundle, name: str, max_len: int) -> None:
    spec = get_base_encoder(name)
    m = bundle.manifest
    assert m["base_encoder"]["name"] == name and m["base_encoder"]["model_sha256"] == spec.model_sha256
    assert m["base_encoder"]["packages"] == spec.requirements()
    assert m["tokenizer"] == {"file": "tokenizer.json", "max_len": max_len, "base_encoder": name,
                              "sha256": spec.files["tokenizer.json"]}
    assert m["files"]["tokenizer.json"]["sha256"] == spec.files["tokenizer.json"]  # the pinned file is shipped
    assert m["fusion"] == {"beta_bow": 0.0, "beta_dense": 1.0, "alpha": 0.0}
    assert bundle.dimension == spec.dimension and bundle.term_weights is None
    assert m["parity"]["max_abs_dense"] <= 1e-4 and m["parity"]["n_posts"] == 8
    assert m["export_attention"] == "eager"  # traced with the plain attention onnxruntime runs faster


def _sentence_transformers(name: str, texts: list[str], max_len: int) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    from semdup.training.base_encoders import base_encoder_dir

    st = SentenceTransformer(str(base_encoder_dir(name)), device="cpu")
    st.max_seq_length = max_len
    return st.encode(texts, convert_to_numpy=True)


def test_minilm_bundle_records_its_base_encoder(minilm_bundle: Path) -> None:
    bundle = Bundle.load(minilm_bundle)
    _check_manifest(bundle, "minilm", 128)
    assert bundle.version.startswith("minilm-") and bundle.threshold is None  # no decision threshold chosen


def test_minilm_bundle_vectors_equal_sentence_transformers(minilm_bundle: Path, posts: list[Post]) -> None:
    got = Bundle.load(minilm_bundle).encode_dense(posts)
    ref = _sentence_transformers("minilm", [wordpiece_text(p, TextPipelineSettings()) for p in posts], 128)
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_cli_takes_exactly_one_source(tmp_path: Path) -> None:
    runner = CliRunner()
    neither = runner.invoke(export, ["--out", str(tmp_path / "b")])
    both = runner.invoke(export, ["--checkpoint", str(tmp_path), "--base-encoder", "minilm", "--out", str(tmp_path)])
    parity = runner.invoke(export, ["--base-encoder", "minilm", "--out", str(tmp_path), "--parity-only"])
    unknown = runner.invoke(export, ["--base-encoder", "bert", "--out", str(tmp_path)])
    for result in (neither, both, parity, unknown):
        assert result.exit_code == 2
    assert "exactly one of --checkpoint and --base-encoder" in neither.output
    assert "'bert' is not one of 'minilm', 'mpnet'" in unknown.output


@pytest.mark.slow
def test_fine_tuned_checkpoint_bundle_records_its_base_encoder(posts: list[Post], tmp_path: Path) -> None:
    torch.set_num_threads(2)
    pipeline = TextPipeline(TextPipelineSettings(), Vocabulary.build([]))
    model = MiniLM.from_hparams({"max_len": 64, "freeze_layers": 5}, pipeline)
    with torch.no_grad():  # as fine-tuning moves the top layer
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn_like(p))
    ckpt = save_checkpoint(tmp_path / "ckpt", model, "minilm", pipeline, {"threshold": 0.5})
    bundle = Bundle.load(export_checkpoint(ckpt, tmp_path / "bundle", parity_posts=posts[:8]).bundle_dir)
    _check_manifest(bundle, "minilm", 64)
    assert bundle.manifest["hparams"]["base_encoder"] == "minilm" and bundle.threshold == 0.5


@pytest.mark.slow
def test_mpnet_bundle_equals_sentence_transformers(posts: list[Post], tmp_path: Path) -> None:
    """110M parameters (about 2 min on two CPU threads): <s>/</s>, <pad> = 1, 768-d."""
    torch.set_num_threads(2)
    result = export_base_encoder("mpnet", tmp_path / "mpnet", parity_posts=posts[:8], max_len=128)
    bundle = Bundle.load(result.bundle_dir)
    _check_manifest(bundle, "mpnet", 128)
    assert bundle.version.startswith("mpnet-") and bundle.threshold is None
    ref = _sentence_transformers("mpnet", [wordpiece_text(p, TextPipelineSettings()) for p in posts], 128)
    np.testing.assert_allclose(bundle.encode_dense(posts), ref, atol=1e-4)
