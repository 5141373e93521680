"""Training: data builders (``pairs``), the loop (``trainer``, imports torch), offline evaluation (``offline_eval``)."""

from __future__ import annotations

__all__: list[str] = []
