"""Encoders: the text pipeline, input kinds, the scoring contract, models, training and checkpoints.

Torch-free modules (``text_pipeline``, ``inputs``, ``scorer``, ``registry``, ``shingles``,
``lexical_scores``) may be imported anywhere; ``models``, ``losses``, ``checkpoint`` and
``training.trainer`` import torch and belong to training and export only. See README.md.
"""

from __future__ import annotations

__all__: list[str] = []
