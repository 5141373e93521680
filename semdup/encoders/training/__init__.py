"""Training: data builders (``pairs``), recipes per data set (``recipes``), offline evaluation
(``offline_eval``) and the loop (``trainer``, the only one that imports torch)."""

from __future__ import annotations

__all__: list[str] = []
