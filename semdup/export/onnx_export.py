"""torch → ONNX, and a checkpoint directory (or a loaded model) → a verified model bundle (torch).

:func:`export_encoder` writes an architecture's ``dense_encoder()`` with the TorchScript-based exporter
(``torch.onnx.export(..., dynamo=False)``): it handles both traced modules (BOW-CNN, CNN, SCQA, MiniLM) and
scripted ones (RCNN's recurrence becomes one ONNX ``Loop``). Every input of the input kind gets dynamic batch
and length axes; the output is ``vector`` [batch, D]; the graph passes ``onnx.checker.check_model``.

:func:`export_checkpoint` does the whole job; :func:`export_model` is its second half, shared with
:func:`semdup.export.base_encoder_bundle.export_base_encoder` (a pre-trained encoder, no checkpoint)::

    checkpoint DIR ──load──▶ model ──ONNX──▶ parity on real posts (refused above 1e-4) ──▶ bundle DIR
                             (export_model from here)                                  └──▶ BUNDLE.tar.gz

Example::

    result = export_checkpoint("artifacts/bow-cnn-travel", "artifacts/bundles/bow-cnn-travel", archive=True)
    result.version, result.parity.max_abs_dense     # ("bow-cnn-3f2a9c0d1e7b", 3.6e-07)
"""

from __future__ import annotations

import io
import json
import logging
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from semdup.bundle.bundle import (
    ENCODER_FILE,
    OUTPUT_NAME,
    TERM_WEIGHTS_FILE,
    TOKENIZER_FILE,
    VOCAB_FILE,
    Bundle,
    write_archive,
    write_bundle,
)
from semdup.bundle.verify import expected_id_range, make_session
from semdup.core.errors import BundleError
from semdup.core.inputs import build_inputs, input_names
from semdup.core.posts import Post
from semdup.core.text_pipeline import TextPipeline
from semdup.export.parity import DEFAULT_TOLERANCE, dense_parity, sample_posts
from semdup.training.checkpoint import METRICS_FILE, library_versions, load_checkpoint
from semdup.training.models._base import EncoderModel

__all__ = ["DEFAULT_OPSET", "ExportResult", "export_encoder", "export_checkpoint", "export_model", "example_posts"]

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 17


@dataclass(frozen=True)
class ExportResult:
    """Where the bundle went and how close it is to the checkpoint."""

    bundle_dir: Path
    archive: Path | None
    version: str
    dimension: int | None
    max_abs_dense: float
    n_parity_posts: int
    quantization: dict[str, Any] | None = None


def example_posts(pipeline: TextPipeline) -> list[Post]:
    """Two posts of different lengths made of vocabulary words, to trace the encoder with."""
    words = pipeline.vocab.itos[2:60] if pipeline.vocab is not None and len(pipeline.vocab) > 2 else ["mount", "usb"]
    return [Post("example-1", " ".join(words[:6]), " ".join(words[6:40])), Post("example-2", " ".join(words[:3]), "")]


def export_encoder(
    encoder: nn.Module, input_kind: str, example: Mapping[str, np.ndarray], opset: int = DEFAULT_OPSET
) -> bytes:
    """The ONNX bytes of ``encoder`` with dynamic batch and length axes on every input, checked by onnx.

    Args:
        encoder: the dense encoder (``forward(*inputs in input_names(kind) order) -> [B, D]``), eval mode.
        input_kind: its input kind.
        example: example arrays (from ``build_inputs``) to trace with.
        opset: ONNX opset (>= 17).

    Raises:
        BundleError: the exporter or the onnx checker failed (the message holds their reason).
    """
    try:
        import onnx
    except ImportError as exc:
        raise ImportError('exporting needs onnx: pip install "semdup[train]"') from exc
    if opset < 17:
        raise ValueError(f"opset {opset} is too old; accepted: 17 or newer")
    names = list(input_names(input_kind))
    args = tuple(torch.from_numpy(np.asarray(example[n])) for n in names)
    axes = {n: {0: "batch", 1: f"{n}_length"} for n in names}
    axes[OUTPUT_NAME] = {0: "batch"}
    encoder.eval()
    with tempfile.TemporaryDirectory(prefix="semdup-onnx-") as tmp:
        path = Path(tmp) / ENCODER_FILE
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
                torch.onnx.export(encoder, args, str(path), input_names=names, output_names=[OUTPUT_NAME],
                                  dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
        except Exception as exc:  # the exporter raises many unrelated types
            raise BundleError(f"torch.onnx.export failed for the {input_kind} encoder: {exc}") from exc
        model = onnx.load(str(path))  # external data (> 2 GB) is folded back in here
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise BundleError(f"the exported ONNX graph does not pass onnx.checker: {exc}") from exc
    return model.SerializeToString()


@contextmanager
def eager_attention(encoder: nn.Module) -> Iterator[str | None]:
    """Trace transformer encoders with the plain (``eager``) attention; yields ``"eager"``, or None when the
    encoder holds no Hugging Face transformer (CNN family: nothing to switch). Restores the implementation after.

    transformers uses torch's ``scaled_dot_product_attention`` by default; traced to ONNX, that becomes a graph
    with extra mask arithmetic (``Where``, casts) that onnxruntime runs slower on CPU. The eager attention traces
    to the classic MatMul / Softmax / MatMul pattern: on MiniLM and Travel posts, 2 threads, about 10 % less
    CPU per post at the same outputs (max |diff| 1.2e-07; figures and command in semdup/export/README.md).
    """
    switched = []
    for module in encoder.modules():
        setter = getattr(module, "set_attn_implementation", None)
        config = getattr(module, "config", None)
        current = getattr(config, "_attn_implementation", None)
        if setter is not None and current is not None:
            if current != "eager":
                setter("eager")
                switched.append((setter, current))
            break  # the top transformer passes it down to its layers
    else:
        yield None
        return
    try:
        yield "eager"
    finally:
        for setter, previous in switched:
            setter(previous)


def _read_metrics(ckpt: Path) -> dict[str, Any]:
    path = ckpt / METRICS_FILE
    if not path.exists():
        logger.warning("%s has no %s; the bundle will carry no dev/test figures (train with 'semdup train')",
                       ckpt, METRICS_FILE)
        return {}
    metrics = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in metrics.items() if k != "curve"}


def _tokenizer_entry(model: EncoderModel) -> dict[str, Any] | None:
    """The manifest's ``tokenizer``: file, max_len and, for a registered base encoder, its name and the hash of
    the tokenizer.json it shipped with (this entry enters the bundle's content hash)."""
    if model.input_kind != "wordpiece":
        return None
    entry: dict[str, Any] = {"file": TOKENIZER_FILE, "max_len": int(model.hparams["max_len"])}
    record = getattr(model, "base_encoder_record", None)
    if record is not None:
        base = record()
        entry.update(base_encoder=base["name"], sha256=base["tokenizer_sha256"])
    return entry


def _manifest(model: EncoderModel, pipeline: TextPipeline, config: Mapping[str, Any], metrics: Mapping[str, Any],
              source: str | None, dimension: int | None, opset: int,
              term_weights: np.ndarray | None) -> dict[str, Any]:
    kind = model.input_kind
    record = getattr(model, "base_encoder_record", None)
    return {
        "architecture": config["arch"],
        "input_kind": kind,
        "input_names": list(input_names(kind)),
        "output_name": OUTPUT_NAME,
        "dimension": dimension,
        "id_range": expected_id_range(kind, pipeline, len(pipeline.vocab)),
        "fusion": model.fusion(),
        "threshold": config.get("threshold"),
        "pipeline": pipeline.settings.to_dict(),
        "tokenizer": _tokenizer_entry(model),
        "vocab_size": len(pipeline.vocab),
        "hparams": model.get_config_dict(),
        "term_weights": None if term_weights is None else {
            # <pad> and <unk> (ids 0, 1) have weight 0 by construction and never reach encode_terms
            "count": int(len(term_weights)), "nonpositive": int((term_weights[2:] <= 0).sum()),
        },
        "data": config.get("data"),
        "metrics": dict(metrics),
        "trained_with": config.get("versions"),
        "versions": library_versions(),
        "opset": opset,
        "exporter": "torch.onnx.export(dynamo=False)",
        "source_checkpoint": source,
        "base_encoder": None if record is None else record(),
    }


def export_checkpoint(
    checkpoint_dir: str | Path,
    out_dir: str | Path,
    archive: bool = False,
    quantize: str | None = None,
    parity_posts: Sequence[Post] | None = None,
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Export a training checkpoint to a verified bundle directory (and ``<out_dir>.tar.gz`` with ``archive``).

    Args:
        checkpoint_dir: what ``semdup train`` wrote.
        out_dir: the bundle directory (replaced if it exists).
        archive: also write ``<out_dir>.tar.gz``.
        quantize: ``None`` or ``"int8"`` (dynamic int8 weights, shipped with its measured SemEval dev MAP change).
        parity_posts: real posts for the parity check (default: 64 AskUbuntu test posts).
        opset: ONNX opset.
        tolerance: the largest |torch − ONNX| accepted on the raw encoder outputs.

    Raises:
        BundleError: export failed, the parity check failed, or the written bundle does not verify.
    """
    ckpt = Path(checkpoint_dir)
    model, pipeline, config = load_checkpoint(ckpt)
    return export_model(model, pipeline, config, out_dir, vocab_json=(ckpt / VOCAB_FILE).read_bytes(),
                        metrics=_read_metrics(ckpt), source=str(ckpt), archive=archive, quantize=quantize,
                        parity_posts=parity_posts, opset=opset, tolerance=tolerance)


def export_model(
    model: EncoderModel,
    pipeline: TextPipeline,
    config: Mapping[str, Any],
    out_dir: str | Path,
    vocab_json: bytes,
    metrics: Mapping[str, Any] | None = None,
    source: str | None = None,
    archive: bool = False,
    quantize: str | None = None,
    parity_posts: Sequence[Post] | None = None,
    opset: int = DEFAULT_OPSET,
    tolerance: float = DEFAULT_TOLERANCE,
) -> ExportResult:
    """Export a loaded model to a verified bundle (the part of :func:`export_checkpoint` after loading).

    Args:
        model: the model, its weights final.
        pipeline: its text pipeline (vocabulary, and the wordpiece tokenizer if any).
        config: at least ``arch``; ``threshold``, ``data`` and ``versions`` (training's libraries) if known.
        out_dir: the bundle directory (replaced if it exists).
        vocab_json: the vocabulary file's bytes (``Vocabulary.save``).
        metrics: dev/test figures to ship in the manifest.
        source: where the weights came from (the checkpoint directory), recorded in the manifest.
        archive, quantize, parity_posts, opset, tolerance: as :func:`export_checkpoint`.

    Raises:
        BundleError: export failed, the parity check failed, or the written bundle does not verify.
    """
    posts = list(parity_posts) if parity_posts is not None else sample_posts(64)
    files: dict[str, bytes] = {VOCAB_FILE: vocab_json}
    encoder = model.dense_encoder()
    dimension, max_abs, attention = None, 0.0, None
    if encoder is not None:
        example = build_inputs(model.input_kind, pipeline, example_posts(pipeline))
        with torch.no_grad():
            names = input_names(model.input_kind)
            dimension = int(encoder(*[torch.from_numpy(example[n]) for n in names]).shape[1])
        with eager_attention(encoder) as attention:
            files[ENCODER_FILE] = export_encoder(encoder, model.input_kind, example, opset)
        session = make_session(files[ENCODER_FILE], ["CPUExecutionProvider"], None)
        # against the torch module as it was trained and is scored (its own attention), not the traced variant
        max_abs = dense_parity(encoder, session, model.input_kind, pipeline, posts)
        logger.info("ONNX vs torch on %d real posts: max |diff| %.3g", len(posts), max_abs)
        if not max_abs <= tolerance:
            raise BundleError(f"ONNX and torch outputs differ by up to {max_abs:.3g} on {len(posts)} real posts, "
                              f"more than the tolerance {tolerance:g}; the encoder does not export faithfully")
    t = model.term_weights()
    if t is not None:
        buf = io.BytesIO()
        np.save(buf, np.asarray(t, dtype=np.float32), allow_pickle=False)
        files[TERM_WEIGHTS_FILE] = buf.getvalue()
    if model.input_kind == "wordpiece":
        files[TOKENIZER_FILE] = Path(model.tokenizer_path).read_bytes()
    manifest = _manifest(model, pipeline, config, metrics or {}, source, dimension, opset, t)
    manifest["parity"] = {"n_posts": len(posts), "max_abs_dense": max_abs, "tolerance": tolerance}
    if attention is not None:
        manifest["export_attention"] = attention
    quant = None
    if quantize is not None:
        from semdup.export.quantize import quantize_files

        files, quant = quantize_files(files, manifest, quantize, pipeline)
        manifest["quantization"] = quant
    out = write_bundle(out_dir, files, manifest)
    bundle = Bundle.load(out)  # the written bundle must verify before anyone gets it
    arch_path = write_archive(out, Path(str(out) + ".tar.gz")) if archive else None
    if arch_path is not None:
        Bundle.load(arch_path)
    return ExportResult(out, arch_path, bundle.version, dimension, max_abs, len(posts), quant)
