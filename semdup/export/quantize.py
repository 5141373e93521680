"""Optional dynamic int8 quantisation of a bundle's encoder, shipped only with its measured quality change.

onnxruntime's ``quantize_dynamic`` stores MatMul/Gemm/Conv/Gather weights as int8 and quantises activations at
run time. It shrinks the file and can speed up CPU inference, and it changes scores, so the manifest records,
beside the int8 encoder, the official SemEval-2016 dev MAP (rerank mode) of the fp32 and the int8 encoder
measured here, and the largest change of a unit dense vector on the parity posts::

    "quantization": {"mode": "int8", "eval": "SemEval-2016 dev, rerank, official MAP",
                     "map_fp32": 59.19, "map_int8": 58.97, "map_change": -0.22, ...}

The parity figure in the manifest (``parity``) stays the fp32 encoder's against torch; an int8 bundle is not
expected to pass the 1e-4 parity check, and ``parity_report`` on it says so.

Example::

    semdup export --checkpoint artifacts/cnn-semeval --out artifacts/bundles/cnn-semeval-int8 --quantize int8
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from semdup.bundle.bundle import ENCODER_FILE, write_bundle
from semdup.core.text_pipeline import TextPipeline

__all__ = ["QUANTIZE_MODES", "quantize_encoder", "quantize_method", "quantize_files", "quantized_bundle"]

logger = logging.getLogger(__name__)

QUANTIZE_MODES = ("int8", "int8-channel")
# quantize_dynamic's arguments per mode: "int8" every MatMul/Gemm/Conv/Gather weight, one scale per tensor;
# "int8-channel" MatMul weights only (the embedding tables stay fp32), one scale per output channel: a smaller
# error (MiniLM unit vectors move by up to 0.024 instead of 0.061) at the same speed-up (about 2x on 2 CPU threads).
_MODE_ARGS: dict[str, dict[str, Any]] = {
    "int8": {},
    "int8-channel": {"per_channel": True, "op_types_to_quantize": ["MatMul"]},
}


def quantize_method(mode: str) -> str:
    """How ``mode`` quantises, as manifests record it."""
    args = ", ".join(f"{k}={v!r}" for k, v in _MODE_ARGS[mode].items())
    return f"onnxruntime.quantization.quantize_dynamic(weight_type=QInt8{', ' + args if args else ''})"


def quantize_encoder(model: bytes, mode: str = "int8") -> bytes:
    """Dynamic int8 (signed weights) version of an ONNX model's bytes (``mode``: see :data:`QUANTIZE_MODES`)."""
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"unknown quantisation {mode!r}; accepted: {', '.join(QUANTIZE_MODES)}")
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ImportError('int8 quantisation needs onnxruntime with its quantization tools: pip install '
                          '"onnxruntime>=1.17" "onnx>=1.15"') from exc
    with tempfile.TemporaryDirectory(prefix="semdup-quant-") as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model)
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, **_MODE_ARGS[mode])
        return dst.read_bytes()


def quantized_bundle(src: str | Path, out: str | Path, mode: str = "int8-channel") -> Path:
    """A copy of bundle ``src`` whose encoder is quantised (``manifest.quantization`` names the mode): the base
    of an int8 candidate that :func:`semdup.learn.default_bundle.fit_default` fits and judges on dev."""
    import json

    from semdup.bundle.bundle import MANIFEST_FILE, read_bundle_files

    files = read_bundle_files(src)
    manifest = json.loads(files.pop(MANIFEST_FILE).decode("utf-8"))
    files[ENCODER_FILE] = quantize_encoder(files[ENCODER_FILE], mode)
    manifest = {k: v for k, v in manifest.items() if k not in ("files", "version", "format_version")}
    manifest["quantization"] = {"mode": mode, "method": quantize_method(mode)}
    return write_bundle(out, files, manifest)


def quantize_files(
    files: Mapping[str, bytes], manifest: Mapping[str, Any], mode: str, pipeline: TextPipeline
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """(files with the int8 encoder, the ``quantization`` manifest entry with the measured MAP change)."""
    from semdup.bundle.scorer import BundleScorer
    from semdup.data.paths import semeval_files
    from semdup.data.semeval import load_semeval_xml
    from semdup.export.parity import sample_posts
    from semdup.measures.protocols import eval_semeval

    quantized = dict(files)
    quantized[ENCODER_FILE] = quantize_encoder(files[ENCODER_FILE], mode)
    dev = load_semeval_xml(*semeval_files("dev"))
    posts = sample_posts(64)
    figures = {}
    vectors = {}
    with tempfile.TemporaryDirectory(prefix="semdup-quant-eval-") as tmp:
        for name, variant in (("fp32", files), ("int8", quantized)):
            scorer = BundleScorer.load(write_bundle(Path(tmp) / name, variant, manifest))
            figures[name] = eval_semeval(scorer, dev)["MAP"]
            vectors[name] = scorer.bundle.encode_dense(posts)
    info = {
        "mode": mode,
        "method": quantize_method(mode),
        "eval": "SemEval-2016 dev, rerank, official MAP (percent)",
        "map_fp32": figures["fp32"],
        "map_int8": figures["int8"],
        "map_change": figures["int8"] - figures["fp32"],
        "max_abs_unit_vector_change": float(np.max(np.abs(vectors["int8"] - vectors["fp32"]))),
        "bytes_fp32": len(files[ENCODER_FILE]),
        "bytes_int8": len(quantized[ENCODER_FILE]),
    }
    logger.info("int8 quantisation: %s", info)
    return quantized, info
