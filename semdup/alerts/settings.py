"""How the workers flag duplicates, as the flagging task takes it: a frozen dataclass, no environment.

The composition root builds it from the settings tree (:meth:`semdup.apps.settings.Settings.alert_settings`): the
candidate paths are the service's own (``SEMDUP_TEMPLATES``, ``SEMDUP_KNN`` ...: one section of the tree for both,
so the flagging workers and the service cannot rank with different templates), ``k`` is ``SEMDUP_FLAG_K`` (None
when unset: the calibration's k, the one its threshold was chosen for, else :data:`DEFAULT_K`; :func:`resolve_k`),
the calibration ``SEMDUP_CALIBRATION`` (None: beside the bundle). Whether the indexing tasks chain flagging at all
(``SEMDUP_FLAG_DUPLICATES``) is the worker runtime's ``flag_duplicates`` (:mod:`semdup.ingest.celery_app`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semdup.core.errors import ConfigError
from semdup.reranker.calibration import Calibration
from semdup.reranker.settings import RerankerSettings

__all__ = ["AlertSettings", "DEFAULT_K", "resolve_k"]

DEFAULT_K = 10  # flags per post when neither the settings nor the calibration say


@dataclass(frozen=True)
class AlertSettings:
    """How a worker flags: ``k`` flags at most per post (None: the calibration's), the candidate paths, the
    calibration file (None: beside the bundle)."""

    k: int | None = None
    reranker: RerankerSettings = field(default_factory=RerankerSettings)
    calibration: str | None = None

    def __post_init__(self) -> None:
        if self.k is not None and not 1 <= self.k <= 100:
            raise ConfigError(f"SEMDUP_FLAG_K must be within 1..100, got {self.k}")


def resolve_k(settings: AlertSettings, calibration: Calibration | None) -> int:
    """The k a worker flags with: ``SEMDUP_FLAG_K`` when set, else the calibration's (the k its threshold was
    chosen with), else :data:`DEFAULT_K`."""
    if settings.k is not None:
        return settings.k
    if calibration is not None and calibration.k is not None:
        return calibration.k
    return DEFAULT_K
