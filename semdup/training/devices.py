"""Which torch device a training run uses: ``auto`` (CUDA when torch sees a GPU, else CPU), ``cpu`` or ``cuda``.

Asking for ``cuda`` where torch sees none is refused before anything is loaded, in one line that says what torch
found, rather than failing inside the first step. On CUDA the learn recipe runs under bf16 autocast (the same
recipe: weights, optimiser and loss stay float32); on CPU bf16 was measured slower here (19 vs 10 s a step on
2 cores), so CPU stays float32.

Example::

    resolve_device("auto")   # "cuda" on a GPU machine, else "cpu"
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

from semdup.core.errors import ConfigError

__all__ = ["DEVICES", "resolve_device", "autocast"]

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> str:
    """``cpu`` or ``cuda`` for ``device`` (one of :data:`DEVICES`).

    Raises:
        ConfigError: ``cuda`` without a CUDA device torch can use, or an unknown name.
    """
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}; accepted: {', '.join(DEVICES)}")
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        built = torch.version.cuda or "none (a CPU-only build)"
        raise ConfigError(f"--device cuda: torch {torch.__version__} sees no CUDA device (its CUDA: {built}); "
                          "use --device cpu, or auto to take a GPU only where there is one")
    return "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"


@contextlib.contextmanager
def autocast(device: str) -> Iterator[None]:
    """bf16 mixed precision on CUDA, nothing on CPU (see the module doc)."""
    if device == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield
