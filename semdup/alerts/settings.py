"""Settings of duplicate flagging in the workers, read from the environment at the edge (worker start-up).

    SEMDUP_FLAG_DUPLICATES     1 makes index_posts / sync_posts send FLAG_DUPLICATES for the posts they wrote  off
    SEMDUP_FLAG_K              at most this many flags per post (the top k candidates are looked at)          10
    SEMDUP_CALIBRATION         calibration file (threshold, Platt)         <bundle>.calibration.json beside it
    SEMDUP_TEMPLATES, SEMDUP_TEMPLATE_VARIANT, SEMDUP_SPARSE, SEMDUP_KNN (default auto), SEMDUP_K_CANDIDATES,
    SEMDUP_SEARCH_TIMEOUT      the candidate paths, as for ``semdup serve`` (semdup.reranker.settings)

The switch itself is :func:`flag_duplicates_enabled` (kept in :mod:`semdup.core.flagging` so the indexer, a lower
layer, can read it too).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from semdup.core.errors import ConfigError
from semdup.core.flagging import FLAG_DUPLICATES_ENV, flag_duplicates_enabled
from semdup.core.settings import parse_auto_bool, parse_bool
from semdup.reranker.settings import RerankerSettings

__all__ = ["AlertSettings", "flag_duplicates_enabled", "FLAG_DUPLICATES_ENV"]


@dataclass(frozen=True)
class AlertSettings:
    """How a worker flags: ``k`` flags at most per post, the candidate paths, the calibration file (None: beside
    the bundle)."""

    k: int = 10
    reranker: RerankerSettings = field(default_factory=RerankerSettings)
    calibration: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.k <= 100:
            raise ConfigError(f"SEMDUP_FLAG_K must be within 1..100, got {self.k}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AlertSettings:
        """Settings from the environment (the variables in the module doc).

        Raises:
            ConfigError: a malformed number or boolean, an unknown template.
        """
        env = os.environ if env is None else env

        def get(name: str, default: str) -> str:
            return env.get(name, "").strip() or default

        try:
            reranker = RerankerSettings(
                templates=tuple(t.strip() for t in get("SEMDUP_TEMPLATES", "bm25").split(",") if t.strip()),
                variant=get("SEMDUP_TEMPLATE_VARIANT", "text"),
                sparse=parse_bool("SEMDUP_SPARSE", get("SEMDUP_SPARSE", "false")),
                knn=parse_auto_bool("SEMDUP_KNN", env.get("SEMDUP_KNN")),
                k_candidates=int(get("SEMDUP_K_CANDIDATES", "100")),
                search_timeout=float(get("SEMDUP_SEARCH_TIMEOUT", "5")),
            )
            k = int(get("SEMDUP_FLAG_K", "10"))
        except ValueError as exc:
            raise ConfigError(f"a flagging setting is not a number where one is needed: {exc}") from exc
        return cls(k=k, reranker=reranker, calibration=env.get("SEMDUP_CALIBRATION", "").strip() or None)
