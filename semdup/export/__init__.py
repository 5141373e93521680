"""Trained encoders → verified ONNX model bundles, and the torch-free API that serves them.

    bundle.py          Bundle (load + verify, encode_dense / encode_terms / document_fields), write/read/archive
    bundle_check.py    the cross-checks Bundle.load runs (vocab ↔ term weights ↔ ONNX inputs, outputs, id range)
    bundle_scorer.py   BundleScorer: PostScorer over onnxruntime (same maths as CheckpointScorer)
    onnx_export.py     torch → ONNX and checkpoint → bundle (imports torch)
    parity.py          ONNX vs torch differences on real posts
    quantize.py        optional dynamic int8, shipped only with its measured MAP change

Only ``onnx_export``, ``parity`` and ``quantize`` import torch; importing this package does not.
"""

from __future__ import annotations

from semdup.export.bundle import Bundle, write_archive, write_bundle
from semdup.export.bundle_scorer import BundleScorer

__all__ = ["Bundle", "BundleScorer", "write_bundle", "write_archive"]
