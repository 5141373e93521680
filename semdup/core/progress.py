"""Progress bars on long work, and none when the output is not a terminal (logs and CI stay clean).

Every bar in semdup goes through :func:`progress`; tqdm's ``disable=None`` is what hides a bar on a
non-TTY stderr.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

__all__ = ["progress"]

T = TypeVar("T")


def progress(iterable: Iterable[T] | None = None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm bar over ``iterable`` (or a manual one with ``total=``), shown only when ``enabled`` and stderr is a
    terminal."""
    return tqdm(iterable, disable=None if enabled else True, **kwargs)
