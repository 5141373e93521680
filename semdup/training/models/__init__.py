"""Trainable architectures, one per file; each registers itself in :mod:`semdup.training.registry`.

Import ``semdup.training.registry.get_arch(name)`` rather than these modules directly: it imports
the right module lazily. The shared interface (:class:`EncoderModel`, :class:`Encoded`) is in
``_base.py``; see ``semdup/training/README.md``.
"""

from __future__ import annotations

__all__: list[str] = []
