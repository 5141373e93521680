"""Model bundles at serving time: load + verify, manifest and version, the onnxruntime scorer.
Torch-free; writing bundles is :mod:`semdup.export`."""

from __future__ import annotations

from semdup.bundle.bundle import Bundle, write_archive, write_bundle
from semdup.bundle.scorer import BundleScorer

__all__ = ["Bundle", "BundleScorer", "write_archive", "write_bundle"]
