"""How the workers flag duplicates: the tree's ``alerts:`` section, declared once, here (:class:`AlertsSection`, a
frozen pydantic model), and what the flagging task takes (:class:`AlertSettings`). No environment.

The composition root builds it from the settings tree (:meth:`semdup.apps.settings.Settings.alert_settings`): the
candidate paths are the service's own (``SEMDUP_TEMPLATES``, ``SEMDUP_KNN`` ...: one section of the tree for both,
so the flagging workers and the service cannot rank with different templates), ``flag_k`` is ``SEMDUP_FLAG_K``
(None when unset: the calibration's k, the one its threshold was chosen for, else :data:`DEFAULT_K`;
:func:`resolve_k`), the calibration ``SEMDUP_CALIBRATION`` (None: beside the bundle). Whether the indexing tasks
chain flagging at all (``SEMDUP_FLAG_DUPLICATES``, ``flag_duplicates``) is the worker runtime's
(:mod:`semdup.indexer.runtime`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator

from semdup.core.errors import ConfigError
from semdup.reranker.calibration import Calibration
from semdup.reranker.settings import RerankerSettings

__all__ = ["AlertsSection", "AlertSettings", "DEFAULT_K", "resolve_k"]

DEFAULT_K = 10  # flags per post when neither the settings nor the calibration say


class AlertsSection(BaseModel):
    """Duplicate flagging chained by the indexing tasks (the tree's ``alerts:`` section): whether, and ``flag_k``
    flags at most per post (None: the calibration's k, what its threshold was chosen for, else :data:`DEFAULT_K`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flag_duplicates: bool = False
    flag_k: int | None = None

    @field_validator("flag_k")
    @classmethod
    def _k(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 100:
            raise ConfigError(f"SEMDUP_FLAG_K must be within 1..100, got {value}")
        return value


class AlertSettings(AlertsSection):
    """How a worker flags: the alerts section's fields (inherited), with the candidate paths and the calibration
    file (None: beside the bundle)."""

    reranker: RerankerSettings = RerankerSettings()
    calibration: str | None = None


def resolve_k(settings: AlertsSection, calibration: Calibration | None) -> int:
    """The k a worker flags with: ``SEMDUP_FLAG_K`` when set, else the calibration's (the k its threshold was
    chosen with), else :data:`DEFAULT_K`."""
    if settings.flag_k is not None:
        return settings.flag_k
    if calibration is not None and calibration.k is not None:
        return calibration.k
    return DEFAULT_K
