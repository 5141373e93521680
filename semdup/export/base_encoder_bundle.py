"""A named pre-trained encoder (no training) → a verified ONNX bundle, as ``semdup export`` makes from checkpoints.

The base encoder's folder is verified against its pinned hashes (:mod:`semdup.training.base_encoders`), loaded
as the ``minilm`` architecture with ``base_encoder=<name>`` (mean pooling + L2 normalisation, exactly
sentence-transformers' ``encode``), exported and checked against torch on real posts like any checkpoint
(:func:`semdup.export.onnx_export.export_model`, refused above 1e-4). A fine-tuned checkpoint of a base encoder
goes through :func:`~semdup.export.onnx_export.export_checkpoint` instead; both record the base encoder.

The bundle is dense only (β_bow = 0, β_dense = 1, no decision threshold, a vocabulary of ``<pad>``/``<unk>``);
its manifest's ``base_encoder`` entry names the encoder, its model id, packages and pinned sha256 of
``model.safetensors`` and ``tokenizer.json``, and its ``tokenizer`` entry (part of the content hash) names
the encoder and the tokenizer's hash.

Example::

    result = export_base_encoder("mpnet", "artifacts/bundles/mpnet")
    result.version, result.dimension, result.max_abs_dense     # ("mpnet-…", 768, 2.1e-07)
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline, TextPipelineSettings, Vocabulary
from semdup.export.onnx_export import DEFAULT_OPSET, ExportResult, export_model
from semdup.export.parity import DEFAULT_TOLERANCE
from semdup.training.base_encoders import get_base_encoder
from semdup.training.checkpoint import library_versions

__all__ = ["export_base_encoder"]

logger = logging.getLogger(__name__)


def export_base_encoder(
    name: str,
    out_dir: str | Path,
    archive: bool = False,
    quantize: str | None = None,
    parity_posts: Sequence[Post] | None = None,
    max_len: int | None = None,
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Export base encoder ``name`` as it was published to a verified bundle directory.

    Args:
        name: a key of :data:`semdup.training.base_encoders.BASE_ENCODERS` (``minilm``, ``mpnet``).
        out_dir: the bundle directory (replaced if it exists).
        archive: also write ``<out_dir>.tar.gz``.
        quantize: ``None`` or ``"int8"`` (see :mod:`semdup.export.quantize`).
        parity_posts: real posts for the parity check (default: 64 AskUbuntu test posts).
        max_len: wordpieces per post (default: the encoder's own, as sentence-transformers uses it).
        opset: ONNX opset.
        tolerance: the largest |torch − ONNX| accepted on the encoder outputs.

    Raises:
        ConfigError: unknown name or packages not installed; DataError: a file does not match its pin;
        BundleError: export or parity failed.
    """
    from semdup.training.models.minilm import MiniLM

    spec = get_base_encoder(name)
    if max_len is not None and not 3 <= max_len <= spec.max_len:
        raise ValueError(f"max_len for {name} must lie in 3..{spec.max_len}; got {max_len}")
    vocab = Vocabulary.build([])  # dense only: <pad> and <unk>, no bag-of-words path
    pipeline = TextPipeline(TextPipelineSettings(), vocab)
    model = MiniLM.from_hparams({"base_encoder": name, "max_len": max_len or 0}, pipeline, pretrained=True)
    model.eval()
    with tempfile.TemporaryDirectory(prefix="semdup-vocab-") as tmp:
        vocab.save(Path(tmp) / "vocab.json")
        vocab_json = (Path(tmp) / "vocab.json").read_bytes()
    config = {"arch": spec.name, "threshold": None, "data": None, "versions": library_versions()}
    # source_checkpoint stays None: the manifest's base_encoder entry says where the weights came from
    return export_model(model, pipeline, config, out_dir, vocab_json=vocab_json, archive=archive, quantize=quantize,
                        parity_posts=parity_posts, opset=opset, tolerance=tolerance)
